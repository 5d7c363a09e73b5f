// Candidate for eval problem rms_norm_bf16_prefill (x: bf16[512, 2048], w: bf16[2048] -> y: bf16[512, 2048]); ABI: docs/eval.md.
extern "C" __constant__ unsigned int opfuse_eval_launch[7] = {512, 1, 1, 256, 1, 1, 0};  // one block per row, 8 elements a thread
#define ROWS 512
#define COLS 2048
#define THREADS 256
#define EPS 1e-5f
__device__ __forceinline__ float bf2f(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ __forceinline__ unsigned short f2bf(float f) {  // round to nearest even
  unsigned u = __float_as_uint(f);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float lo(unsigned v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float hi(unsigned v) { return __uint_as_float(v & 0xFFFF0000u); }
__device__ __forceinline__ unsigned pack(float a, float b) { return (unsigned)f2bf(a) | ((unsigned)f2bf(b) << 16); }
// Correct: one block per row; each thread loads 8 bf16 (one 16-byte load, buffers are 256-byte
// aligned), sum of squares in f32 reduced over the block (warp shuffles, then warp 0), then
// y = x * rsqrt(mean(x^2) + eps) * w in f32, rounded once to bf16.
extern "C" __global__ void opfuse_eval_kernel(const unsigned short* x, const unsigned short* w, unsigned short* y) {
  __shared__ float partial[THREADS / 32];
  __shared__ float rstd_s;
  const int row = blockIdx.x, t = threadIdx.x;
  const uint4 xv = reinterpret_cast<const uint4*>(x + (size_t)row * COLS)[t];
  const uint4 wv = reinterpret_cast<const uint4*>(w)[t];
  float v[8] = {lo(xv.x), hi(xv.x), lo(xv.y), hi(xv.y), lo(xv.z), hi(xv.z), lo(xv.w), hi(xv.w)};
  const float g[8] = {lo(wv.x), hi(wv.x), lo(wv.y), hi(wv.y), lo(wv.z), hi(wv.z), lo(wv.w), hi(wv.w)};
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k) ss += v[k] * v[k];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xFFFFFFFFu, ss, o);
  if ((t & 31) == 0) partial[t >> 5] = ss;
  __syncthreads();
  if (t < 32) {
    float s = t < THREADS / 32 ? partial[t] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
    if (t == 0) rstd_s = rsqrtf(s * (1.0f / COLS) + EPS);
  }
  __syncthreads();
  const float r = rstd_s;
#pragma unroll
  for (int k = 0; k < 8; ++k) v[k] = v[k] * r * g[k];
  uint4 out;
  out.x = pack(v[0], v[1]);
  out.y = pack(v[2], v[3]);
  out.z = pack(v[4], v[5]);
  out.w = pack(v[6], v[7]);
  reinterpret_cast<uint4*>(y + (size_t)row * COLS)[t] = out;
}
