// View library kernels: transpose, slice, concat and reshape as copy kernels (the executor
// normally aliases reshape instead of launching anything; the copy is here for when it cannot).
//
// Design: views move bytes, so every kernel is dtype-agnostic and copies in "units" of 1, 2, 4, 8
// or 16 bytes — the largest power of two that divides every address, row length and pitch
// involved (16-byte vectors whenever the layout allows, element-sized units otherwise). Three
// kernels cover the four ops:
//  * Copy2D (slice, concat, reshape, and transposes that turn out to be plain copies): a batch of
//    up to kMaxCopies strided row copies {src, dst, rows, row bytes, src pitch, dst pitch} in one
//    launch, blockIdx.y picking the copy. Slice is one copy (rows = product of the dims before the
//    axis); concat is one copy per input, so a concat of N inputs is ceil(N / 8) launches;
//    reshape is one contiguous copy. The unit size is chosen per copy on the host and switched on
//    once per block (not per element); row/column split with a FastDivmod, 64-bit division when a
//    copy has >= 2^31 units. 4 units in flight per thread.
//  * Permute (transposes that keep the innermost dim in place, e.g. [T, H, D] -> [H, T, D]): an
//    n-d gather over contiguous inner chunks; the output is written in order, the source offset
//    comes from the coordinates (FastDivmods, rank <= 8 after coalescing).
//  * Tiled transpose (the innermost dim moves): square tiles through shared memory (+1 padding
//    column against bank conflicts; 64x64 tiles with 64x8 threads for 1- and 2-byte elements,
//    32x32 with 32x8 threads otherwise), both the read of the input's last dim and the write of
//    the output's last dim coalesced; all other dims are a batch index; tiles are a flattened
//    grid-stride loop, so no grid dimension limit applies. (Well below the copy bandwidth at
//    bf16 16384x2048, docs/BENCHMARKS.md; moving 2 elements per thread would be the next step.)
// Before choosing, the transpose is coalesced: size-1 dims are dropped and input dims that stay
// adjacent and in order in the output are merged, so e.g. [A, B, C] perm [2, 0, 1] becomes the
// 2-d transpose [A*B, C] -> [C, A*B] it really is, and an identity permutation becomes one
// memcpy-like Copy2D. Input and output dtypes must agree (a view never converts).
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "kernels/kernel_common.cuh"
#include "kernels/library.h"

namespace opfuse::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr int kMaxCopies = 8;

// Unit types by size.
template <int U> struct UnitOf;
template <> struct UnitOf<1> { using type = uint8_t; };
template <> struct UnitOf<2> { using type = uint16_t; };
template <> struct UnitOf<4> { using type = uint32_t; };
template <> struct UnitOf<8> { using type = uint64_t; };
template <> struct UnitOf<16> { using type = uint4; };

// ------------------------------------------------------------------ Copy2D
struct Copy2D {
  const char* src = nullptr;
  char* dst = nullptr;
  int64_t rows = 0;
  int64_t row_units = 0;     // units per row
  int64_t src_pitch = 0;     // units between row starts
  int64_t dst_pitch = 0;
  FastDivmod div;            // by row_units (when rows * row_units < 2^31)
  int unit = 1;              // bytes
  int wide = 0;              // 64-bit indexing
};

struct Copy2DParams {
  Copy2D copy[kMaxCopies];
  int count = 0;
};

template <int U, bool kWide>
__device__ __forceinline__ void RunCopy2D(const Copy2D& c) {
  using T = typename UnitOf<U>::type;
  const T* src = reinterpret_cast<const T*>(c.src);
  T* dst = reinterpret_cast<T*>(c.dst);
  const int64_t total = c.rows * c.row_units;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t base = tid; base < total; base += step * kUnroll) {
    T v[kUnroll];
    int64_t doff[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * step;
      if (i < total) {
        int64_t r, col;
        if constexpr (kWide) {
          r = i / c.row_units;
          col = i - r * c.row_units;
        } else {
          uint32_t q, m;
          c.div.DivMod(static_cast<uint32_t>(i), q, m);
          r = q;
          col = m;
        }
        v[u] = src[r * c.src_pitch + col];
        doff[u] = r * c.dst_pitch + col;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * step < total) dst[doff[u]] = v[u];
  }
}

template <bool kWide>
__device__ __forceinline__ void DispatchCopy2D(const Copy2D& c) {
  switch (c.unit) {
    case 16: RunCopy2D<16, kWide>(c); break;
    case 8: RunCopy2D<8, kWide>(c); break;
    case 4: RunCopy2D<4, kWide>(c); break;
    case 2: RunCopy2D<2, kWide>(c); break;
    default: RunCopy2D<1, kWide>(c); break;
  }
}

__global__ void __launch_bounds__(kThreads) Copy2DKernel(Copy2DParams p) {
  if (static_cast<int>(blockIdx.y) >= p.count) return;
  const Copy2D& c = p.copy[blockIdx.y];
  if (c.wide) DispatchCopy2D<true>(c);
  else DispatchCopy2D<false>(c);
}

int UnitFor(std::initializer_list<int64_t> values) {
  int u = 16;
  for (int64_t v : values)
    while (u > 1 && v % u != 0) u /= 2;
  return u;
}

// A byte-level strided row copy as units.
Copy2D MakeCopy(const void* src, void* dst, int64_t rows, int64_t row_bytes, int64_t src_pitch_bytes,
                int64_t dst_pitch_bytes) {
  Copy2D c;
  c.src = static_cast<const char*>(src);
  c.dst = static_cast<char*>(dst);
  if (rows == 1) src_pitch_bytes = dst_pitch_bytes = row_bytes;  // pitches are irrelevant
  // Contiguous on both sides: one long row (longer vectors runs, no division).
  if (src_pitch_bytes == row_bytes && dst_pitch_bytes == row_bytes) {
    row_bytes *= rows;
    rows = 1;
    src_pitch_bytes = dst_pitch_bytes = row_bytes;
  }
  c.unit = UnitFor({reinterpret_cast<intptr_t>(src), reinterpret_cast<intptr_t>(dst), row_bytes, src_pitch_bytes,
                    dst_pitch_bytes});
  c.rows = rows;
  c.row_units = row_bytes / c.unit;
  c.src_pitch = src_pitch_bytes / c.unit;
  c.dst_pitch = dst_pitch_bytes / c.unit;
  c.wide = rows * c.row_units > kFastIndexLimit ? 1 : 0;
  if (!c.wide && c.row_units > 0) c.div = FastDivmod(static_cast<uint32_t>(c.row_units));
  return c;
}

// Launches for a list of copies, kMaxCopies per launch.
std::vector<cuda::KernelLaunch> LaunchCopies(const std::string& name, const std::vector<Copy2D>& copies,
                                             const cuda::DeviceInfo& dev) {
  std::vector<cuda::KernelLaunch> launches;
  if (copies.empty()) {  // nothing to move (an empty tensor): a record that launches nothing
    launches.push_back(cuda::KernelLaunch::Make(name + "_empty", Copy2DKernel, dim3(0, 1), dim3(kThreads), 0, Copy2DParams{}));
    return launches;
  }
  for (size_t first = 0; first < copies.size(); first += kMaxCopies) {
    Copy2DParams p;
    int64_t most = 0;
    std::string units;
    for (size_t i = first; i < copies.size() && p.count < kMaxCopies; ++i) {
      p.copy[p.count++] = copies[i];
      most = std::max(most, copies[i].rows * copies[i].row_units);
      units += fmt::format("{}{}", units.empty() ? "" : ".", copies[i].unit);
    }
    const unsigned grid = GridFor(most, int64_t{kThreads} * kUnroll, dev.sm_count, 8 / std::min(p.count, 8) + 1);
    launches.push_back(cuda::KernelLaunch::Make(fmt::format("{}_u{}", name, units), Copy2DKernel, dim3(grid, p.count),
                                                dim3(kThreads), 0, p));
  }
  return launches;
}

// ------------------------------------------------------------------ Permute (innermost dim kept)
struct PermuteParams {
  const char* src = nullptr;
  char* dst = nullptr;
  int64_t total = 0;            // units in the output
  int rank = 1;                 // output dims, innermost in units
  int64_t shape[kMaxRank] = {};
  FastDivmod div[kMaxRank];
  int64_t src_stride[kMaxRank] = {};  // in units, per output dim
  int unit = 1;
  int wide = 0;
};

template <int U, bool kWide>
__device__ __forceinline__ void RunPermute(const PermuteParams& p) {
  using T = typename UnitOf<U>::type;
  const T* src = reinterpret_cast<const T*>(p.src);
  T* dst = reinterpret_cast<T*>(p.dst);
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t base = tid; base < p.total; base += step * kUnroll) {
    T v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * step;
      if (i < p.total) {
        int64_t off = 0;
        if constexpr (kWide) {
          uint64_t idx = static_cast<uint64_t>(i);
#pragma unroll
          for (int d = kMaxRank - 1; d >= 0; --d) {
            if (d >= p.rank) continue;
            const uint64_t q = d == 0 ? 0 : idx / static_cast<uint64_t>(p.shape[d]);
            off += static_cast<int64_t>(idx - q * static_cast<uint64_t>(p.shape[d])) * p.src_stride[d];
            idx = q;
          }
        } else {
          uint32_t idx = static_cast<uint32_t>(i);
#pragma unroll
          for (int d = kMaxRank - 1; d >= 0; --d) {
            if (d >= p.rank) continue;
            uint32_t q = 0, coord = idx;
            if (d > 0) p.div[d].DivMod(idx, q, coord);
            off += static_cast<int64_t>(coord) * p.src_stride[d];
            idx = q;
          }
        }
        v[u] = src[off];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * step < p.total) dst[base + u * step] = v[u];
  }
}

template <bool kWide>
__device__ __forceinline__ void DispatchPermute(const PermuteParams& p) {
  switch (p.unit) {
    case 16: RunPermute<16, kWide>(p); break;
    case 8: RunPermute<8, kWide>(p); break;
    case 4: RunPermute<4, kWide>(p); break;
    case 2: RunPermute<2, kWide>(p); break;
    default: RunPermute<1, kWide>(p); break;
  }
}

__global__ void __launch_bounds__(kThreads) PermuteKernel(PermuteParams p) {
  if (p.wide) DispatchPermute<true>(p);
  else DispatchPermute<false>(p);
}

// ------------------------------------------------------------------ tiled transpose

struct TransposeParams {
  const char* src = nullptr;
  char* dst = nullptr;
  int64_t size_a = 0;       // the input dim that becomes the output's innermost
  int64_t size_b = 0;       // the input's innermost dim
  int64_t src_stride_a = 0; // elements (the input's innermost stride is 1)
  int64_t dst_stride_b = 0; // elements (the output's innermost stride is 1)
  int64_t tiles_a = 0, tiles_b = 0, batch = 0;
  int batch_rank = 0;       // other dims, outermost first
  int64_t batch_shape[kMaxRank] = {};
  int64_t batch_src_stride[kMaxRank] = {};
  int64_t batch_dst_stride[kMaxRank] = {};
};

template <class T, int TILE, int ROWS>
__global__ void __launch_bounds__(TILE * ROWS) TransposeKernel(TransposeParams p) {
  __shared__ T tile[TILE][TILE + 1];
  const T* src = reinterpret_cast<const T*>(p.src);
  T* dst = reinterpret_cast<T*>(p.dst);
  const int64_t tiles = p.batch * p.tiles_a * p.tiles_b;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t tb = t % p.tiles_b;
    const int64_t rest = t / p.tiles_b;
    const int64_t ta = rest % p.tiles_a;
    int64_t bidx = rest / p.tiles_a;
    int64_t src_base = 0, dst_base = 0;
    for (int d = p.batch_rank - 1; d >= 0; --d) {
      const int64_t c = bidx % p.batch_shape[d];
      bidx /= p.batch_shape[d];
      src_base += c * p.batch_src_stride[d];
      dst_base += c * p.batch_dst_stride[d];
    }
    const int64_t a0 = ta * TILE, b0 = tb * TILE;
    // Read: threads along b (the input's contiguous dim), TILE / ROWS loads in flight.
    const int64_t b = b0 + threadIdx.x;
#pragma unroll
    for (int i = 0; i < TILE; i += ROWS) {
      const int64_t a = a0 + threadIdx.y + i;
      if (a < p.size_a && b < p.size_b) tile[threadIdx.y + i][threadIdx.x] = src[src_base + a * p.src_stride_a + b];
    }
    __syncthreads();
    // Write: threads along a (the output's contiguous dim).
    const int64_t a = a0 + threadIdx.x;
#pragma unroll
    for (int i = 0; i < TILE; i += ROWS) {
      const int64_t bb = b0 + threadIdx.y + i;
      if (a < p.size_a && bb < p.size_b) dst[dst_base + bb * p.dst_stride_b + a] = tile[threadIdx.x][threadIdx.y + i];
    }
    __syncthreads();  // the tile is reused by the next iteration
  }
}

// ------------------------------------------------------------------ planning
Status Err(const Node& n, const std::string& msg) { return InvalidArgument(fmt::format("{}: {}", OpName(n.op), msg)); }
std::string ShapeStr(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

int64_t Prod(const std::vector<int64_t>& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

int64_t NormAxis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

StatusOr<std::vector<int64_t>> PermAttr(const Node& n, size_t rank) {
  auto it = n.attrs.find("perm");
  if (it == n.attrs.end()) return Err(n, "needs attribute perm=[...]");
  const auto* dims = std::get_if<DimList>(&it->second);
  if (!dims || dims->size() != rank) return Err(n, fmt::format("perm does not match the rank {}", rank));
  std::vector<int64_t> perm;
  std::vector<bool> seen(rank, false);
  for (const auto& d : *dims) {
    if (!d.is_static() || d.value < 0 || d.value >= static_cast<int64_t>(rank) || seen[d.value])
      return Err(n, "perm is not a permutation");
    seen[d.value] = true;
    perm.push_back(d.value);
  }
  return perm;
}

StatusOr<std::vector<cuda::KernelLaunch>> PlanTranspose(const Node& n, const TensorRef& x, const TensorRef& y,
                                                        const cuda::DeviceInfo& dev) {
  const size_t rank = x.shape.size();
  OPFUSE_ASSIGN_OR_RETURN(std::vector<int64_t> perm, PermAttr(n, rank));
  for (size_t j = 0; j < rank; ++j)
    if (y.shape[j] != x.shape[perm[j]])
      return Err(n, fmt::format("output shape {} is not input {} permuted", ShapeStr(y.shape), ShapeStr(x.shape)));
  const int esize = DTypeSize(x.dtype);
  // Coalesce: drop size-1 input dims, then merge input dims i, i+1 that are adjacent in the output.
  std::vector<int64_t> keep;  // kept input dims
  for (size_t i = 0; i < rank; ++i)
    if (x.shape[i] != 1) keep.push_back(static_cast<int64_t>(i));
  std::vector<int64_t> newid(rank, -1);
  for (size_t k = 0; k < keep.size(); ++k) newid[keep[k]] = static_cast<int64_t>(k);
  std::vector<int64_t> p2;  // output order over kept dims
  for (size_t j = 0; j < rank; ++j)
    if (newid[perm[j]] >= 0) p2.push_back(newid[perm[j]]);
  std::vector<int64_t> s2;
  for (int64_t i : keep) s2.push_back(x.shape[i]);
  // Merge runs: input dim k and k+1 merge when k+1 directly follows k in the output order.
  std::vector<int64_t> pos(s2.size());
  for (size_t j = 0; j < p2.size(); ++j) pos[p2[j]] = static_cast<int64_t>(j);
  std::vector<int64_t> group(s2.size());  // merged dim id of each kept input dim
  std::vector<int64_t> gshape;
  for (size_t k = 0; k < s2.size(); ++k) {
    if (k > 0 && pos[k] == pos[k - 1] + 1) {
      group[k] = group[k - 1];
      gshape.back() *= s2[k];
    } else {
      group[k] = static_cast<int64_t>(gshape.size());
      gshape.push_back(s2[k]);
    }
  }
  std::vector<int64_t> gperm;  // output order over merged dims
  for (size_t j = 0; j < p2.size(); ++j)
    if (j == 0 || group[p2[j]] != group[p2[j - 1]]) gperm.push_back(group[p2[j]]);
  const int r = static_cast<int>(gshape.size());
  const int64_t total = x.numel();
  std::string base = fmt::format("view_transpose_{}", DTypeName(x.dtype));
  if (total == 0 || r <= 1) {  // identity after coalescing: a copy
    return LaunchCopies(base + "_copy", {MakeCopy(x.data, y.data, 1, total * esize, 0, 0)}, dev);
  }
  if (r > kMaxRank)
    return Unimplemented(fmt::format("transpose: {} dims after coalescing, the kernel handles {}", r, kMaxRank));
  const std::vector<int64_t> gstride = ContiguousStrides(gshape);  // input strides (elements)
  std::vector<int64_t> oshape(r), ostride_src(r);
  for (int j = 0; j < r; ++j) {
    oshape[j] = gshape[gperm[j]];
    ostride_src[j] = gstride[gperm[j]];
  }
  if (gperm[r - 1] == r - 1) {
    // Innermost dim kept: gather contiguous chunks of gshape[r-1] elements.
    const int64_t chunk_bytes = gshape[r - 1] * esize;
    PermuteParams p;
    p.src = static_cast<const char*>(x.data);
    p.dst = static_cast<char*>(y.data);
    p.unit = UnitFor({reinterpret_cast<intptr_t>(x.data), reinterpret_cast<intptr_t>(y.data), chunk_bytes});
    const int64_t upe = esize;  // bytes per element
    p.rank = r;
    p.total = total * upe / p.unit;
    p.wide = p.total > kFastIndexLimit ? 1 : 0;
    for (int j = 0; j < r; ++j) {
      const bool inner = j == r - 1;
      p.shape[j] = inner ? chunk_bytes / p.unit : oshape[j];
      p.src_stride[j] = inner ? 1 : ostride_src[j] * upe / p.unit;
      if (!p.wide) p.div[j] = FastDivmod(static_cast<uint32_t>(p.shape[j]));
    }
    const unsigned grid = GridFor(p.total, int64_t{kThreads} * kUnroll, dev.sm_count);
    return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(fmt::format("{}_permute{}_u{}", base, r, p.unit),
                                                                    PermuteKernel, dim3(grid), dim3(kThreads), 0, p)};
  }
  // Innermost dim moves: tiled transpose of (A = input dim that lands innermost, B = input innermost).
  const int64_t A = gperm[r - 1], B = r - 1;
  std::vector<int64_t> ostride = ContiguousStrides(oshape);  // output strides per output position
  std::vector<int64_t> dst_stride_of_in(r);                  // output stride of each input dim
  for (int j = 0; j < r; ++j) dst_stride_of_in[gperm[j]] = ostride[j];
  TransposeParams p;
  p.src = static_cast<const char*>(x.data);
  p.dst = static_cast<char*>(y.data);
  p.size_a = gshape[A];
  p.size_b = gshape[B];
  p.src_stride_a = gstride[A];
  p.dst_stride_b = dst_stride_of_in[B];
  // Tiles of at least 128 bytes per row: 64x64 for 1- and 2-byte elements, 32x32 otherwise.
  const int tile = esize <= 2 ? 64 : 32;
  p.tiles_a = (p.size_a + tile - 1) / tile;
  p.tiles_b = (p.size_b + tile - 1) / tile;
  p.batch = 1;
  for (int i = 0; i < r; ++i) {
    if (i == A || i == B) continue;
    p.batch_shape[p.batch_rank] = gshape[i];
    p.batch_src_stride[p.batch_rank] = gstride[i];
    p.batch_dst_stride[p.batch_rank] = dst_stride_of_in[i];
    ++p.batch_rank;
    p.batch *= gshape[i];
  }
  const int64_t tiles = p.batch * p.tiles_a * p.tiles_b;
  const unsigned grid = GridFor(tiles, 1, dev.sm_count, 8);
  std::string name = fmt::format("{}_tiled{}_t{}", base, r, tile);
  auto one = [&](auto kernel, dim3 block) {
    return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(name, kernel, dim3(grid), block, 0, p)};
  };
  switch (esize) {
    case 1: return one(TransposeKernel<uint8_t, 64, 8>, dim3(64, 8));
    case 2: return one(TransposeKernel<uint16_t, 64, 8>, dim3(64, 8));
    case 4: return one(TransposeKernel<uint32_t, 32, 8>, dim3(32, 8));
    case 8: return one(TransposeKernel<uint64_t, 32, 8>, dim3(32, 8));
    default: return Unimplemented(fmt::format("transpose: element size {}", esize));
  }
}

StatusOr<std::vector<cuda::KernelLaunch>> PlanSlice(const Node& n, const TensorRef& x, const TensorRef& y,
                                                    const cuda::DeviceInfo& dev) {
  const size_t rank = x.shape.size();
  if (rank == 0) return Err(n, "slice of a scalar");
  if (y.shape.size() != rank) return Err(n, "output rank differs from the input's");
  const int64_t axis = NormAxis(AttrInt(n.attrs, "axis", -1), rank);
  if (axis < 0 || axis >= static_cast<int64_t>(rank)) return Err(n, fmt::format("axis out of range for rank {}", rank));
  const int64_t dim = x.shape[axis], len = y.shape[axis];
  int64_t start = AttrInt(n.attrs, "start", 0);
  if (start < 0) start += dim;
  if (start < 0 || len < 0 || start + len > dim)
    return Err(n, fmt::format("range [{}, {}) out of bounds for axis {} of {}", start, start + len, axis, ShapeStr(x.shape)));
  if (n.attrs.count("end")) {  // the bound output must be what [start, end) selects
    int64_t end = AttrInt(n.attrs, "end", 0);
    if (end < 0) end += dim;
    if (end - start != len)
      return Err(n, fmt::format("output length {} on axis {} but [start, end) selects {}", len, axis, end - start));
  }
  for (size_t d = 0; d < rank; ++d)
    if (static_cast<int64_t>(d) != axis && y.shape[d] != x.shape[d])
      return Err(n, fmt::format("output shape {} does not match input {} off the axis", ShapeStr(y.shape), ShapeStr(x.shape)));
  const int64_t esize = DTypeSize(x.dtype);
  const int64_t outer = Prod(x.shape, 0, axis), inner = Prod(x.shape, axis + 1, rank);
  const char* src = static_cast<const char*>(x.data) + start * inner * esize;
  return LaunchCopies(fmt::format("view_slice_{}", DTypeName(x.dtype)),
                      {MakeCopy(src, y.data, outer, len * inner * esize, dim * inner * esize, len * inner * esize)}, dev);
}

StatusOr<std::vector<cuda::KernelLaunch>> PlanConcat(const Node& n, const std::vector<TensorRef>& in, const TensorRef& y,
                                                     const cuda::DeviceInfo& dev) {
  const size_t rank = y.shape.size();
  if (rank == 0) return Err(n, "concat of scalars");
  const int64_t axis = NormAxis(AttrInt(n.attrs, "axis", -1), rank);
  if (axis < 0 || axis >= static_cast<int64_t>(rank)) return Err(n, "axis out of range");
  const int64_t esize = DTypeSize(y.dtype);
  const int64_t outer = Prod(y.shape, 0, axis), inner = Prod(y.shape, axis + 1, rank), ydim = y.shape[axis];
  std::vector<Copy2D> copies;
  int64_t offset = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const TensorRef& x = in[k];
    if (x.dtype != y.dtype)
      return Unimplemented(fmt::format("concat: input {} is {} but the output is {} (a view never converts)", k,
                                       DTypeName(x.dtype), DTypeName(y.dtype)));
    if (x.shape.size() != rank) return Err(n, fmt::format("input {} has rank {}, output {}", k, x.shape.size(), rank));
    for (size_t d = 0; d < rank; ++d)
      if (static_cast<int64_t>(d) != axis && x.shape[d] != y.shape[d])
        return Err(n, fmt::format("input {} {} does not match output {} off the axis", k, ShapeStr(x.shape), ShapeStr(y.shape)));
    const int64_t xdim = x.shape[axis];
    if (offset + xdim > ydim) return Err(n, "inputs are longer than the output along the axis");
    if (xdim > 0 && outer > 0 && inner > 0) {
      if (!x.data) return Err(n, "null input pointer");
      copies.push_back(MakeCopy(x.data, static_cast<char*>(y.data) + offset * inner * esize, outer, xdim * inner * esize,
                                xdim * inner * esize, ydim * inner * esize));
    }
    offset += xdim;
  }
  if (offset != ydim) return Err(n, fmt::format("inputs cover {} of the output's {} along the axis", offset, ydim));
  return LaunchCopies(fmt::format("view_concat{}_{}", in.size(), DTypeName(y.dtype)), copies, dev);
}

}  // namespace

StatusOr<std::vector<cuda::KernelLaunch>> PlanView(const Node& n, const std::vector<TensorRef>& in,
                                                   const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev) {
  if (GetOpInfo(n.op).kind != FusionKind::kView) return Internal(fmt::format("{}: not a view op", OpName(n.op)));
  if (out.size() != 1 || in.empty()) return Err(n, "expected inputs and 1 output");
  const TensorRef& y = out[0];
  if (!y.data && y.numel() > 0) return Err(n, "null output pointer");
  if (n.op == OpKind::kConcat) return PlanConcat(n, in, y, dev);
  if (in.size() != 1) return Err(n, fmt::format("expected 1 input, got {}", in.size()));
  const TensorRef& x = in[0];
  if (x.dtype != y.dtype)
    return Unimplemented(fmt::format("{}: input is {} but the output is {} (a view never converts)", OpName(n.op),
                                     DTypeName(x.dtype), DTypeName(y.dtype)));
  if (!x.data && x.numel() > 0) return Err(n, "null input pointer");
  switch (n.op) {
    case OpKind::kReshape: {
      if (x.numel() != y.numel())
        return Err(n, fmt::format("cannot reshape {} to {}", ShapeStr(x.shape), ShapeStr(y.shape)));
      return LaunchCopies(fmt::format("view_reshape_{}", DTypeName(x.dtype)),
                          {MakeCopy(x.data, y.data, 1, x.numel() * DTypeSize(x.dtype), 0, 0)}, dev);
    }
    case OpKind::kTranspose:
      if (x.shape.size() != y.shape.size()) return Err(n, "output rank differs from the input's");
      return PlanTranspose(n, x, y, dev);
    case OpKind::kSlice:
      return PlanSlice(n, x, y, dev);
    default:
      return Unimplemented(fmt::format("{}: no library kernel", OpName(n.op)));
  }
}

}  // namespace opfuse::kernels
