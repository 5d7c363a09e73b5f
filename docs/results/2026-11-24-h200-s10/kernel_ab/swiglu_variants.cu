// opfuse generated kernel fz_swiglu_bf16_w5632_v8
// fuses: swiglu(g, u)
// emitter v6; iteration space [1, 5632] (pointwise), 0 passes, vec 8
// 256 threads per block, one vector per thread
//   in0  g bf16[1, 5632] [full]
//   in1  u bf16[1, 5632] [full]
//   out0 y bf16[1, 5632] [full]
// ---- opfuse JIT preamble: storage types and f32 conversions (PTX cvt, no headers)
struct __align__(2) fz_bf16 { unsigned short x; };
struct __align__(2) fz_f16 { unsigned short x; };
__device__ __forceinline__ float fz_f32(float v) { return v; }
__device__ __forceinline__ float fz_f32(unsigned char v) { return v ? 1.0f : 0.0f; }
__device__ __forceinline__ float fz_f32(fz_bf16 v) { return __uint_as_float(((unsigned)v.x) << 16); }
__device__ __forceinline__ float fz_f32(fz_f16 v) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x)); return f; }
template <typename T> struct fz_cvt;
template <> struct fz_cvt<float> { static __device__ __forceinline__ float from(float f) { return f; } };
template <> struct fz_cvt<unsigned char> { static __device__ __forceinline__ unsigned char from(float f) { return f != 0.0f; } };
template <> struct fz_cvt<fz_bf16> { static __device__ __forceinline__ fz_bf16 from(float f) { fz_bf16 r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.x) : "f"(f)); return r; } };
template <> struct fz_cvt<fz_f16> { static __device__ __forceinline__ fz_f16 from(float f) { fz_f16 r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(f)); return r; } };
template <typename T> __device__ __forceinline__ float fz_round(float f) { return fz_f32(fz_cvt<T>::from(f)); }
// bf16 rounding in one instruction: the pair conversion with a zero low half is the rounded value's f32 bit pattern.
template <> __device__ __forceinline__ float fz_round<fz_bf16>(float f) { unsigned u; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(f), "f"(0.0f)); return __uint_as_float(u); }
// Two f32 to one word of two 16-bit values (lo in the low half), one instruction.
template <typename T> struct fz_cvt2;
template <> struct fz_cvt2<fz_bf16> { static __device__ __forceinline__ unsigned pack(float lo, float hi) { unsigned u; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo)); return u; } };
template <> struct fz_cvt2<fz_f16> { static __device__ __forceinline__ unsigned pack(float lo, float hi) { unsigned u; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo)); return u; } };
__device__ __forceinline__ float fz_fmod_floor(float a, float b) { float r = fmodf(a, b); return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r; }
// N consecutive elements from p[i] (p + i aligned to N * sizeof(T) bytes), widened to f32.
template <int N, typename T> __device__ __forceinline__ void fz_load(const T* __restrict__ p, long long i, float* out) {
  constexpr int B = N * (int)sizeof(T);
  if constexpr (B == 16) { uint4 u = *reinterpret_cast<const uint4*>(p + i); const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = fz_f32(e[k]); }
  else if constexpr (B == 8) { uint2 u = *reinterpret_cast<const uint2*>(p + i); const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = fz_f32(e[k]); }
  else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = fz_f32(p[i + k]); }
}
template <int N, typename T> __device__ __forceinline__ void fz_store(T* __restrict__ p, long long i, const float* v) {
  constexpr int B = N * (int)sizeof(T);
  if constexpr ((B == 16 || B == 8) && sizeof(T) == 2) {
    unsigned w[N / 2];
#pragma unroll
    for (int k = 0; k < N / 2; ++k) w[k] = fz_cvt2<T>::pack(v[2 * k], v[2 * k + 1]);
    if constexpr (B == 16) *reinterpret_cast<uint4*>(p + i) = make_uint4(w[0], w[1], w[2], w[3]);
    else *reinterpret_cast<uint2*>(p + i) = make_uint2(w[0], w[1]);
  } else if constexpr (B == 16 || B == 8) {
    T e[N];
#pragma unroll
    for (int k = 0; k < N; ++k) e[k] = fz_cvt<T>::from(v[k]);
    if constexpr (B == 16) *reinterpret_cast<uint4*>(p + i) = *reinterpret_cast<const uint4*>(e);
    else *reinterpret_cast<uint2*>(p + i) = *reinterpret_cast<const uint2*>(e);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[i + k] = fz_cvt<T>::from(v[k]);
  }
}
// N consecutive elements of T kept as raw 32-bit words (a 16-byte pack is 4 registers whatever T
// is) and widened to f32 on use: a row held in registers costs its storage size, not 4 bytes per
// element. launder() hides the words from the optimiser between passes, so it re-converts instead
// of keeping f32 copies alive across passes (which doubles the registers of a 16-bit row).
template <typename T, int N> struct fz_pack {
  static constexpr int B = N * (int)sizeof(T);
  static constexpr int W = B >= 4 ? B / 4 : 1;
  unsigned w[W];
  __device__ __forceinline__ void load(const T* __restrict__ p, long long i) {
    if constexpr (B == 16) { const uint4 u = *reinterpret_cast<const uint4*>(p + i); w[0] = u.x; w[1] = u.y; w[2] = u.z; w[3] = u.w; }
    else if constexpr (B == 8) { const uint2 u = *reinterpret_cast<const uint2*>(p + i); w[0] = u.x; w[1] = u.y; }
    else if constexpr (B == 4) { w[0] = *reinterpret_cast<const unsigned*>(p + i); }
    else if constexpr (B == 2) { w[0] = *reinterpret_cast<const unsigned short*>(p + i); }
    else { static_assert(B == 1, "packs of 1, 2, 4, 8 or 16 bytes"); w[0] = *reinterpret_cast<const unsigned char*>(p + i); }
  }
  // The same load marked for early eviction from L1 and, through `pol` (fz_evict_first()), from L2:
  // for rows read once (a decode-size norm's inputs), so they do not push out what is still needed.
  __device__ __forceinline__ void load_ef(const T* __restrict__ p, long long i, unsigned long long pol) {
    if constexpr (B == 16) asm volatile("ld.global.L1::evict_first.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                                        : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p + i), "l"(pol));
    else if constexpr (B == 8) asm volatile("ld.global.L1::evict_first.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
                                            : "=r"(w[0]), "=r"(w[1]) : "l"(p + i), "l"(pol));
    else load(p, i);
  }
  // Packs N f32 values (rounded to nearest even for 16-bit T) and stores the pack at p[i]: the
  // words then hold exactly what memory holds, for later passes to read instead of re-loading it.
  __device__ __forceinline__ void set(const float* v) {
    static_assert(sizeof(T) == 4 || (sizeof(T) == 2 && (N % 2 == 0 || N == 1)), "packs of f32, or of 16-bit pairs");
    if constexpr (sizeof(T) == 4) {
#pragma unroll
      for (int k = 0; k < N; ++k) w[k] = __float_as_uint(v[k]);
    } else if constexpr (N == 1) { w[0] = fz_cvt<T>::from(v[0]).x; }
    else {
#pragma unroll
      for (int k = 0; k < N / 2; ++k) w[k] = fz_cvt2<T>::pack(v[2 * k], v[2 * k + 1]);
    }
  }
  __device__ __forceinline__ void store(T* __restrict__ p, long long i) const {
    if constexpr (B == 16) *reinterpret_cast<uint4*>(p + i) = make_uint4(w[0], w[1], w[2], w[3]);
    else if constexpr (B == 8) *reinterpret_cast<uint2*>(p + i) = make_uint2(w[0], w[1]);
    else if constexpr (B == 4) *reinterpret_cast<unsigned*>(p + i) = w[0];
    else { static_assert(B == 2, "stores of 2, 4, 8 or 16 bytes"); *reinterpret_cast<unsigned short*>(p + i) = (unsigned short)w[0]; }
  }
  __device__ __forceinline__ float get(int j) const {
    if constexpr (sizeof(T) == 4) { return __uint_as_float(w[j]); }
    else if constexpr (sizeof(T) == 1) { return ((w[j >> 2] >> (8 * (j & 3))) & 0xffu) ? 1.0f : 0.0f; }
    else {
      const unsigned h = (j & 1) ? (w[j >> 1] >> 16) : (w[j >> 1] & 0xffffu);
      T v; v.x = (unsigned short)h; return fz_f32(v);
    }
  }
  __device__ __forceinline__ void launder() {
#pragma unroll
    for (int i = 0; i < W; ++i) asm volatile("" : "+r"(w[i]));
  }
};
// An L2 cache policy that evicts first (what Triton's eviction_policy='evict_first' loads carry).
__device__ __forceinline__ unsigned long long fz_evict_first() {
  unsigned long long p; asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p)); return p;
}
// 2^x with one MUFU.EX2 (ex2.approx.ftz: ~2 ulp, results below 2^-126 flush to 0, 2^-inf = 0).
__device__ __forceinline__ float fz_exp2(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
// Reduction over a row group of TPR threads (threadIdx.x / TPR is the group): butterfly shuffles,
// then for groups wider than a warp one exchange through a double-buffered shared array (one
// barrier; a buffer is rewritten two reductions later, after every reader passed the barrier
// between). Every thread of the block calls it equally often; smem holds 64 floats.
template <int TPR, bool MAX> __device__ __forceinline__ float fz_row_reduce(float v, float* smem, int& phase) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < TPR) { const float u = __shfl_xor_sync(0xffffffffu, v, o); v = MAX ? fmaxf(v, u) : v + u; }
  if constexpr (TPR <= 32) { return v; }
  else {
    constexpr int WPR = TPR / 32;
    float* buf = smem + (phase & 1) * 32;
    ++phase;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) buf[warp] = v;
    __syncthreads();
    float s = lane < WPR ? buf[(warp / WPR) * WPR + lane] : (MAX ? -__int_as_float(0x7f800000) : 0.0f);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) { const float u = __shfl_xor_sync(0xffffffffu, s, o); s = MAX ? fmaxf(s, u) : s + u; }
    return s;
  }
}
__device__ __forceinline__ float fz_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float fz_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide reductions; every thread gets the result. smem holds >= 32 floats.
__device__ __forceinline__ float fz_block_sum(float v, float* smem) {
  v = fz_warp_sum(v);
  if (blockDim.x <= 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  return fz_warp_sum(lane < nw ? smem[lane] : 0.0f);
}
__device__ __forceinline__ float fz_block_max(float v, float* smem) {
  v = fz_warp_max(v);
  if (blockDim.x <= 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  return fz_warp_max(lane < nw ? smem[lane] : -__int_as_float(0x7f800000));
}

extern "C" __global__ void __launch_bounds__(256) swi_v8(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    fz_bf16* __restrict__ out0) {
  const long long C = 5632LL;
  const long long R = 1LL * 1LL;
  const long long NV = R * C / 8;
  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < NV; v += (long long)gridDim.x * blockDim.x) {
    const long long i0 = v * 8;
    float x0[8];
    fz_load<8>(in0, i0, x0);
    float x1[8];
    fz_load<8>(in1, i0, x1);
    float o0[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float e0 = x0[j];
      const float e1 = x1[j];
      const float e2 = __fdividef(e0, 1.0f + __expf(-e0));
      const float e3 = (e2 * e1);
      o0[j] = e3;
    }
    fz_store<8, fz_bf16>(out0, i0, o0);
  }
}
extern "C" __global__ void __launch_bounds__(256) swi_v4(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    fz_bf16* __restrict__ out0) {
  const long long C = 5632LL;
  const long long R = 1LL * 1LL;
  const long long NV = R * C / 4;
  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < NV; v += (long long)gridDim.x * blockDim.x) {
    const long long i0 = v * 4;
    float x0[4];
    fz_load<4>(in0, i0, x0);
    float x1[4];
    fz_load<4>(in1, i0, x1);
    float o0[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float e0 = x0[j];
      const float e1 = x1[j];
      const float e2 = __fdividef(e0, 1.0f + __expf(-e0));
      const float e3 = (e2 * e1);
      o0[j] = e3;
    }
    fz_store<4, fz_bf16>(out0, i0, o0);
  }
}
extern "C" __global__ void __launch_bounds__(256) swi_v2(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    fz_bf16* __restrict__ out0) {
  const long long C = 5632LL;
  const long long R = 1LL * 1LL;
  const long long NV = R * C / 2;
  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < NV; v += (long long)gridDim.x * blockDim.x) {
    const long long i0 = v * 2;
    float x0[2];
    fz_load<2>(in0, i0, x0);
    float x1[2];
    fz_load<2>(in1, i0, x1);
    float o0[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float e0 = x0[j];
      const float e1 = x1[j];
      const float e2 = __fdividef(e0, 1.0f + __expf(-e0));
      const float e3 = (e2 * e1);
      o0[j] = e3;
    }
    fz_store<2, fz_bf16>(out0, i0, o0);
  }
}
extern "C" __global__ void __launch_bounds__(256) swi_v1(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    fz_bf16* __restrict__ out0) {
  const long long C = 5632LL;
  const long long R = 1LL * 1LL;
  const long long NV = R * C / 1;
  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < NV; v += (long long)gridDim.x * blockDim.x) {
    const long long i0 = v * 1;
    float x0[1];
    fz_load<1>(in0, i0, x0);
    float x1[1];
    fz_load<1>(in1, i0, x1);
    float o0[1];
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const float e0 = x0[j];
      const float e1 = x1[j];
      const float e2 = __fdividef(e0, 1.0f + __expf(-e0));
      const float e3 = (e2 * e1);
      o0[j] = e3;
    }
    fz_store<1, fz_bf16>(out0, i0, o0);
  }
}
extern "C" __global__ void __launch_bounds__(256) swi_n8(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    fz_bf16* __restrict__ out0) {
  const int C = 5632;
  const int R = 1;
  const int NV = R * C / 8;
  {
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= NV) return;
    const int i0 = v * 8;
    float x0[8];
    fz_load<8>(in0, i0, x0);
    float x1[8];
    fz_load<8>(in1, i0, x1);
    float o0[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float e0 = x0[j];
      const float e1 = x1[j];
      const float e2 = __fdividef(e0, 1.0f + __expf(-e0));
      const float e3 = (e2 * e1);
      o0[j] = e3;
    }
    fz_store<8, fz_bf16>(out0, i0, o0);
  }
}
extern "C" __global__ void __launch_bounds__(256) swi_n4(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    fz_bf16* __restrict__ out0) {
  const int C = 5632;
  const int R = 1;
  const int NV = R * C / 4;
  {
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= NV) return;
    const int i0 = v * 4;
    float x0[4];
    fz_load<4>(in0, i0, x0);
    float x1[4];
    fz_load<4>(in1, i0, x1);
    float o0[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float e0 = x0[j];
      const float e1 = x1[j];
      const float e2 = __fdividef(e0, 1.0f + __expf(-e0));
      const float e3 = (e2 * e1);
      o0[j] = e3;
    }
    fz_store<4, fz_bf16>(out0, i0, o0);
  }
}
extern "C" __global__ void __launch_bounds__(256) swi_n2(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    fz_bf16* __restrict__ out0) {
  const int C = 5632;
  const int R = 1;
  const int NV = R * C / 2;
  {
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= NV) return;
    const int i0 = v * 2;
    float x0[2];
    fz_load<2>(in0, i0, x0);
    float x1[2];
    fz_load<2>(in1, i0, x1);
    float o0[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float e0 = x0[j];
      const float e1 = x1[j];
      const float e2 = __fdividef(e0, 1.0f + __expf(-e0));
      const float e3 = (e2 * e1);
      o0[j] = e3;
    }
    fz_store<2, fz_bf16>(out0, i0, o0);
  }
}
