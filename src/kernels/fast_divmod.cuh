// FastDivmod: exact 32-bit division by a runtime divisor with one multiply-high and a shift, for
// kernels that split a flat index into n-d coordinates (elementwise.cu, view.cu, rope.cu). Its own
// header so kernels that do not include kernel_common.cuh can use it.
#pragma once
#include <cstdint>

namespace opfuse::kernels {

// ------------------------------------------------------------------ fast division
// Exact q = n / d, r = n % d for n, d < 2^31 (round-up multiplier, CUTLASS's FastDivmod).
struct FastDivmod {
  uint32_t d = 1, mul = 0, shr = 0;
  FastDivmod() = default;
  __host__ explicit FastDivmod(uint32_t divisor) : d(divisor) {
    if (d <= 1) { d = 1; mul = 0; shr = 0; return; }
    uint32_t l = 0;
    while ((uint64_t{1} << l) < d) ++l;  // ceil(log2 d)
    const uint32_t p = 31 + l;
    mul = static_cast<uint32_t>(((uint64_t{1} << p) + d - 1) / d);
    shr = p - 32;
  }
  __host__ __device__ __forceinline__ uint32_t Div(uint32_t n) const {
    if (d == 1) return n;
#ifdef __CUDA_ARCH__
    return __umulhi(n, mul) >> shr;
#else
    return static_cast<uint32_t>((static_cast<uint64_t>(n) * mul) >> 32) >> shr;
#endif
  }
  __host__ __device__ __forceinline__ void DivMod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = Div(n);
    r = n - q * d;
  }
};
inline constexpr int64_t kFastIndexLimit = (int64_t{1} << 31) - 1;  // FastDivmod's exact range

}  // namespace opfuse::kernels
