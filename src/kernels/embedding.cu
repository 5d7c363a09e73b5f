// Embedding library kernel: out[i, :] = table[ids[i], :] for table [V, D] (any dtype) and ids of
// any shape (i32 or i64), output [..., D].
//
// Design: a row gather is a pure copy, so the kernel is a warp per id (8 ids per 256-thread block,
// grid-stride over ids, grid from the SM count): lane 0..31 copy the row in units of 16 bytes when
// the row length, the table and the output are 16-byte aligned (else the largest of 8/4/2/1 that
// is), kUnroll units in flight per lane. The unit size is a template parameter picked on the host.
//
// Out-of-range ids: the CPU reference fails with InvalidArgument, but a kernel cannot return a
// Status. An id outside [0, V) makes the kernel fill that output row with 0xFF bytes — NaN for
// f32/f16/bf16 tables (the contract: "out-of-range id -> NaN row"), -1 for integer tables, 0xFF
// (true) for bool — and never reads outside the table. The executor documents the difference.
#include "kernels/pdl.cuh"
#include <fmt/format.h>

#include <algorithm>

#include "kernels/kernel_common.cuh"
#include "kernels/library.h"

namespace opfuse::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kIdsPerBlock = kThreads / 32;
constexpr int kUnroll = 4;

template <int U> struct UnitT;
template <> struct UnitT<1> { using type = uint8_t; static __device__ type Ones() { return 0xFFu; } };
template <> struct UnitT<2> { using type = uint16_t; static __device__ type Ones() { return 0xFFFFu; } };
template <> struct UnitT<4> { using type = uint32_t; static __device__ type Ones() { return 0xFFFFFFFFu; } };
template <> struct UnitT<8> { using type = uint64_t; static __device__ type Ones() { return ~uint64_t{0}; } };
template <> struct UnitT<16> {
  using type = uint4;
  static __device__ type Ones() { return make_uint4(~0u, ~0u, ~0u, ~0u); }
};

struct EmbeddingParams {
  const void* table = nullptr;
  const void* ids = nullptr;
  void* out = nullptr;
  int64_t vocab = 0;
  int64_t n = 0;          // ids
  int64_t row_units = 0;  // units per row
};

template <class Id, int U>
__global__ void __launch_bounds__(kThreads) EmbeddingKernel(EmbeddingParams p) {
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  using T = typename UnitT<U>::type;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* table = static_cast<const T*>(p.table);
  T* out = static_cast<T*>(p.out);
  const Id* ids = static_cast<const Id*>(p.ids);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kIdsPerBlock + warp; i < p.n;
       i += static_cast<int64_t>(gridDim.x) * kIdsPerBlock) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    T* dst = out + i * p.row_units;
    if (id < 0 || id >= p.vocab) {
      for (int64_t c = lane; c < p.row_units; c += 32) dst[c] = UnitT<U>::Ones();
      continue;
    }
    const T* src = table + id * p.row_units;
    for (int64_t c0 = lane; c0 < p.row_units; c0 += 32 * kUnroll) {
      T v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (c0 + u * 32 < p.row_units) v[u] = src[c0 + u * 32];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (c0 + u * 32 < p.row_units) dst[c0 + u * 32] = v[u];
    }
  }
}

using EmbKernel = void (*)(EmbeddingParams);

template <class Id>
EmbKernel ForUnit(int unit) {
  switch (unit) {
    case 16: return EmbeddingKernel<Id, 16>;
    case 8: return EmbeddingKernel<Id, 8>;
    case 4: return EmbeddingKernel<Id, 4>;
    case 2: return EmbeddingKernel<Id, 2>;
    default: return EmbeddingKernel<Id, 1>;
  }
}

Status Err(const std::string& msg) { return InvalidArgument("embedding: " + msg); }

}  // namespace

StatusOr<std::vector<cuda::KernelLaunch>> PlanEmbedding(const Node& n, const std::vector<TensorRef>& in,
                                                        const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev) {
  if (n.op != OpKind::kEmbedding) return Internal(fmt::format("{}: not embedding", OpName(n.op)));
  if (in.size() != 2 || out.size() != 1)
    return Err(fmt::format("expected (table, ids) and 1 output, got {} inputs and {} outputs", in.size(), out.size()));
  const TensorRef &table = in[0], &ids = in[1], &y = out[0];
  if (table.shape.size() != 2)
    return Err(fmt::format("table must be [vocab, dim], got rank {}", table.shape.size()));
  if (!IsInt(ids.dtype))
    return Unimplemented(fmt::format("embedding: ids must be i32 or i64, got {}", DTypeName(ids.dtype)));
  if (y.dtype != table.dtype)
    return Err(fmt::format("output dtype {} differs from the table's {}", DTypeName(y.dtype), DTypeName(table.dtype)));
  std::vector<int64_t> want = ids.shape;
  want.push_back(table.shape[1]);
  if (y.shape != want) return Err(fmt::format("output shape [{}] (expected [{}])", fmt::join(y.shape, ", "), fmt::join(want, ", ")));
  EmbeddingParams p;
  p.table = table.data;
  p.ids = ids.data;
  p.out = y.data;
  p.vocab = table.shape[0];
  p.n = ids.numel();
  const int64_t row_bytes = table.shape[1] * DTypeSize(table.dtype);
  if (p.n > 0 && row_bytes > 0 && (!p.table || !p.ids || !p.out)) return Err("null pointer");
  int unit = 16;
  for (int64_t v : {reinterpret_cast<int64_t>(table.data), reinterpret_cast<int64_t>(y.data), row_bytes})
    while (unit > 1 && v % unit != 0) unit /= 2;
  p.row_units = row_bytes / unit;
  const bool i64 = ids.dtype == DType::kI64;
  EmbKernel k = i64 ? ForUnit<int64_t>(unit) : ForUnit<int32_t>(unit);
  const unsigned grid = row_bytes > 0 ? GridFor(p.n, kIdsPerBlock, dev.sm_count, 8) : 0;
  return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(
      fmt::format("embedding_{}_ids_{}_u{}", DTypeName(table.dtype), DTypeName(ids.dtype), unit), k, dim3(grid),
      dim3(kThreads), 0, p).Pdl()};
}

}  // namespace opfuse::kernels
