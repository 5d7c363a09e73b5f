// Reduction library kernels: sum, max, mean, argmax over the last axis (kept with size 1), one
// node per launch.
//
// Design:
//  * Semantics follow src/ops/reduction.cc: sum/mean accumulate in f32 for float inputs (the CPU
//    reference uses double, so results agree to f32 rounding) and in int64 for integers (exact;
//    i32 results saturate like HostTensor::set); mean = sum / cols; output dtype = input dtype,
//    argmax -> i64. max and argmax propagate NaN: the result is NaN / the index of the *first* NaN
//    when a row has one, else the maximum / the *first* index of the maximum — the CPU reference's
//    sequential scan. The parallel combine is "better(x, y)": NaN beats numbers (lower index among
//    NaNs), a larger value wins, ties go to the lower index; it is associative and commutative, so
//    any reduction tree gives the sequential answer. An empty row gives sum 0, mean NaN, max -inf
//    (integer minimum), argmax 0, as the reference does.
//  * Three launch shapes, picked on the host:
//      warp-per-row   8 rows per 256-thread block, grid-stride over rows; shuffle-only reduction.
//                     For narrow rows (<= 1024 columns) and whenever there are enough rows to fill
//                     the GPU with warps (>= 32 per SM) — the prefill shapes.
//      block-per-row  one row per block (64..1024 threads sized to the row), warp shuffles then
//                     shared memory across warps. For few wide rows (decode: 1-64 rows of
//                     2048..128k columns), where a warp per row would leave most SMs idle.
//      cluster-row    a few rows (8 blocks per row fit on the SMs) of >= 4096 columns (decode's
//                     argmax over the vocabulary): a cluster of 8 blocks per row, each folding a
//                     slice; block 0 merges the slices' states through distributed shared memory
//                     (sm_90).
//    The choice is host-only: target/launch_shape.h, ChooseReduction.
//    All read 16-byte vectors when the row starts are aligned (base pointer aligned and
//    cols * size a multiple of 16), with 8 vectors in flight per thread, else scalar loads.
//  * Launched with PDL (pdl.cuh; PdlEnter at the top): the decode step's argmax over the logits
//    then starts while the LM head drains.
#include <fmt/format.h>

#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>

#include "kernels/kernel_common.cuh"
#include "kernels/pdl.cuh"
#include "kernels/library.h"
#include "target/launch_shape.h"

namespace opfuse::kernels {
namespace {

// ------------------------------------------------------------------ reducers
// State: the running value; Add() folds element `c` of the row, Combine() merges two states,
// Shfl() moves a state across lanes, Final() produces the output element.
template <class T>
struct RSum {
  using C = CompOf<T>;
  using State = C;
  using Out = T;
  __device__ __forceinline__ static State Init() { return C(0); }
  __device__ __forceinline__ static void Add(State& s, C v, int64_t) { s += v; }
  __device__ __forceinline__ static State Combine(State a, State b) { return a + b; }
  __device__ __forceinline__ static State Shfl(State s, int lane_mask) { return __shfl_xor_sync(0xffffffffu, s, lane_mask); }
  __device__ __forceinline__ static Out Final(State s, int64_t) { return FromComp<T>(s); }
};

template <class T>
struct RMean : RSum<T> {
  using typename RSum<T>::State;
  __device__ __forceinline__ static T Final(State s, int64_t cols) { return FromFloat<T>(s / static_cast<float>(cols)); }
};

template <class C>
__device__ __forceinline__ bool IsNan(C v) {
  if constexpr (std::is_same_v<C, float>) return v != v;
  else return false;
}

template <class T>
struct RMax {
  using C = CompOf<T>;
  using State = C;
  using Out = T;
  __device__ __forceinline__ static State Init() {
    if constexpr (std::is_same_v<C, float>) return -INFINITY;
    else return INT64_MIN;
  }
  __device__ __forceinline__ static State Combine(State a, State b) {
    if constexpr (std::is_same_v<C, float>) {
      float r;  // one instruction: NaN if either is NaN, else the larger (sm_80+)
      asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
      return r;
    } else {
      return a > b ? a : b;
    }
  }
  __device__ __forceinline__ static void Add(State& s, C v, int64_t) { s = Combine(s, v); }
  __device__ __forceinline__ static State Shfl(State s, int lane_mask) { return __shfl_xor_sync(0xffffffffu, s, lane_mask); }
  __device__ __forceinline__ static Out Final(State s, int64_t) { return FromComp<T>(s); }
};

template <class C>
struct ArgState {
  C v;
  int64_t i;
};

template <class T>
struct RArgmax {
  using C = CompOf<T>;
  using State = ArgState<C>;
  using Out = int64_t;
  __device__ __forceinline__ static State Init() { return {RMax<T>::Init(), INT64_MAX}; }
  // Whether x beats y (see the design note).
  __device__ __forceinline__ static bool Better(const State& x, const State& y) {
    const bool xn = IsNan(x.v), yn = IsNan(y.v);
    if (xn || yn) return xn && (!yn || x.i < y.i);
    return x.v > y.v || (x.v == y.v && x.i < y.i);
  }
  __device__ __forceinline__ static State Combine(State a, State b) { return Better(b, a) ? b : a; }
  __device__ __forceinline__ static void Add(State& s, C v, int64_t c) {
    const State x{v, c};
    if (Better(x, s)) s = x;
  }
  __device__ __forceinline__ static State Shfl(State s, int lane_mask) {
    return {__shfl_xor_sync(0xffffffffu, s.v, lane_mask), __shfl_xor_sync(0xffffffffu, s.i, lane_mask)};
  }
  __device__ __forceinline__ static Out Final(State s, int64_t) { return s.i == INT64_MAX ? 0 : s.i; }
};

// ------------------------------------------------------------------ kernels
struct RedParams {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t rows = 0, cols = 0;
};

// Shapes and their choice: target/launch_shape.h (ChooseReduction).
constexpr int kWarpRowsThreads = 32 * target::kWarpRowsPerBlock;
constexpr int kRowsPerBlock = target::kWarpRowsPerBlock;
constexpr int kUnroll = target::kReductionUnroll;  // vectors in flight per thread (8 measured clearly faster than 4)

// Folds the columns [first, cols) of one row, VEC elements at a time, `step` elements between a
// thread's consecutive vectors, kUnroll vectors in flight. A chunk wholly inside the row loads its
// kUnroll vectors unconditionally (one basic block, so all loads are issued before the first use;
// guarded loads in separate blocks are not batched — the elementwise kernels measured that much
// slower), and each vector folds into its own partial state, merged after: kUnroll independent
// dependency chains of VEC elements instead of one of kUnroll x VEC (every Combine is associative
// and commutative, see the design note).
template <class R, class T, int VEC>
__device__ __forceinline__ void FoldRow(const T* row, int64_t cols, int64_t first, int64_t step,
                                        typename R::State& s, int64_t ibase = 0) {
  for (int64_t c0 = first; c0 < cols; c0 += step * kUnroll) {
    VecOf<T, VEC> v[kUnroll];
    typename R::State part[kUnroll];
    if (c0 + (kUnroll - 1) * step < cols) {  // every vector of the chunk is in the row (cols % VEC == 0)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = *reinterpret_cast<const VecOf<T, VEC>*>(row + c0 + u * step);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        part[u] = R::Init();
#pragma unroll
        for (int j = 0; j < VEC; ++j) R::Add(part[u], ToComp(v[u].v[j]), ibase + c0 + u * step + j);
      }
    } else {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * step;
        if (c < cols) v[u] = *reinterpret_cast<const VecOf<T, VEC>*>(row + c);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * step;
        part[u] = R::Init();
        if (c < cols) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) R::Add(part[u], ToComp(v[u].v[j]), ibase + c + j);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) s = R::Combine(s, part[u]);
  }
}

template <class R>
__device__ __forceinline__ typename R::State WarpReduce(typename R::State s) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) s = R::Combine(s, R::Shfl(s, m));
  return s;
}

template <class R, class T, int VEC>
__global__ void __launch_bounds__(kWarpRowsThreads) RedWarpPerRow(RedParams p) {
  PdlEnter();  // launched with PDL: nothing is touched before the wait
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* in = static_cast<const T*>(p.in);
  auto* out = static_cast<typename R::Out*>(p.out);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp; r < p.rows;
       r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    typename R::State s = R::Init();
    FoldRow<R, T, VEC>(in + r * p.cols, p.cols, int64_t{lane} * VEC, 32 * VEC, s);
    s = WarpReduce<R>(s);
    if (lane == 0) out[r] = R::Final(s, p.cols);
  }
}

// One state per thread combined over the block: warp shuffles, one partial per warp in `partial`
// (nwarps entries), then warp 0 reduces those. The block's state is valid in warp 0 only; the
// caller syncs before `partial` is written again.
template <class R>
__device__ __forceinline__ typename R::State BlockReduce(typename R::State s, typename R::State* partial, int nwarps) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  s = WarpReduce<R>(s);
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < nwarps ? partial[lane] : R::Init();
    s = WarpReduce<R>(s);
  }
  return s;
}

template <class R, class T, int VEC>
__global__ void __launch_bounds__(1024) RedBlockPerRow(RedParams p) {
  PdlEnter();  // launched with PDL: nothing is touched before the wait
  __shared__ typename R::State partial[32];
  const T* in = static_cast<const T*>(p.in);
  auto* out = static_cast<typename R::Out*>(p.out);
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    typename R::State s = R::Init();
    FoldRow<R, T, VEC>(in + r * p.cols, p.cols, int64_t{threadIdx.x} * VEC, int64_t{blockDim.x} * VEC, s);
    s = BlockReduce<R>(s, partial, blockDim.x / 32);
    if (threadIdx.x == 0) out[r] = R::Final(s, p.cols);
    __syncthreads();  // `partial` is reused by the next row
  }
}

// Split row: a cluster of kClusterBlocks blocks per row (few rows of many columns: the decode
// step's argmax over the vocabulary). Each block folds one slice (a multiple of VEC columns,
// indices offset to the row's), reduces it to one state in shared memory; block 0 of the cluster
// merges the others' states through distributed shared memory. No global scratch or counters, so
// the launch stays one kernel in a captured graph.
constexpr int kClusterBlocks = target::kReductionClusterBlocks;
constexpr int kClusterThreads = target::kReductionClusterThreads;

template <class R, class T, int VEC>
__global__ void __cluster_dims__(kClusterBlocks, 1, 1) __launch_bounds__(kClusterThreads) RedClusterRow(RedParams p) {
  PdlEnter();  // launched with PDL: nothing is touched before the wait
  namespace cg = cooperative_groups;
  __shared__ typename R::State partial[kClusterThreads / 32];
  __shared__ typename R::State block_state;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x / kClusterBlocks;  // the planner launches exactly rows clusters
  const T* in = static_cast<const T*>(p.in);
  auto* out = static_cast<typename R::Out*>(p.out);
  const int64_t per = ((p.cols + VEC - 1) / VEC + kClusterBlocks - 1) / kClusterBlocks * VEC;
  const int64_t beg = rank * per, len = max(int64_t{0}, min(p.cols, beg + per) - beg);
  typename R::State s = R::Init();
  FoldRow<R, T, VEC>(in + r * p.cols + beg, len, int64_t{threadIdx.x} * VEC, int64_t{kClusterThreads} * VEC, s, beg);
  s = BlockReduce<R>(s, partial, kClusterThreads / 32);
  if (threadIdx.x == 0) block_state = s;
  cluster.sync();  // every block's state is written
  if (rank == 0 && warp == 0) {
    s = lane < kClusterBlocks ? *cluster.map_shared_rank(&block_state, lane) : R::Init();
    s = WarpReduce<R>(s);
    if (lane == 0) out[r] = R::Final(s, p.cols);
  }
  cluster.sync();  // the blocks stay until block 0 has read their shared memory
}

// ------------------------------------------------------------------ dispatch
using RedKernel = void (*)(RedParams);
struct RedKernels {
  RedKernel warp_vec = nullptr, warp_scalar = nullptr, block_vec = nullptr, block_scalar = nullptr;
  RedKernel cluster_vec = nullptr, cluster_scalar = nullptr;
  int vec = 1;
  bool ok() const { return warp_scalar != nullptr; }
};

template <class R, class T>
RedKernels MakeRed() {
  constexpr int V = 16 / sizeof(T);
  return {RedWarpPerRow<R, T, V>,  RedWarpPerRow<R, T, 1>,  RedBlockPerRow<R, T, V>, RedBlockPerRow<R, T, 1>,
          RedClusterRow<R, T, V>, RedClusterRow<R, T, 1>, V};
}

template <template <class> class R, bool kFloatOnly>
RedKernels RedFor(DType t) {
  switch (t) {
    case DType::kF32: return MakeRed<R<float>, float>();
    case DType::kF16: return MakeRed<R<__half>, __half>();
    case DType::kBF16: return MakeRed<R<__nv_bfloat16>, __nv_bfloat16>();
    case DType::kI32: if constexpr (!kFloatOnly) return MakeRed<R<int32_t>, int32_t>(); else return {};
    case DType::kI64: if constexpr (!kFloatOnly) return MakeRed<R<int64_t>, int64_t>(); else return {};
    case DType::kBool: return {};
  }
  return {};
}

RedKernels RedKernelsFor(OpKind op, DType t) {
  switch (op) {
    case OpKind::kSum: return RedFor<RSum, false>(t);
    case OpKind::kMean: return RedFor<RMean, true>(t);
    case OpKind::kMax: return RedFor<RMax, false>(t);
    case OpKind::kArgmax: return RedFor<RArgmax, false>(t);
    default: return {};
  }
}

Status Err(const Node& n, const std::string& msg) { return InvalidArgument(fmt::format("{}: {}", OpName(n.op), msg)); }

}  // namespace

StatusOr<std::vector<cuda::KernelLaunch>> PlanReduction(const Node& n, const std::vector<TensorRef>& in,
                                                        const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev) {
  if (GetOpInfo(n.op).kind != FusionKind::kReduction) return Internal(fmt::format("{}: not a reduction", OpName(n.op)));
  if (in.size() != 1 || out.size() != 1)
    return Err(n, fmt::format("expected 1 input and 1 output, got {} and {}", in.size(), out.size()));
  const TensorRef &x = in[0], &y = out[0];
  if (x.shape.empty()) return Err(n, "reduction of a scalar");
  const DType want = n.op == OpKind::kArgmax ? DType::kI64 : x.dtype;
  if (y.dtype != want)
    return Err(n, fmt::format("output dtype {} (expected {})", DTypeName(y.dtype), DTypeName(want)));
  std::vector<int64_t> want_shape = x.shape;
  want_shape.back() = 1;
  if (y.shape != want_shape)
    return Err(n, fmt::format("output shape [{}] (expected [{}])", fmt::join(y.shape, ", "), fmt::join(want_shape, ", ")));
  const RedKernels k = RedKernelsFor(n.op, x.dtype);
  if (!k.ok()) return Unimplemented(fmt::format("{}: no library kernel for dtype {}", OpName(n.op), DTypeName(x.dtype)));
  if ((!x.data && x.numel() > 0) || (!y.data && y.numel() > 0)) return Err(n, "null pointer");

  RedParams p;
  p.in = x.data;
  p.out = y.data;
  p.cols = x.shape.back();
  p.rows = y.numel();
  if (p.rows == 0)
    return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(fmt::format("red_{}_empty", OpName(n.op)), k.warp_scalar,
                                                                    dim3(0), dim3(kWarpRowsThreads), 0, p)};
  const int v = target::RowVectorElems(p.cols, DTypeSize(x.dtype), Aligned(x.data, 16)) > 1 ? k.vec : 1;
  const bool vec = v > 1;
  const target::ReductionShape s = target::ChooseReduction(p.rows, p.cols, v, dev);
  RedKernel fn = nullptr;
  switch (s.form) {
    case target::ReductionForm::kWarpRow: fn = vec ? k.warp_vec : k.warp_scalar; break;
    case target::ReductionForm::kBlockRow: fn = vec ? k.block_vec : k.block_scalar; break;
    case target::ReductionForm::kClusterRow: fn = vec ? k.cluster_vec : k.cluster_scalar; break;
  }
  return std::vector<cuda::KernelLaunch>{
      cuda::KernelLaunch::Make(fmt::format("red_{}_{}_{}_v{}", OpName(n.op), DTypeName(x.dtype), target::ReductionFormName(s.form), v),
                               fn, dim3(static_cast<unsigned>(s.grid)), dim3(static_cast<unsigned>(s.block)), 0, p)
          .Pdl()};
}

}  // namespace opfuse::kernels
