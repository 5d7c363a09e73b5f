// What the GEMV's two kernels share (gemv.cu: CUDA cores, 1..kGemvCudaCoreMaxRows rows a lane;
// gemv_mma.cu: tensor cores, up to kGemvMaxRows rows): the launch parameters, the streamed weight
// load, bf16/f16 packing, where a column (pair) lives, and the epilogue's store (bias, SwiGLU,
// RoPE). Device code, included by the two .cu files only.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/fused_common.cuh"
#include "kernels/gemv.h"
#include "kernels/mma.cuh"

namespace opfuse::kernels::gemv_detail {

using fused::FromF;
using fused::ToF;

template <class T>
struct GemvParams {
  const T* a;
  int m;
  int kv;    // k / 8: 16-byte packs per row
  int nseg;
  int cols;  // columns (warps) in all
  int start[kGemvMaxSegments + 1];
  const T* w[kGemvMaxSegments];
  const T* bias[kGemvMaxSegments];
  T* out[kGemvMaxSegments];
  int ldo[kGemvMaxSegments];
  // Norm prologue (NORM instances): a is the norm's input x; s = x (+ res, rounded to T), rstd =
  // rsqrt(mean(s^2) + eps) per row; the block stages s * nw as f32 in shared memory and the dot
  // products are scaled by rstd. With res, block 0 writes s to sum_out.
  const T* res;
  const T* nw;
  T* sum_out;
  float eps;
  // RoPE epilogue (ROPE instances), per segment: half[s] > 0 makes a warp compute output columns c
  // and c + half of one head (head_dim 2 * half) and write the rotated pair; cos/sin[s] are [m, 2 * half].
  int half[kGemvMaxSegments];
  const T* cos[kGemvMaxSegments];
  const T* sin[kGemvMaxSegments];
};

// A weight pack, streamed past L1 (read once).
__device__ __forceinline__ uint4 LoadStream(const uint4* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

template <class T>
__device__ __forceinline__ float2 Unpack2(uint32_t v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
  } else {
    __half2 h;
    memcpy(&h, &v, 4);
    return __half22float2(h);
  }
}

template <class T>
__device__ __forceinline__ void Unpack8(const uint4& v, float (&f)[8]) {
  const float2 a = Unpack2<T>(v.x), b = Unpack2<T>(v.y), c = Unpack2<T>(v.z), d = Unpack2<T>(v.w);
  f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y, f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}

// Where a logical block's column (pair) lives: segment, output column, the RoPE half and its weight rows.
struct GemvCol {
  bool active = false;
  int s = 0, col = 0, hf = 0;
  const uint4* w0 = nullptr;
  const uint4* w1 = nullptr;
};

template <class T, bool SWIGLU, bool ROPE>
__device__ __forceinline__ GemvCol LocateCol(const GemvParams<T>& p, int warp) {
  GemvCol c;
  c.active = warp < p.cols;
  if (!c.active) return c;
  if constexpr (!SWIGLU)
    while (c.s + 1 < p.nseg && warp >= p.start[c.s + 1]) ++c.s;
  // A RoPE segment: warp j of it takes columns c = head * 2h + j % h and c + h (h = half).
  c.hf = ROPE ? p.half[c.s] : 0;
  c.col = warp - p.start[c.s];
  if constexpr (ROPE) {
    if (c.hf > 0) c.col = (c.col / c.hf) * (2 * c.hf) + c.col % c.hf;
  }
  const int kv = p.kv;
  c.w0 = reinterpret_cast<const uint4*>(p.w[c.s]) + static_cast<size_t>(c.col) * kv;
  if constexpr (SWIGLU) c.w1 = reinterpret_cast<const uint4*>(p.w[1]) + static_cast<size_t>(c.col) * kv;
  if constexpr (ROPE) {
    if (c.hf > 0) c.w1 = reinterpret_cast<const uint4*>(p.w[c.s]) + static_cast<size_t>(c.col + c.hf) * kv;
  }
  return c;
}

// s = x + r pack by pack, rounded to T (add_rms_norm's stored sum).
template <class T>
__device__ __forceinline__ uint4 AddPacks(const uint4& x, const uint4& r) {
  const uint32_t xa[4] = {x.x, x.y, x.z, x.w}, ra[4] = {r.x, r.y, r.z, r.w};
  uint32_t o[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 u = Unpack2<T>(xa[j]), v = Unpack2<T>(ra[j]);
    o[j] = Pack2<T>(u.x + v.x, u.y + v.y);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

inline const char* NormTag(GemvNormKind k) {
  return k == GemvNormKind::kRms ? "rms_norm_" : k == GemvNormKind::kAddRms ? "add_rms_norm_" : "";
}

__device__ __forceinline__ float Silu(float x) { return fz::op_silu(x); }  // the scalar math table's

// Row r of column (pair) c from its dot products d0 (and d1: the up row of a SwiGLU pair, the
// partner column of a RoPE pair), scaled by sc (the norm prologue's rstd of row r, else 1): + bias,
// then silu(gate) * up, the rotated RoPE pair, or the plain value, rounded once to T.
template <class T, bool SWIGLU, bool ROPE>
__device__ __forceinline__ void StoreCol(const GemvParams<T>& p, const GemvCol& c, int r, float d0, float d1, float sc) {
  const int s = c.s, col = c.col, hf = c.hf;
  const float g = d0 * sc + (p.bias[s] ? ToF(p.bias[s][col]) : 0.0f);
  T* o_row = p.out[s] + static_cast<size_t>(r) * p.ldo[s];
  if constexpr (SWIGLU) {
    const float u = d1 * sc + (p.bias[1] ? ToF(p.bias[1][col]) : 0.0f);
    o_row[col] = FromF<T>(Silu(g) * u);
  } else if (ROPE && c.w1 != nullptr) {
    // rope(x) = x * cos + rotate_half(x) * sin, rotate_half = cat(-x2, x1): the pair (c, c + h).
    const float g1 = d1 * sc + (p.bias[s] ? ToF(p.bias[s][col + hf]) : 0.0f);
    const int i = col % (2 * hf);
    const T* cr = p.cos[s] + static_cast<size_t>(r) * 2 * hf;
    const T* sr = p.sin[s] + static_cast<size_t>(r) * 2 * hf;
    o_row[col] = FromF<T>(g * ToF(cr[i]) - g1 * ToF(sr[i]));
    o_row[col + hf] = FromF<T>(g1 * ToF(cr[i + hf]) + g * ToF(sr[i + hf]));
  } else {
    o_row[col] = FromF<T>(g);
  }
}

// The tensor-core kernel's launch (gemv_mma.cu), for T = __nv_bfloat16 and __half.
template <class T>
StatusOr<cuda::KernelLaunch> LaunchGemvMma(const GemvArgs& args, const GemvParams<T>& p, const char* dt,
                                           const cuda::DeviceInfo& dev);

}  // namespace opfuse::kernels::gemv_detail
