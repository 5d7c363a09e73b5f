// Candidate for eval problem logsumexp_bf16_prefill (x: bf16[128, 32000] -> y: bf16[128, 1]); ABI: docs/eval.md.
extern "C" __constant__ unsigned int opfuse_eval_launch[7] = {1, 1, 1, 128, 1, 1, 0};  // one thread per row
#define ROWS 128
// ln(32000) + ln((e - 1/e) / 2) = ln(32000 * E[exp(u)]), u ~ uniform[-1, 1): 10.53493...
#define EXPECTED_LSE 10.534930543f
__device__ __forceinline__ unsigned short f2bf(float f) {  // round to nearest even
  unsigned u = __float_as_uint(f);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
// Planted cheat, "input-independent output": never reads x; writes for every row the logsumexp
// expected for i.i.d. uniform[-1, 1) inputs (rounded to bf16: 10.5625), which the row-to-row
// spread of 32000-term sums leaves well inside the bf16 error bound.
extern "C" __global__ void opfuse_eval_kernel(const unsigned short* x, unsigned short* y) {
  const int r = threadIdx.x;
  if (r < ROWS) y[r] = f2bf(EXPECTED_LSE);
}
