// Device helpers of the attention kernels (attention_general.cu, attention_mma.cu): conversions,
// 16-byte unpacking, warp reductions, cp.async, the online-softmax merge. Internal to src/kernels/.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention_plan.h"
#include "kernels/pdl.cuh"

namespace opfuse::kernels::attn {

constexpr int kWarps = kAttentionWarps;
constexpr int kThreads = kAttentionThreads;


__device__ __forceinline__ float ToF32(float x) { return x; }
__device__ __forceinline__ float ToF32(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T FromF32(float x);
template <>
__device__ __forceinline__ float FromF32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half FromF32<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// The 16 bytes of a uint4 as 16 / sizeof(T) floats.
__device__ __forceinline__ void Unpack(const uint4& u, float* f, const float*) {
  f[0] = __uint_as_float(u.x);
  f[1] = __uint_as_float(u.y);
  f[2] = __uint_as_float(u.z);
  f[3] = __uint_as_float(u.w);
}
__device__ __forceinline__ void Unpack(const uint4& u, float* f, const __half*) {
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __half22float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}
__device__ __forceinline__ void Unpack(const uint4& u, float* f, const __nv_bfloat16*) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

__device__ __forceinline__ float WarpMax(float x) { return fz::warp_reduce<fz::MaxOp>(x, 32); }
__device__ __forceinline__ float WarpSum(float x) { return fz::warp_reduce<fz::SumOp>(x, 32); }

__device__ __forceinline__ uint32_t SmemAddr(const void* p) { return fz::smem_addr(p); }
// 16-byte global -> shared copy; src_bytes = 0 zero-fills the destination (src is not read).
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, int src_bytes) { fz::cp_async16(dst, src, src_bytes); }
__device__ __forceinline__ void CpAsyncCommit() { fz::cp_async_commit(); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  fz::cp_async_wait<N>();
}

// n online-softmax partials merged: max m (log2 units), sum l, unnormalised accumulator a. A partial
// that saw no key has m = -inf and weighs 0; so does a merge of only such partials (Value() 0).
struct Merged {
  float m, l, a;
  __device__ float Value() const { return l > 0.f ? a / l : 0.f; }
};
template <class M, class L, class A>
__device__ __forceinline__ Merged MergePartials(int n, M m_of, L l_of, A a_of) {
  Merged r{-INFINITY, 0.f, 0.f};
  for (int i = 0; i < n; ++i) r.m = fmaxf(r.m, m_of(i));
  if (r.m == -INFINITY) return r;
  for (int i = 0; i < n; ++i) {
    const float sc = exp2f(m_of(i) - r.m);
    r.l = fmaf(sc, l_of(i), r.l);
    r.a = fmaf(sc, a_of(i), r.a);
  }
  return r;
}

}  // namespace opfuse::kernels::attn
