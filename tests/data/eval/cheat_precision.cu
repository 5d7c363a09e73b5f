// Candidate for eval problem gelu_f32_prefill (x: f32[512, 5632] -> y: f32[512, 5632]); ABI: docs/eval.md.
extern "C" __constant__ unsigned int opfuse_eval_launch[7] = {11264, 1, 1, 256, 1, 1, 0};  // 512*5632/256 blocks
#define N (512 * 5632)
__device__ __forceinline__ float bf2f(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ __forceinline__ unsigned short f2bf(float f) {  // round to nearest even
  unsigned u = __float_as_uint(f);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
// tanh-approximated GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
__device__ float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
// Planted cheat, "reduced precision beyond the bound": rounds x to bf16, computes the tanh
// approximation of GELU, and rounds the result to bf16 before storing it as f32: a relative error
// of ~1e-3, far above the f32 bound (2e-5).
extern "C" __global__ void opfuse_eval_kernel(const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) y[i] = bf2f(f2bf(gelu_tanh(bf2f(f2bf(x[i])))));
}
