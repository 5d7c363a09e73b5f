// Candidate for eval problem argmax_f32_decode (logits: f32[8, 32000] -> y: i64[8, 1]); ABI: docs/eval.md.
extern "C" __constant__ unsigned int opfuse_eval_launch[7] = {8, 1, 1, 1024, 1, 1, 0};  // one block per row
#define ROWS 8
#define COLS 32000
#define THREADS 1024
#define VECS (COLS / 4)  // 8000 float4 a row (a row is 128000 bytes, 16-byte aligned)
// (a, ia) beats (b, ib): larger value, NaN above everything (as the reference: the first NaN wins),
// on equal values the smaller index.
__device__ __forceinline__ bool beats(float a, int ia, float b, int ib) {
  const bool an = a != a, bn = b != b;
  if (an || bn) return an && (!bn || ia < ib);
  return a > b || (a == b && ia < ib);
}
// Correct: one block per row. Each thread scans its float4s in increasing index order keeping the
// first maximum (strictly greater replaces), seeded with its own first element so an all -inf row
// still gives index 0; then (value, index) pairs are reduced over the block with beats(): the
// larger value, and on ties the smaller index, i.e. the FIRST index of the row's maximum.
extern "C" __global__ void opfuse_eval_kernel(const float* logits, long long* y) {
  __shared__ float sv[THREADS / 32];
  __shared__ int si[THREADS / 32];
  const int row = blockIdx.x, t = threadIdx.x;
  const float4* xr = reinterpret_cast<const float4*>(logits + (size_t)row * COLS);
  float best;
  int bi;
  {
    const float4 q = xr[t];  // VECS >= THREADS: every thread has a first vector
    best = q.x;
    bi = 4 * t;
    if (beats(q.y, 4 * t + 1, best, bi)) { best = q.y; bi = 4 * t + 1; }
    if (beats(q.z, 4 * t + 2, best, bi)) { best = q.z; bi = 4 * t + 2; }
    if (beats(q.w, 4 * t + 3, best, bi)) { best = q.w; bi = 4 * t + 3; }
  }
  for (int j = t + THREADS; j < VECS; j += THREADS) {
    const float4 q = xr[j];
    if (beats(q.x, 4 * j, best, bi)) { best = q.x; bi = 4 * j; }
    if (beats(q.y, 4 * j + 1, best, bi)) { best = q.y; bi = 4 * j + 1; }
    if (beats(q.z, 4 * j + 2, best, bi)) { best = q.z; bi = 4 * j + 2; }
    if (beats(q.w, 4 * j + 3, best, bi)) { best = q.w; bi = 4 * j + 3; }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xFFFFFFFFu, best, o);
    const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
    if (beats(ov, oi, best, bi)) { best = ov; bi = oi; }
  }
  if ((t & 31) == 0) { sv[t >> 5] = best; si[t >> 5] = bi; }
  __syncthreads();
  if (t < 32) {
    best = sv[t];  // THREADS / 32 == 32 partials
    bi = si[t];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xFFFFFFFFu, best, o);
      const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
      if (beats(ov, oi, best, bi)) { best = ov; bi = oi; }
    }
    if (t == 0) y[row] = (long long)bi;
  }
}
