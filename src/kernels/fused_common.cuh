// Device helpers shared by the fused library kernels (norm.cu, softmax.cu, glu.cu, rope.cu), and
// the host helpers their planners share (dtype dispatch, alignment, broadcast row maps).
//
// Design: values are stored as float / __half / __nv_bfloat16 and all math is f32. A `Pack<T, N>`
// is N consecutive elements held as raw 32-bit words, loaded with one 16-byte LDG.128 for
// N * sizeof(T) == 16 (two for an 8-float mask pack) and a plain load for N == 1 — the same
// kernel source serves the vector path and the scalar fallback. No pointer
// is __restrict__ and no load goes through the non-coherent path: add_rms_norm's sum may alias its
// residual input (and any output may alias an input), which is safe because every element is
// read and then written by the same thread. Row reductions: xor-butterfly shuffles (every lane of
// a group ends with the bit-identical value), then for groups wider than a warp one exchange
// through a double-buffered shared array — one __syncthreads per reduction, which is safe because
// a buffer is rewritten only two reductions later, after every reader passed the barrier between.
// Built with OPFUSE_CUDA only; included by .cu files only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "codegen/device/device_common.cuh"
#include "kernels/fast_divmod.cuh"
#include "kernels/fused.h"

namespace opfuse::kernels::fused {

// ------------------------------------------------------------------ conversions
__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ __forceinline__ T FromF(float v);
template <> __device__ __forceinline__ float FromF<float>(float v) { return v; }
template <> __device__ __forceinline__ __half FromF<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// ------------------------------------------------------------------ packs
// N consecutive elements of T held as raw 32-bit words (a 16-byte pack is 4 registers whatever
// T is; a single 16-bit element sits in the low half of one word). Elements are converted to f32
// on use (bf16: one shift or mask; f16: one cvt), so a row kept in registers costs its storage
// size, not 4 bytes per element.
template <class T, int N>
struct Pack {
  static constexpr int kBytes = N * static_cast<int>(sizeof(T));
  static constexpr int kWords = kBytes >= 4 ? kBytes / 4 : 1;
  uint32_t w[kWords];

  __device__ __forceinline__ float get(int j) const {
    if constexpr (std::is_same_v<T, float>) {
      return __uint_as_float(w[j]);
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      return __uint_as_float((j & 1) ? (w[j >> 1] & 0xffff0000u) : (w[j >> 1] << 16));
    } else {
      return __half2float(__ushort_as_half(static_cast<unsigned short>((j & 1) ? (w[j >> 1] >> 16) : (w[j >> 1] & 0xffffu))));
    }
  }
};

// Rounds N floats into a pack (16-bit types two at a time: one cvt.rn.*x2 per pair).
template <class T, int N>
__device__ __forceinline__ Pack<T, N> MakePack(const float (&f)[N]) {
  Pack<T, N> p;
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int j = 0; j < N; ++j) p.w[j] = __float_as_uint(f[j]);
  } else if constexpr (N == 1) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) p.w[0] = __bfloat16_as_ushort(__float2bfloat16_rn(f[0]));
    else p.w[0] = __half_as_ushort(__float2half_rn(f[0]));
  } else {
#pragma unroll
    for (int k = 0; k < N / 2; ++k) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
        memcpy(&p.w[k], &h, 4);
      } else {
        const __half2 h = __floats2half2_rn(f[2 * k], f[2 * k + 1]);
        memcpy(&p.w[k], &h, 4);
      }
    }
  }
  return p;
}

// p must be aligned to the pack's size (checked by the planners).
template <class T, int N>
__device__ __forceinline__ Pack<T, N> LoadPack(const T* p) {
  Pack<T, N> r;
  constexpr int B = Pack<T, N>::kBytes;
  if constexpr (B == 32) {
    const uint4 a = reinterpret_cast<const uint4*>(p)[0], b = reinterpret_cast<const uint4*>(p)[1];
    r.w[0] = a.x; r.w[1] = a.y; r.w[2] = a.z; r.w[3] = a.w;
    r.w[4] = b.x; r.w[5] = b.y; r.w[6] = b.z; r.w[7] = b.w;
  } else if constexpr (B == 16) {
    const uint4 a = *reinterpret_cast<const uint4*>(p);
    r.w[0] = a.x; r.w[1] = a.y; r.w[2] = a.z; r.w[3] = a.w;
  } else if constexpr (B == 4) {
    r.w[0] = *reinterpret_cast<const uint32_t*>(p);
  } else {
    static_assert(B == 2, "packs of 2, 4, 16 or 32 bytes");
    r.w[0] = *reinterpret_cast<const unsigned short*>(p);
  }
  return r;
}
// A 16-byte pack to global memory as one st.global.v4: in the staged and looped row kernels nvcc
// split StorePack's 16-byte store into four 32-bit ones (the row's address, base + v x N - s, is
// not known to be 16-byte aligned) — four store instructions and partial-sector writes a vector.
// p must be 16-byte aligned, as for StorePack; other sizes take StorePack.
template <class T, int N>
__device__ __forceinline__ void StoreGlobalPack(T* p, const Pack<T, N>& v);
template <class T, int N>
__device__ __forceinline__ void StorePack(T* p, const Pack<T, N>& v) {
  constexpr int B = Pack<T, N>::kBytes;
  if constexpr (B == 16) {
    *reinterpret_cast<uint4*>(p) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
  } else if constexpr (B == 4) {
    *reinterpret_cast<uint32_t*>(p) = v.w[0];
  } else {
    static_assert(B == 2, "stores of 2, 4 or 16 bytes");
    *reinterpret_cast<unsigned short*>(p) = static_cast<unsigned short>(v.w[0]);
  }
}

template <class T, int N>
__device__ __forceinline__ void StoreGlobalPack(T* p, const Pack<T, N>& v) {
  if constexpr (Pack<T, N>::kBytes == 16) {
    fz::store_global_v4(p, v.w[0], v.w[1], v.w[2], v.w[3]);
  } else {
    StorePack<T, N>(p, v);
  }
}

// ------------------------------------------------------------------ shifted rows
// Rows whose starts are not 16-byte aligned (a width such as 4999 bf16, with 16-byte aligned tensor
// bases): the row is read in the aligned window around it. Vector v of a row covers columns
// c = v * N - s .. c + N - 1, where s is the row start's offset in elements from the 16-byte boundary
// before it (base % N), so every vector inside the row is one aligned 16-byte access; the (at most
// two) vectors that straddle the row's ends are read and written element by element, and their
// elements outside the row read as 0 (the kernels' sums skip them or add 0). `row` points at column 0.
template <class T, int N, bool SH>
__device__ __forceinline__ bool FullVector(int c, int cols) {
  return !SH || (c >= 0 && c + N <= cols);
}
// `base` is the row start's element index in its tensor of `total` elements: an edge vector that
// lies inside the tensor (every edge but the tensor's first and last) is one aligned load, the
// elements outside the row then zeroed in its words — the neighbouring row's bytes are read and
// discarded, never used or written — rather than N element loads and a round trip through f32.
template <class T, int N, bool SH>
__device__ __forceinline__ Pack<T, N> LoadRowPack(const T* row, int c, int cols, int64_t base, int64_t total) {
  if (FullVector<T, N, SH>(c, cols)) return LoadPack<T, N>(row + c);
  if constexpr (Pack<T, N>::kBytes == 16) {
    if (base + c >= 0 && base + c + N <= total) {
      Pack<T, N> p = LoadPack<T, N>(row + c);
      constexpr int kPer = N / Pack<T, N>::kWords;  // elements a word: 2 (16-bit) or 1 (f32)
#pragma unroll
      for (int k = 0; k < Pack<T, N>::kWords; ++k) {
        const int a = c + k * kPer;  // the column of the word's first element
        uint32_t keep = a >= 0 && a < cols ? (kPer == 2 ? 0xffffu : 0xffffffffu) : 0u;
        if (kPer == 2 && a + 1 >= 0 && a + 1 < cols) keep |= 0xffff0000u;
        p.w[k] &= keep;
      }
      return p;
    }
  }
  float f[N];
#pragma unroll
  for (int j = 0; j < N; ++j) f[j] = c + j >= 0 && c + j < cols ? ToF(row[c + j]) : 0.0f;
  return MakePack<T, N>(f);
}
// GLOBAL: the full vector's store as StoreGlobalPack (the staged and looped kernels, where nvcc split
// it), else StorePack.
template <class T, int N, bool SH, bool GLOBAL = false>
__device__ __forceinline__ void StoreRowPack(T* row, int c, int cols, const Pack<T, N>& v) {
  if (FullVector<T, N, SH>(c, cols)) {
    if constexpr (GLOBAL) StoreGlobalPack<T, N>(row + c, v);
    else StorePack<T, N>(row + c, v);
    return;
  }
#pragma unroll
  for (int j = 0; j < N; ++j)
    if (c + j >= 0 && c + j < cols) row[c + j] = FromF<T>(v.get(j));
}
// A per-column operand (a norm's weight or bias, 16-byte aligned base) at the columns of a row vector:
// one aligned access where the vector starts on a 16-byte boundary of the operand; 16-bit elements
// at any other column inside the operand as 32-bit words (fz::load_u16_words, the JIT's loader too) —
// a shifted row has every vector off the operand's grid, and N element loads and conversions a
// vector were the costliest part of its epilogue; element by element only at the operand's ends.
template <class T, int N, bool SH>
__device__ __forceinline__ Pack<T, N> LoadColumnPack(const T* w, int c, int cols) {
  if constexpr (!SH) {
    return LoadPack<T, N>(w + c);
  } else {
    if (c >= 0 && c + N <= cols && c % N == 0) return LoadPack<T, N>(w + c);
    // at an odd column the words reach column c + N, so that column must be in the operand too
    if constexpr (sizeof(T) == 2 && N >= 2) {
      if (c >= 0 && ((c & 1) == 0 ? c + N <= cols : c + N < cols)) {
        Pack<T, N> p;
        fz::load_u16_words<N>(reinterpret_cast<const unsigned short*>(w), c, p.w);
        return p;
      }
    }
    float f[N];
#pragma unroll
    for (int j = 0; j < N; ++j) f[j] = c + j >= 0 && c + j < cols ? ToF(__ldg(w + c + j)) : 0.0f;
    return MakePack<T, N>(f);
  }
}

// ------------------------------------------------------------------ staged rows
// A row's aligned 16-byte window in shared memory (target::RowStageFor): vector v of the window
// holds columns v * N - s .. v * N - s + N - 1, s = the row start's offset in elements from the
// 16-byte boundary before it (0 for aligned rows). StageRow issues one asynchronous 16-byte copy per
// vector; the last vector reads only up to the row's end and is zero-filled beyond it (never past
// the tensor), the first may hold the previous row's tail — the kernels skip columns outside
// [0, cols) in the first and last vector.
__device__ __forceinline__ int StageVectors(int s, int cols, int n) { return (s + cols + n - 1) / n; }
// Every vector but the last is a whole 16-byte copy (the first reads the previous row's tail, inside
// the tensor); only the last carries a source size, so the loop is an address step and a copy.
template <class T, int N>
__device__ __forceinline__ void StageRow(T* dst, const T* row, int s, int cols, int nv) {
  const int stride = static_cast<int>(blockDim.x);
  int v = static_cast<int>(threadIdx.x);
  const T* src = row - s + v * N;
  T* d = dst + v * N;
  for (; v < nv - 1; v += stride, src += stride * N, d += stride * N) fz::cp_async16(d, src);
  if (v == nv - 1) fz::cp_async16(d, src, (s + cols - v * N) * static_cast<int>(sizeof(T)));
}
// The window vectors [full0, full1) of a row shifted by s lie wholly inside the row (no column to
// check); the others — at most the first, which holds the previous row's tail when s > 0, and the
// last, past the row's end — are checked column by column (InRowVector).
struct WindowSpan {
  int full0, full1;
};
template <int N>
__device__ __forceinline__ WindowSpan FullWindowVectors(int s, int cols) {
  const int full0 = s > 0 ? 1 : 0;
  return {full0, max(full0, (s + cols) / N)};
}
// f(v, full) for this thread's window vectors v < end of a block-wide pass (v = threadIdx.x, + blockDim.x,
// ...): `full` (std::true_type) for v in [full0, full1), where no column is checked, else std::false_type.
template <class F>
__device__ __forceinline__ void ForWindowVectors(int end, int full0, int full1, F&& f) {
  for (int v = static_cast<int>(threadIdx.x); v < end; v += static_cast<int>(blockDim.x)) {
    if (v >= full0 && v < full1) f(v, std::true_type{});
    else f(v, std::false_type{});
  }
}
// Whether element j of window vector v (column v * N - s + j) is in the row.
template <int N>
__device__ __forceinline__ bool InRowVector(int v, int j, int s, int cols) {
  const int c = v * N - s + j;
  return c >= 0 && c < cols;
}
// The staged kernels' dynamic shared memory. Declared at namespace scope and indexed where it is
// used (StagedWindow), so the compiler sees shared-memory addresses and emits shared loads: pointers
// handed through an array lost that and became generic loads.
extern __shared__ __align__(16) unsigned char g_stage_bytes[];
// Window buffer k (input i of buffer b: k = b x INPUTS + i) of `buffer_elems` elements.
template <class T>
__device__ __forceinline__ T* StagedWindow(int k, int buffer_elems) {
  return reinterpret_cast<T*>(g_stage_bytes) + static_cast<int64_t>(k) * buffer_elems;
}
// The row loop of a persistent staged kernel: rows blockIdx.x, + gridDim.x, ... of `rows` rows of
// `cols` columns; INPUTS row tensors `src` staged per row, input i of buffer b in StagedWindow(b x
// INPUTS + i). `twin`: two buffers — row r + gridDim.x's copies are issued before row r is computed,
// so they arrive while it is reduced and written; else one, copied at the top of each row.
// body(r, base, s, nv, b) computes row r (base = r x cols, s its shift, nv its window's vectors, b
// the buffer holding it); every thread calls it for every row (it may hold barriers), and no thread
// reads a buffer after the barrier that follows it, before which the buffer is refilled.
// copy_cols(r): the columns of row r the body reads, a prefix (a causal softmax's visible keys; by
// default the whole row) — only those are copied, the window's vector holding the last of them
// zero-filled past it.
struct WholeRow {};
template <class T, int N, int INPUTS, class F, class L = WholeRow>
__device__ __forceinline__ void StagedRows(const T* const (&src)[INPUTS], int64_t rows, int cols, int buffer_elems, bool twin,
                                           F&& body, L copy_cols = {}) {
  auto issue = [&](int64_t r, int b) {
    const int64_t base = r * cols;
    const int s = static_cast<int>(base % N);
    int cc = cols;
    if constexpr (!std::is_same_v<L, WholeRow>) cc = copy_cols(r);
#pragma unroll
    for (int i = 0; i < INPUTS; ++i)
      StageRow<T, N>(StagedWindow<T>(b * INPUTS + i, buffer_elems), src[i] + base, s, cc, StageVectors(s, cc, N));
  };
  int b = 0;
  if (twin && blockIdx.x < rows) issue(blockIdx.x, 0);
  fz::cp_async_commit();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t next = r + gridDim.x;
    if (!twin) issue(r, 0);
    else if (next < rows) issue(next, b ^ 1);
    fz::cp_async_commit();  // (an empty group past the last row keeps the count)
    if (twin) fz::cp_async_wait<1>();
    else fz::cp_async_wait<0>();
    __syncthreads();  // every thread's copies of row r have landed
    const int64_t base = r * cols;
    const int s = static_cast<int>(base % N);
    body(r, base, s, StageVectors(s, cols, N), b);
    __syncthreads();  // every thread is done with buffer b before it is refilled
    if (twin) b ^= 1;
  }
}
// A per-column operand (a norm's weight or bias, 16-byte aligned base) at window vector v of a row
// shifted by S elements (compile-time): columns v * N - S .. + N - 1, from the two aligned vectors
// around them (one where S == 0) — two 16-byte loads instead of N scalar ones. The caller guarantees
// both lie inside the operand: v >= 1 when S > 0, and (v + 1) * N <= cols.
template <class T, int N, int S>
__device__ __forceinline__ void ShiftedColumn(const T* w, int v, float (&out)[N]) {
  const Pack<T, N> b = LoadPack<T, N>(w + v * N);
  if constexpr (S == 0) {
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = b.get(j);
  } else {
    const Pack<T, N> a = LoadPack<T, N>(w + (v - 1) * N);
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = j < S ? a.get(N - S + j) : b.get(j - S);
  }
}
// f(has_w, has_b) with the two optional operands' presence as std::bool_constant: a kernel's loop
// compiled per combination, so no element tests a null pointer.
template <class F>
__device__ __forceinline__ void WithOperands(bool has_w, bool has_b, F&& f) {
  if (has_w) {
    if (has_b) f(std::true_type{}, std::true_type{});
    else f(std::true_type{}, std::false_type{});
  } else {
    if (has_b) f(std::false_type{}, std::true_type{});
    else f(std::false_type{}, std::false_type{});
  }
}
// f(std::integral_constant<int, S>{}) for the row shift s in [0, N).
template <int N, class F>
__device__ __forceinline__ void DispatchShift(int s, F&& f) {
  if constexpr (N == 8) {
    switch (s) {
      case 1: return f(std::integral_constant<int, 1>{});
      case 2: return f(std::integral_constant<int, 2>{});
      case 3: return f(std::integral_constant<int, 3>{});
      case 4: return f(std::integral_constant<int, 4>{});
      case 5: return f(std::integral_constant<int, 5>{});
      case 6: return f(std::integral_constant<int, 6>{});
      case 7: return f(std::integral_constant<int, 7>{});
      default: return f(std::integral_constant<int, 0>{});
    }
  } else {
    static_assert(N == 4, "16-byte vectors of 2- or 4-byte elements");
    switch (s) {
      case 1: return f(std::integral_constant<int, 1>{});
      case 2: return f(std::integral_constant<int, 2>{});
      case 3: return f(std::integral_constant<int, 3>{});
      default: return f(std::integral_constant<int, 0>{});
    }
  }
}

// Hides a pack's words from the optimiser (an empty asm that "may change" them). Used between the
// passes of a row kernel: without it the compiler keeps the f32 values converted in the first
// pass alive until the last one (CSE), doubling the registers a 16-bit row needs and spilling at
// 8 vectors per thread; after it, each pass re-converts from the raw words.
template <class T, int N>
__device__ __forceinline__ void Launder(Pack<T, N>& p) {
#pragma unroll
  for (int i = 0; i < Pack<T, N>::kWords; ++i) asm volatile("" : "+r"(p.w[i]));
}

// The device helpers the JIT compiles too (codegen/device/device_common.cuh, ops/scalar_math.h),
// under the names these kernels use.
__device__ __forceinline__ float NegInf() { return fz::neg_inf(); }
__device__ __forceinline__ float Exp2(float x) { return fz::exp2(x); }  // one MUFU.EX2, ~2 ulp
inline constexpr float kLog2e = fz::kLog2e;

// ------------------------------------------------------------------ reductions
using SumOp = fz::SumOp;
using MaxOp = fz::MaxOp;
template <class Op>
__device__ __forceinline__ float WarpReduce(float v, int width) { return fz::warp_reduce<Op>(v, width); }
template <class Op>
__device__ __forceinline__ float RowReduce(float v, int tpr, float* smem, int& phase) {
  return fz::row_reduce<Op>(v, tpr, smem, phase);
}
// RowReduce over the whole block (the staged kernels: one row a block).
template <class Op>
__device__ __forceinline__ float BlockRowReduce(float v, float* smem, int& phase) {
  return fz::row_reduce<Op, true>(v, static_cast<int>(blockDim.x), smem, phase);
}

// ------------------------------------------------------------------ broadcast row maps
// Offset (in elements) of the row of a broadcast operand that row r of x reads, for operands whose
// last dim is x's (or 1). Leading dims are collapsed on the host (size-1 dims dropped, contiguous
// or jointly broadcast neighbours merged), so [T, H] rows reading a [T, 1] table is one division (a FastDivmod below 2^31 rows).
inline constexpr int kMaxMapDims = 6;
struct RowMap {
  int ndim = 0;                       // innermost first
  uint32_t size[kMaxMapDims] = {};
  int64_t stride[kMaxMapDims] = {};
  // size[d] as a multiply-high divider, used when `fast` (fewer than 2^31 rows, FastDivmod's exact
  // range): with a runtime division per row instead the library rope was slower at 16384 x 32 x 64
  // bf16 (docs/BENCHMARKS.md, bench ops).
  FastDivmod div[kMaxMapDims];
  bool fast = false;
};

__device__ __forceinline__ int64_t MapRow(const RowMap& m, uint32_t r) {
  int64_t off = 0;
#pragma unroll
  for (int d = 0; d < kMaxMapDims; ++d) {
    if (d >= m.ndim) break;
    if (d == m.ndim - 1) {
      off += static_cast<int64_t>(r) * m.stride[d];
      break;
    }
    const uint32_t q = m.fast ? m.div[d].Div(r) : r / m.size[d];
    off += static_cast<int64_t>(r - q * m.size[d]) * m.stride[d];
    r = q;
  }
  return off;
}

inline bool SameRowMap(const RowMap& a, const RowMap& b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.size[d] != b.size[d] || a.stride[d] != b.stride[d]) return false;
  return true;
}

// Row map of operand shape `o` (right-aligned, broadcastable) against x shape `x`.
inline StatusOr<RowMap> BuildRowMap(const std::vector<int64_t>& x, const std::vector<int64_t>& o) {
  if (x.empty() || o.size() > x.size()) return InvalidArgument("operand rank exceeds x rank");
  const size_t rank = x.size(), off = rank - o.size();
  // Contiguous strides of the operand, per x dim (0 where broadcast or absent).
  std::vector<int64_t> stride(rank, 0);
  int64_t acc = 1;
  for (size_t d = rank; d-- > off;) {
    const int64_t od = o[d - off];
    if (od != 1 && od != x[d]) return InvalidArgument(fmt::format("dim {} of size {} does not broadcast to {}", d, od, x[d]));
    stride[d] = od == 1 ? 0 : acc;
    acc *= od;
  }
  RowMap m;
  int64_t total = 1;
  for (size_t d = rank - 1; d-- > 0;) {  // leading dims, innermost first
    total *= x[d];
    if (x[d] == 1) continue;
    if (m.ndim > 0 && stride[d] == m.stride[m.ndim - 1] * static_cast<int64_t>(m.size[m.ndim - 1])) {
      m.size[m.ndim - 1] = static_cast<uint32_t>(m.size[m.ndim - 1] * x[d]);  // merge (checked below)
      continue;
    }
    if (m.ndim == kMaxMapDims) return Unimplemented(fmt::format("broadcast over more than {} separate dims", kMaxMapDims));
    m.size[m.ndim] = static_cast<uint32_t>(x[d]);
    m.stride[m.ndim] = stride[d];
    ++m.ndim;
  }
  if (total > 0xffffffffLL) return Unimplemented("more than 2^32 rows with a broadcast operand");
  m.fast = total <= kFastIndexLimit;
  if (m.fast)
    for (int d = 0; d + 1 < m.ndim; ++d) m.div[d] = FastDivmod(m.size[d]);  // the last dim is never divided
  return m;
}

// ------------------------------------------------------------------ host helpers
inline bool Aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <class T> struct TypeTag { using type = T; };

// Calls f(TypeTag<T>{}) with T the storage type of float dtype `t` (the caller checked IsFloat).
template <class F>
auto DispatchFloat(DType t, F&& f) {
  switch (t) {
    case DType::kF16: return f(TypeTag<__half>{});
    case DType::kBF16: return f(TypeTag<__nv_bfloat16>{});
    default: return f(TypeTag<float>{});
  }
}

// Calls f(std::integral_constant<int, V>{}) for V in {1, 2, 4, 8} (the caller checked `v`).
template <class F>
auto DispatchVpt(int v, F&& f) {
  switch (v) {
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: return f(std::integral_constant<int, 1>{});
  }
}

// ------------------------------------------------------------------ exact-cover fast path
// The register-path row kernels (norm.cu, softmax.cu) are also instantiated with the row group as a
// template constant for a list of shapes: where the row is an exact cover of the shape (every vector
// of every thread inside the row), the group split is shifts, the reductions unroll and no column
// guard is needed. With a runtime row group a 2-vector softmax ran twice the JIT's instructions
// (ncu).
inline bool ExactCover(const RowShape& s, int64_t cols, int full_vec) {
  return !s.looped && s.vec == full_vec && int64_t{s.threads_per_row} * s.vectors_per_thread * full_vec == cols;
}

template <int VPT, int TPR>
struct ExactShape {
  static constexpr int kVpt = VPT, kTpr = TPR;
};
// The shapes the planner picks at common widths (16-bit rows of 2048 / 4096 / 8192: 4 vectors per
// thread at prefill sizes (t64x4, t128x4, t256x4), add_rms_norm's 2 (t128x2, t256x2, t512x2),
// t256x1..4 between, t256x1, t512x1, t1024x1 for few rows; f32 rows of half those widths).
using ExactShapes = std::tuple<ExactShape<4, 64>, ExactShape<4, 128>, ExactShape<4, 256>, ExactShape<2, 128>,
                               ExactShape<2, 256>, ExactShape<2, 512>, ExactShape<1, 256>, ExactShape<1, 512>,
                               ExactShape<1, 1024>>;

// f(ExactShape<VPT, TPR>{}) for the shape of `Shapes` (a std::tuple of ExactShape) that `s` has, or
// nullopt when it has none of them.
template <class Shapes, class F>
auto DispatchExactShape(const RowShape& s, F&& f) {
  std::optional<decltype(f(std::tuple_element_t<0, Shapes>{}))> r;
  std::apply(
      [&](auto... shape) {
        ((!r && s.vectors_per_thread == shape.kVpt && s.threads_per_row == shape.kTpr ? (void)(r = f(shape)) : (void)0),
         ...);
      },
      Shapes{});
  return r;
}

// Registers per thread of `kernel` as compiled (0 where the runtime does not say): the staged
// kernels' launch shape depends on it (target::RowStageFor).
template <class P>
inline int KernelRegisters(void (*kernel)(P)) {
  cudaFuncAttributes a{};
  if (cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(kernel)) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return a.numRegs;
}
// Lets `kernel` take `bytes` of dynamic shared memory (above the default 48 KiB) and prefer shared
// memory over L1 (the staged kernels' blocks per SM are set by shared memory).
template <class P>
inline Status AllowSharedBytes(void (*kernel)(P), int64_t bytes, const char* what) {
  cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Internal(fmt::format("{}: {} bytes of shared memory: {}", what, bytes, cudaGetErrorString(e)));
  }
  return Status::Ok();
}

inline unsigned GridFor(int64_t units) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(units, 1), 0x7fffffffLL));
}

}  // namespace opfuse::kernels::fused
