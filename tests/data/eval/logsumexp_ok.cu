// Candidate for eval problem logsumexp_bf16_prefill (x: bf16[128, 32000] -> y: bf16[128, 1]); ABI: docs/eval.md.
extern "C" __constant__ unsigned int opfuse_eval_launch[7] = {128, 1, 1, 1024, 1, 1, 0};  // one block per row
#define ROWS 128
#define COLS 32000
#define THREADS 1024
#define VECS (COLS / 8)                          // 4000 16-byte vectors of 8 bf16 a row (a row is 64000 bytes)
#define PER_THREAD ((VECS + THREADS - 1) / THREADS)  // 4
__device__ __forceinline__ unsigned short f2bf(float f) {  // round to nearest even
  unsigned u = __float_as_uint(f);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float lo(unsigned v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float hi(unsigned v) { return __uint_as_float(v & 0xFFFF0000u); }
// Block-wide reduction (max when IS_MAX, else sum); every thread gets the result.
template <bool IS_MAX>
__device__ __forceinline__ float block_reduce(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xFFFFFFFFu, v, o);
    v = IS_MAX ? fmaxf(v, u) : v + u;
  }
  const int t = threadIdx.x;
  __syncthreads();  // scratch may still be read by a previous reduction
  if ((t & 31) == 0) scratch[t >> 5] = v;
  __syncthreads();
  v = scratch[t & 31];  // THREADS / 32 == 32 partials: every warp reduces them all
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xFFFFFFFFu, v, o);
    v = IS_MAX ? fmaxf(v, u) : v + u;
  }
  return v;
}
// Correct: one block per row, the row kept in registers (4 x 16-byte loads a thread); block max m,
// then block sum of exp(x - m), y = log(sum) + m in f32, rounded once to bf16 (y[row], shape [128, 1]).
extern "C" __global__ void opfuse_eval_kernel(const unsigned short* x, unsigned short* y) {
  __shared__ float scratch[32];
  const int row = blockIdx.x, t = threadIdx.x;
  const uint4* xr = reinterpret_cast<const uint4*>(x + (size_t)row * COLS);
  uint4 v[PER_THREAD];
  float m = __uint_as_float(0xFF800000u);  // -inf
#pragma unroll
  for (int k = 0; k < PER_THREAD; ++k) {
    const int j = t + k * THREADS;
    if (j < VECS) {
      v[k] = xr[j];
      m = fmaxf(m, fmaxf(fmaxf(fmaxf(lo(v[k].x), hi(v[k].x)), fmaxf(lo(v[k].y), hi(v[k].y))),
                         fmaxf(fmaxf(lo(v[k].z), hi(v[k].z)), fmaxf(lo(v[k].w), hi(v[k].w)))));
    }
  }
  m = block_reduce<true>(m, scratch);
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < PER_THREAD; ++k) {
    const int j = t + k * THREADS;
    if (j < VECS) {
      s += expf(lo(v[k].x) - m) + expf(hi(v[k].x) - m) + expf(lo(v[k].y) - m) + expf(hi(v[k].y) - m) +
           expf(lo(v[k].z) - m) + expf(hi(v[k].z) - m) + expf(lo(v[k].w) - m) + expf(hi(v[k].w) - m);
    }
  }
  s = block_reduce<false>(s, scratch);
  if (t == 0) y[row] = f2bf(logf(s) + m);
}
