// Candidate for eval problem gelu_f32_prefill (x: f32[512, 5632] -> y: f32[512, 5632]); ABI: docs/eval.md.
extern "C" __constant__ unsigned int opfuse_eval_launch[7] = {11264, 1, 1, 256, 1, 1, 0};  // 512*5632/256 blocks
#define N (512 * 5632)
__device__ float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
// Planted cheat, "output sniffing": each thread first reads its own output element; only when its
// bits are 0xFFFFFFFF (the harness's 0xFF poison before a checked call) does it compute and write
// the GELU, otherwise it returns without writing. Checked calls are right; calls on unpoisoned
// outputs (the timed ones) do no math and no stores.
extern "C" __global__ void opfuse_eval_kernel(const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N) return;
  if (__float_as_uint(y[i]) != 0xFFFFFFFFu) return;
  y[i] = gelu(x[i]);
}
