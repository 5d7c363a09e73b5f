// The JIT preamble: what every generated kernel (src/codegen/cuda_emitter.cc) is compiled with by
// NVRTC, after the emitter's header comment. It includes nothing from the CUDA toolkit; the project
// files it includes are inlined into the text at build time (cmake/embed_text.cmake), so the JIT
// and the library kernels compile the same scalar math (ops/scalar_math.h) and the same device
// helpers (device_common.cuh). What is here is the JIT's own: storage types named by the emitter,
// conversions to and from them, vector loads and stores, and packs of raw words.
#include "codegen/device/device_common.cuh"

// ---- storage types and f32 conversions
struct __align__(2) fz_bf16 { unsigned short x; static constexpr bool kBf16 = true; };
struct __align__(2) fz_f16 { unsigned short x; static constexpr bool kBf16 = false; };
__device__ __forceinline__ float fz_f32(float v) { return v; }
__device__ __forceinline__ float fz_f32(unsigned char v) { return v ? 1.0f : 0.0f; }
__device__ __forceinline__ float fz_f32(fz_bf16 v) { return fz::bf16_to_f32(v.x); }
__device__ __forceinline__ float fz_f32(fz_f16 v) { return fz::f16_to_f32(v.x); }
template <typename T> struct fz_cvt;
template <> struct fz_cvt<float> { static __device__ __forceinline__ float from(float f) { return f; } };
template <> struct fz_cvt<unsigned char> { static __device__ __forceinline__ unsigned char from(float f) { return f != 0.0f; } };
template <> struct fz_cvt<fz_bf16> { static __device__ __forceinline__ fz_bf16 from(float f) { fz_bf16 r; r.x = fz::f32_to_bf16(f); return r; } };
template <> struct fz_cvt<fz_f16> { static __device__ __forceinline__ fz_f16 from(float f) { fz_f16 r; r.x = fz::f32_to_f16(f); return r; } };
template <typename T> __device__ __forceinline__ float fz_round(float f) { return fz_f32(fz_cvt<T>::from(f)); }
template <> __device__ __forceinline__ float fz_round<fz_bf16>(float f) { return fz::round_bf16(f); }
// Two f32 to one word of two 16-bit values (lo in the low half).
template <typename T> struct fz_cvt2;
template <> struct fz_cvt2<fz_bf16> { static __device__ __forceinline__ unsigned pack(float lo, float hi) { return fz::pack_bf16x2(lo, hi); } };
template <> struct fz_cvt2<fz_f16> { static __device__ __forceinline__ unsigned pack(float lo, float hi) { return fz::pack_f16x2(lo, hi); } };

// ---- vector loads and stores
// The two 16-bit elements of a 32-bit word, widened: bf16 by a shift and a mask (one instruction
// each, where element-wise extraction took a byte permute and a shift).
template <typename T> __device__ __forceinline__ void fz_unpack2(unsigned w, float* o) {
  if constexpr (T::kBf16) {
    o[0] = __uint_as_float(w << 16);
    o[1] = __uint_as_float(w & 0xffff0000u);
  } else {
    o[0] = fz::f16_to_f32(w);
    o[1] = fz::f16_to_f32(w >> 16);
  }
}
// N consecutive elements from p[i] (p + i aligned to N * sizeof(T) bytes), widened to f32.
template <int N, typename T> __device__ __forceinline__ void fz_load(const T* __restrict__ p, long long i, float* out) {
  constexpr int B = N * (int)sizeof(T);
  if constexpr (sizeof(T) == 2 && B == 16) {
    const uint4 u = *reinterpret_cast<const uint4*>(p + i);
    fz_unpack2<T>(u.x, out); fz_unpack2<T>(u.y, out + 2); fz_unpack2<T>(u.z, out + 4); fz_unpack2<T>(u.w, out + 6); }
  else if constexpr (sizeof(T) == 2 && B == 8) {
    const uint2 u = *reinterpret_cast<const uint2*>(p + i);
    fz_unpack2<T>(u.x, out); fz_unpack2<T>(u.y, out + 2); }
  else if constexpr (sizeof(T) == 2 && B == 4) fz_unpack2<T>(*reinterpret_cast<const unsigned*>(p + i), out);
  else if constexpr (B == 16) { uint4 u = *reinterpret_cast<const uint4*>(p + i); const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = fz_f32(e[k]); }
  else if constexpr (B == 8) { uint2 u = *reinterpret_cast<const uint2*>(p + i); const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = fz_f32(e[k]); }
  else if constexpr (B == 4 && N == 2) { unsigned u = *reinterpret_cast<const unsigned*>(p + i); const T* e = reinterpret_cast<const T*>(&u);
    out[0] = fz_f32(e[0]); out[1] = fz_f32(e[1]); }
  else if constexpr (B == 32) { fz_load<N / 2>(p, i, out); fz_load<N / 2>(p, i + N / 2, out + N / 2); }  // f32 beside 16-bit packs
  else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = fz_f32(p[i + k]); }
}
// V4: a 16-byte pack of f32 or 16-bit elements as one st.global.v4 (inline PTX) — the stage
// function's stores, where nvcc split the C++ 16-byte store into four 32-bit ones (the row's address
// is not known to be 16-byte aligned there); p + i must be 16-byte aligned either way.
template <int N, typename T, bool V4 = false> __device__ __forceinline__ void fz_store(T* __restrict__ p, long long i, const float* v) {
  constexpr int B = N * (int)sizeof(T);
  if constexpr (V4 && B == 16 && (sizeof(T) == 2 || sizeof(T) == 4)) {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (sizeof(T) == 2) w[k] = fz_cvt2<T>::pack(v[2 * k], v[2 * k + 1]);
      else w[k] = __float_as_uint(v[k]);
    }
    fz::store_global_v4(p + i, w[0], w[1], w[2], w[3]);
  } else if constexpr ((B == 16 || B == 8 || B == 4) && sizeof(T) == 2) {
    unsigned w[N / 2];
#pragma unroll
    for (int k = 0; k < N / 2; ++k) w[k] = fz_cvt2<T>::pack(v[2 * k], v[2 * k + 1]);
    if constexpr (B == 16) *reinterpret_cast<uint4*>(p + i) = make_uint4(w[0], w[1], w[2], w[3]);
    else if constexpr (B == 8) *reinterpret_cast<uint2*>(p + i) = make_uint2(w[0], w[1]);
    else *reinterpret_cast<unsigned*>(p + i) = w[0];
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
// The stage function's window vectors (columns c0 .. c0 + N - 1 of a row of C, c0 possibly
// negative): per-column operands element by element where the column is inside the row (0 outside);
// full-shape outputs as one aligned store where the vector is inside the row, else element by element.
template <int N, typename T> __device__ __forceinline__ void fz_load_cols(const T* __restrict__ p, long long i, long long c0, long long C, float* out) {
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = c0 + k >= 0 && c0 + k < C ? fz_f32(p[i + k]) : 0.0f;
}
template <int N, typename T, bool V4 = false>
__device__ __forceinline__ void fz_store_cols(T* __restrict__ p, long long i, long long c0, long long C, const float* v) {
  if (c0 >= 0 && c0 + N <= C) {
    fz_store<N, T, V4>(p, i, v);
    return;
  }
#pragma unroll
  for (int k = 0; k < N; ++k)
    if (c0 + k >= 0 && c0 + k < C) p[i + k] = fz_cvt<T>::from(v[k]);
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
  // The same load marked for early eviction from L1 and, through `pol` (fz::evict_first()), from L2:
  // for rows read once (a decode-size norm's inputs), so they do not push out what is still needed.
  __device__ __forceinline__ void load_ef(const T* __restrict__ p, long long i, unsigned long long pol) {
    if constexpr (B == 16) asm volatile("ld.global.L1::evict_first.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                                        : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p + i), "l"(pol));
    else if constexpr (B == 8) asm volatile("ld.global.L1::evict_first.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
                                            : "=r"(w[0]), "=r"(w[1]) : "l"(p + i), "l"(pol));
    else load(p, i);
  }
  // A window vector at a row's edge (columns c0 .. c0 + N - 1, partly outside the row's [0, C)):
  // the columns inside loaded one by one, 0 outside — never a byte past the row's ends.
  __device__ __forceinline__ void load_cols(const T* __restrict__ p, long long i, long long c0, long long C) {
    float f[N];
    fz_load_cols<N>(p, i, c0, C, f);
    set(f);
  }
  // The same vector of a row-major tensor of `total` elements (16-byte aligned base): where the
  // aligned vector lies inside the tensor — every edge but the tensor's last — one aligned load,
  // the elements outside the row then zeroed in the words (their bytes are the neighbouring row's,
  // read and discarded: never used, never written); else load_cols. 16-bit elements; others load_cols.
  __device__ __forceinline__ void load_edge(const T* __restrict__ p, long long i, int c0, int C, long long total) {
    if constexpr (sizeof(T) == 2 && B == 16) {
      if (i >= 0 && i + N <= total) {
        load(p, i);
#pragma unroll
        for (int k = 0; k < W; ++k) {
          const int a = c0 + 2 * k;  // the column of the word's low half
          const unsigned keep = (a >= 0 && a < C ? 0xffffu : 0u) | (a + 1 >= 0 && a + 1 < C ? 0xffff0000u : 0u);
          w[k] &= keep;
        }
        return;
      }
    }
    load_cols(p, i, c0, C);
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
// The running max of 16-bit element pairs held as raw words (fz::max_pair for the element type).
template <typename T> struct fz_max2 {
  static constexpr unsigned kInit = fz::kNegInfPair<T::kBf16>;
  static __device__ __forceinline__ unsigned op(unsigned a, unsigned b) { return fz::max_pair<T::kBf16>(a, b); }
  static __device__ __forceinline__ float value(unsigned w) { return fz::pair_max_f32<T::kBf16>(w); }
};
// A window vector inside the row whose operand is off the 16-byte grid there (a per-column operand at
// a shifted row's columns; the operand's base 16-byte aligned, as window mode requires): 16-bit
// elements as 32-bit words (fz::load_u16_words) — at an odd index only where the element after the
// vector is readable (`more`: column c0 + N is still in the row) — else, and for other types, N
// single loads.
// No column guard: the vector is inside the row.
template <int N, typename T> __device__ __forceinline__ void fz_load_elems(const T* __restrict__ p, long long i, bool more, float* out) {
  if constexpr (sizeof(T) == 2 && N % 2 == 0) {
    if ((i & 1) == 0 || more) {
      fz_pack<T, N> v;
      fz::load_u16_words<N>(reinterpret_cast<const unsigned short*>(p), i, v.w);
#pragma unroll
      for (int k = 0; k < N; ++k) out[k] = v.get(k);
      return;
    }
  }
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = fz_f32(p[i + k]);
}
