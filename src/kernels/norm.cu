// Fused norm library kernels: rms_norm (x, weight?), add_rms_norm (x, residual, weight) -> (y, sum),
// layer_norm (x, weight?, bias?), over the last axis.
//
// Design (launch shapes in target/launch_shape.h): a row group of threads holds its row in registers as raw
// 16-byte packs (4 registers per 8 bf16; Launder keeps the compiler from holding f32 copies
// across the reduction instead), issues every load of the row before the first use,
// reduces with shuffles (+ one shared exchange for groups wider than a warp), and writes the
// result from the same registers, so each element is read once and written once. Rows wider than
// the register path stream in steps of 4 vectors per thread and re-read the row (L2-resident) for
// the output pass; layer_norm then takes three passes (mean, variance, output) so the variance is
// the reference's two-pass sum((x - mean)^2), never E[x^2] - mean^2.
// Semantics are src/ops/composite_cpu.cc's: f32 math, rsqrt(mean(x^2) + eps); add_rms_norm rounds
// the sum to the storage type first and normalises the rounded value. add_rms_norm's sum output
// may alias the residual (in-place residual update): every element is read before it is written,
// by the same thread, in both paths (the looped path writes the sum in its first pass and reads it
// back in the output pass). Optional weight/bias are runtime flags (null pointers), not templates.
// In the register path the sum is stored as soon as it is computed and the rms weight is loaded
// before the row reduction (rms_norm up to 4 packs per thread, add_rms_norm up to 2: beyond that the
// extra registers spill under the 1024-thread bound), so neither the store nor the weight's L2 round
// trip waits for the reduction. Where the row is an exact cover of the planner's shape (cols ==
// threads per row x vectors x vec) and the shape is one of fused_common.cuh's ExactShapes, the row group is a
// template constant (KTPR): no column guards, unrolled reductions (softmax.cu's fast path; with a
// runtime row group a 2-vector softmax ran twice the JIT's instructions under ncu).
#include <cooperative_groups.h>

#include "kernels/pdl.cuh"
#include "kernels/fused_common.cuh"
#include "kernels/staged_row.cuh"

namespace opfuse::kernels {
namespace {

using namespace fused;  // NOLINT

enum NormKind : int { kRms = 0, kAddRms = 1, kLayer = 2 };

template <class T>
struct NormParams {
  const T* x;
  const T* res;   // add_rms_norm
  const T* w;     // may be null (rms_norm, layer_norm)
  const T* b;     // layer_norm, may be null
  T* y;
  T* sum;         // add_rms_norm; may equal res
  int64_t rows;
  int cols;
  int tpr;        // threads per row
  int chunk;      // split rows, staged split: window elements per block of the cluster (the staged split: each input's buffer)
  int stage_elems;  // staged rows: elements of one input's window buffer
  int twin;         // staged rows: double-buffered
  float eps;
  float inv_cols;
};

// y = (x - mean) * inv (* w) (+ b) for one pack, with w / b already loaded.
template <class T, int N, bool SH = false, bool GLOBAL = false>
__device__ __forceinline__ void FinishWith(const NormParams<T>& p, const Pack<T, N>& xv, const Pack<T, N>& wv,
                                           const Pack<T, N>& bv, int64_t base, int c, float mean, float inv) {
  float o[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    float v = (xv.get(j) - mean) * inv;
    if (p.w) v *= wv.get(j);
    if (p.b) v += bv.get(j);
    o[j] = v;
  }
  StoreRowPack<T, N, SH, GLOBAL>(p.y + base, c, p.cols, MakePack<T, N>(o));
}

// GLOBAL: StoreRowPack's (the looped kernel's stores as st.global.v4).
template <class T, int N, bool SH = false, bool GLOBAL = false>
__device__ __forceinline__ void Finish(const NormParams<T>& p, const Pack<T, N>& xv, int64_t base, int c, float mean,
                                       float inv) {
  Pack<T, N> wv, bv;
  if (p.w) wv = LoadColumnPack<T, N, SH>(p.w, c, p.cols);
  if (p.b) bv = LoadColumnPack<T, N, SH>(p.b, c, p.cols);
  FinishWith<T, N, SH, GLOBAL>(p, xv, wv, bv, base, c, mean, inv);
}

// Register path: VPT packs of N elements per thread. KTPR > 0: the exact-cover fast path (cols ==
// KTPR * VPT * N, as softmax.cu's): the row group is a compile-time constant, no column guards.
// SH: shifted rows (fused_common.cuh): row starts off the 16-byte grid, read in the aligned window
// around the row (vector v at column v * N - s), the row group covering cols + N - 1 columns.
template <class T, int N, int VPT, int KIND, int KTPR = 0, bool SH = false, int EARLY_W = -1>
__global__ void __launch_bounds__(RowBlockLimit(VPT, false)) NormRegKernel(NormParams<T> p) {
  static_assert(!SH || KTPR == 0, "shifted rows take the runtime row group");
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  __shared__ float smem[64];
  const int tpr = KTPR > 0 ? KTPR : p.tpr;
  // whether column c (a vector's first) is inside the row: always, on the exact-cover path
  auto in_row = [&](int c) { return KTPR > 0 || c < p.cols; };
  const int g = threadIdx.x / tpr, t = threadIdx.x - g * tpr, rpb = blockDim.x / tpr;
  int phase = 0;
  // One row group a block, no grid-stride loop: the planner launches a block for every group
  // (at most 2^31 - 1 of them). A loop around the row keeps its state live across iterations and
  // cost a quarter to a third more registers a thread, so fewer blocks were resident an SM.
  {
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rpb;
    const int64_t r = r0 + g;
    const bool valid = r < p.rows;
    const int64_t base = r * (KTPR > 0 ? KTPR * VPT * N : p.cols);
    // the first column of vector `it` of this thread (negative for the head of a shifted row)
    const int s = SH ? static_cast<int>(base % N) : 0;
    auto col = [&](int it) { return (it * tpr + t) * N - s; };
    Pack<T, N> xv[VPT];
    if constexpr (KIND == kAddRms) {
      Pack<T, N> rv[VPT];
#pragma unroll
      for (int it = 0; it < VPT; ++it) {
        const int c = col(it);
        if (valid && in_row(c)) {
          xv[it] = LoadRowPack<T, N, SH>(p.x + base, c, p.cols, base, p.rows * p.cols);
          rv[it] = LoadRowPack<T, N, SH>(p.res + base, c, p.cols, base, p.rows * p.cols);
        }
      }
#pragma unroll
      for (int it = 0; it < VPT; ++it) {  // the sum, rounded to T (normalised from the rounded value)
        float f[N];
#pragma unroll
        for (int j = 0; j < N; ++j) f[j] = xv[it].get(j) + rv[it].get(j);
        xv[it] = MakePack<T, N>(f);
        // stored now, not after the reduction: the write overlaps it (x and res of this pack were
        // read by this thread above, so an in-place sum over res is still read-before-write)
        const int c = col(it);
        if (valid && in_row(c)) StoreRowPack<T, N, SH>(p.sum + base, c, p.cols, xv[it]);
      }
    } else {
#pragma unroll
      for (int it = 0; it < VPT; ++it) {
        const int c = col(it);
        if (valid && in_row(c)) xv[it] = LoadRowPack<T, N, SH>(p.x + base, c, p.cols, base, p.rows * p.cols);
      }
    }
    // The weight (rms kinds, few packs per thread) is loaded before the reduction, so its L2 round
    // trip overlaps the reduction instead of following it; with more packs the registers are kept
    // for the row (Finish loads it at the end). add_rms_norm at 2 packs, and rms_norm's wide rows
    // (EARLY_W = 0: past kMaxRegisterCols, blocks of 600-1024 threads), load it late: there the
    // early weight's 12-24 registers a thread left fewer blocks resident an SM (one, for the wide
    // rows), which cost more than the round trip (docs/BENCHMARKS.md, "Register rows").
    constexpr bool kEarlyW = EARLY_W >= 0 ? EARLY_W != 0 : (KIND == kRms && VPT <= 4) || (KIND == kAddRms && VPT <= 1);
    Pack<T, N> wv[kEarlyW ? VPT : 1];
    if constexpr (kEarlyW) {
#pragma unroll
      for (int it = 0; it < VPT; ++it) {
        const int c = col(it);
        if (p.w && valid && in_row(c)) wv[it] = LoadColumnPack<T, N, SH>(p.w, c, p.cols);
      }
    }
    float mean = 0.0f, acc = 0.0f;
    if constexpr (KIND == kLayer) {
#pragma unroll
      for (int it = 0; it < VPT; ++it)
        if (valid && in_row(col(it)))
#pragma unroll
          for (int j = 0; j < N; ++j) acc += xv[it].get(j);  // a shifted row's outside elements are 0
      mean = RowReduce<SumOp>(acc, tpr, smem, phase) * p.inv_cols;
#pragma unroll
      for (int it = 0; it < VPT; ++it) Launder(xv[it]);
      acc = 0.0f;
#pragma unroll
      for (int it = 0; it < VPT; ++it)
        if (valid && in_row(col(it)))
#pragma unroll
          for (int j = 0; j < N; ++j) {
            const float d = xv[it].get(j) - mean;
            if (!SH || (col(it) + j >= 0 && col(it) + j < p.cols)) acc += d * d;
          }
    } else {
#pragma unroll
      for (int it = 0; it < VPT; ++it)
        if (valid && in_row(col(it)))
#pragma unroll
          for (int j = 0; j < N; ++j) {
            const float f = xv[it].get(j);
            acc += f * f;
          }
    }
    const float inv = rsqrtf(RowReduce<SumOp>(acc, tpr, smem, phase) * p.inv_cols + p.eps);
#pragma unroll
    for (int it = 0; it < VPT; ++it) Launder(xv[it]);  // re-convert from raw packs (fused_common.cuh)
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const int c = col(it);
      if (valid && in_row(c)) {
        if constexpr (kEarlyW) FinishWith<T, N, SH>(p, xv[it], wv[it], wv[it], base, c, mean, inv);  // no bias (rms)
        else Finish<T, N, SH>(p, xv[it], base, c, mean, inv);
      }
    }
  }
}

// Split row (rows past the register path, sm_90; target::ChooseRowSplit, at every row count): a
// cluster of blocks per row (1 to kRowSplitBlocks, the launch's cluster attribute), block k holding
// window elements [k * chunk, (k + 1) * chunk) of the row in registers (the aligned window of shifted
// rows: column = window element - s, s = base % N; elements outside the row read as 0). Each block reduces its part, the cluster sums the
// parts in one exchange pushed into every block's shared memory (device_common.cuh's push_send: no
// closing cluster barrier; layer_norm: the sums of x - K and (x - K)^2 for the row's first element K),
// so the row is read once and written once, as softmax.cu's SoftmaxSplitKernel. add_rms_norm stores the
// rounded sum as soon as it has it (x and res of that pack read first by the same thread: an in-place
// sum over res stays read-before-write).
// CL: the cluster size compiled in (__cluster_dims__, NormSplit8Kernel: 8 blocks per row), or 0 for
// the launch's (a launch attribute, NormSplitKernel), as softmax.cu's split.
// EW: the weight and bias loaded into registers with the row, before the exchange — rms_norm and
// layer_norm launches whose every block has an SM to itself (rows x blocks <= SMs: no occupancy to
// lose), where the output pass then waits for no load; otherwise prefetched into L2 (registers held
// across the exchange cost the many-row launches their occupancy, and add_rms_norm, which holds the
// residual too, measured slower with them; docs/BENCHMARKS.md, "Few vocabulary rows: the weight in
// registers").
template <class T, int N, int VPT, int KIND, int CL, bool EW>
__device__ __forceinline__ void NormSplitRow(const NormParams<T>& p) {
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  namespace cg = cooperative_groups;

  __shared__ float smem[64];
  __shared__ float parts[2 * target::kRowSplitBlocks];  // the cluster's partial sums by rank, pushed here
  __shared__ unsigned long long bar;                    // completes when every block's partials landed
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int C = CL > 0 ? CL : static_cast<int>(cluster.num_blocks());  // blocks per row
  const int64_t r = blockIdx.x / C;  // the planner launches exactly rows clusters
  const int64_t base = r * p.cols;
  const int s = static_cast<int>(base % N);
  const int tpb = blockDim.x;
  const int w0 = rank * p.chunk;
  int phase = 0;
  auto col = [&](int it) { return w0 + (it * tpb + static_cast<int>(threadIdx.x)) * N - s; };
  auto mine = [&](int it) { return (it * tpb + static_cast<int>(threadIdx.x)) * N < p.chunk && col(it) < p.cols; };
  if (threadIdx.x == 0) fz::push_arm(&bar, static_cast<unsigned>(C * (KIND == kLayer ? 8 : 4)));
  Pack<T, N> xv[VPT];
  if constexpr (KIND == kAddRms) {
    Pack<T, N> rv[VPT];
#pragma unroll
    for (int it = 0; it < VPT; ++it)
      if (mine(it)) {
        xv[it] = LoadRowPack<T, N, true>(p.x + base, col(it), p.cols, base, p.rows * p.cols);
        rv[it] = LoadRowPack<T, N, true>(p.res + base, col(it), p.cols, base, p.rows * p.cols);
      }
    cluster.sync();  // every block's mbarrier is armed before any push (the loads are in flight meanwhile)
#pragma unroll
    for (int it = 0; it < VPT; ++it)
      if (mine(it)) {
        float f[N];
#pragma unroll
        for (int j = 0; j < N; ++j) f[j] = xv[it].get(j) + rv[it].get(j);
        xv[it] = MakePack<T, N>(f);
        StoreRowPack<T, N, true>(p.sum + base, col(it), p.cols, xv[it]);
      }
  } else {
#pragma unroll
    for (int it = 0; it < VPT; ++it)
      if (mine(it)) xv[it] = LoadRowPack<T, N, true>(p.x + base, col(it), p.cols, base, p.rows * p.cols);
    cluster.sync();  // every block's mbarrier is armed before any push (the loads are in flight meanwhile)
  }
  // The weight and bias of this thread's columns: in registers (EW), or prefetched into L2 before the
  // exchange, so that the output pass finds them there.
  Pack<T, N> wv[EW ? VPT : 1], bv[EW && KIND == kLayer ? VPT : 1];
  if constexpr (EW) {
#pragma unroll
    for (int it = 0; it < VPT; ++it)
      if (mine(it)) {
        if (p.w) wv[it] = LoadColumnPack<T, N, true>(p.w, col(it), p.cols);
        if constexpr (KIND == kLayer)
          if (p.b) bv[it] = LoadColumnPack<T, N, true>(p.b, col(it), p.cols);
      }
  } else {
#pragma unroll
    for (int it = 0; it < VPT; ++it)
      if (mine(it)) {
        const int c = max(col(it), 0);
        if (p.w) asm volatile("prefetch.global.L2 [%0];" ::"l"(p.w + c));
        if (p.b) asm volatile("prefetch.global.L2 [%0];" ::"l"(p.b + c));
      }
  }
  // One exchange, pushed (device_common.cuh): threads 0 .. C - 1 write this block's partial sums a
  // (and, layer_norm, b) into block k's parts[2 rank ..]; each block waits on its own mbarrier and sums
  // the C partials in rank order, so every block gets the bit-identical totals.
  auto cluster_sum2 = [&](float a, float b) {
    a = BlockRowReduce<SumOp>(a, smem, phase);
    if constexpr (KIND == kLayer) b = BlockRowReduce<SumOp>(b, smem, phase);
    if (static_cast<int>(threadIdx.x) < C) {
      fz::push_send(&parts[2 * rank], &bar, threadIdx.x, a);
      if constexpr (KIND == kLayer) fz::push_send(&parts[2 * rank + 1], &bar, threadIdx.x, b);
    }
    fz::push_wait(&bar);
    float ta = 0.0f, tb = 0.0f;
#pragma unroll
    for (int k = 0; k < C; ++k) {
      ta += parts[2 * k];
      if constexpr (KIND == kLayer) tb += parts[2 * k + 1];
    }
    return make_float2(ta, tb);
  };
  float mean = 0.0f, inv = 0.0f;
  if constexpr (KIND == kLayer) {
    // Mean and variance from one exchange: sums of x - K and (x - K)^2, shifted by the row's first
    // element K (the same in every block) so the variance does not cancel for rows far from zero.
    const float K = ToF(__ldg(p.x + base));
    float a = 0.0f, b = 0.0f;
#pragma unroll
    for (int it = 0; it < VPT; ++it)
      if (mine(it))
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const float d = xv[it].get(j) - K;
          if (col(it) + j >= 0 && col(it) + j < p.cols) {
            a += d;
            b += d * d;
          }
        }
    const float2 t = cluster_sum2(a, b);
    const float dm = t.x * p.inv_cols;
    mean = K + dm;
    inv = rsqrtf(fmaxf(t.y * p.inv_cols - dm * dm, 0.0f) + p.eps);
  } else {
    float acc = 0.0f;
#pragma unroll
    for (int it = 0; it < VPT; ++it)
      if (mine(it))
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const float f = xv[it].get(j);  // outside the row: 0
          acc += f * f;
        }
    inv = rsqrtf(cluster_sum2(acc, 0.0f).x * p.inv_cols + p.eps);
  }
#pragma unroll
  for (int it = 0; it < VPT; ++it) Launder(xv[it]);
#pragma unroll
  for (int it = 0; it < VPT; ++it)
    if (mine(it)) {
      if constexpr (EW) FinishWith<T, N, true>(p, xv[it], wv[it], bv[KIND == kLayer ? it : 0], base, col(it), mean, inv);
      else Finish<T, N, true>(p, xv[it], base, col(it), mean, inv);
    }
  // no closing cluster barrier: nothing reads another block's shared memory
}

template <class T, int N, int VPT, int KIND, bool EW>
__global__ void __launch_bounds__(target::kRowSplitMaxThreads) NormSplitKernel(NormParams<T> p) {
  NormSplitRow<T, N, VPT, KIND, 0, EW>(p);
}
template <class T, int N, int VPT, int KIND, bool EW>
__global__ void __cluster_dims__(target::kRowSplitBlocks, 1, 1) __launch_bounds__(target::kRowSplitMaxThreads)
    NormSplit8Kernel(NormParams<T> p) {
  NormSplitRow<T, N, VPT, KIND, target::kRowSplitBlocks, EW>(p);
}

// Staged path (target::ChooseRowStage; many rows past the register path): persistent blocks
// (fused_common.cuh, StagedRows) stage each row's aligned window of x — and of the residual — in
// shared memory, double-buffered where two fit, then run the passes over shared memory: the sum or
// sum of squares, layer_norm's centred variance, the output. add_rms_norm rounds the sum, keeps it in
// place of x in shared memory and stores it in its first pass (the residual row is wholly staged
// before, so an in-place sum over the residual stays read-before-write). The output pass is compiled
// per row shift (DispatchShift), so the weight and bias come as two aligned 16-byte loads a vector
// (ShiftedColumn). Each thread handles the same vectors in every pass but the output pass's edge
// vectors, which a thread at the block's far end writes: the reductions' barriers (at least 128
// threads a stage block, target::kRowStageMinThreads) order add_rms_norm's in-place sum before them.
// The passes over a staged row (the staged kernel's whole row; the staged split's share [v0, v1) of
// it): xs / rs hold x's / the residual's window vector v at (v - v0) x N; `red` reduces over the
// block or the row's cluster (fused_common.cuh, BlockReducer / ClusterReducer).
template <class T, int KIND, class R>
__device__ __forceinline__ void NormStagedPasses(const NormParams<T>& p, int64_t base, int s, int nv, int v0, int v1, T* xs,
                                                 const T* rs, R& red) {
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  const int tpb = blockDim.x, tid = threadIdx.x;
  xs -= v0 * N;
  rs -= v0 * N;
  // the passes over this thread's window vectors: only the row's two edge vectors check their
  // columns (FullWindowVectors), so a pass costs its arithmetic and not a bounds test per element
  const WindowSpan g = FullWindowVectors<N>(s, p.cols);
  auto vectors = [&](auto&& f) { ForWindowVectorRange(v0, v1, g.full0, g.full1, f); };
  float acc = 0.0f;
  vectors([&](int v, auto full) {
    constexpr bool kFull = decltype(full)::value;
    Pack<T, N> xv = LoadPack<T, N>(xs + v * N);
    if constexpr (KIND == kAddRms) {
      const Pack<T, N> rv = LoadPack<T, N>(rs + v * N);
      float f[N];
#pragma unroll
      for (int j = 0; j < N; ++j) f[j] = xv.get(j) + rv.get(j);
      xv = MakePack<T, N>(f);
      StorePack<T, N>(xs + v * N, xv);
      if constexpr (kFull) StoreGlobalPack<T, N>(p.sum + base + v * N - s, xv);
      else StoreRowPack<T, N, true, true>(p.sum + base, v * N - s, p.cols, xv);
    }
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float f = xv.get(j);
      if (kFull || InRowVector<N>(v, j, s, p.cols)) acc += KIND == kLayer ? f : f * f;
    }
  });
  acc = red.template Reduce<SumOp>(acc);
  float mean = 0.0f, inv;
  if constexpr (KIND == kLayer) {
    mean = acc * p.inv_cols;
    acc = 0.0f;
    vectors([&](int v, auto full) {
      const Pack<T, N> xv = LoadPack<T, N>(xs + v * N);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const float d = xv.get(j) - mean;
        if (decltype(full)::value || InRowVector<N>(v, j, s, p.cols)) acc += d * d;
      }
    });
    inv = rsqrtf(red.template Reduce<SumOp>(acc) * p.inv_cols + p.eps);
  } else {
    inv = rsqrtf(acc * p.inv_cols + p.eps);
  }
  // The output pass. Window vectors [lo, hi) lie inside the row, and the weight and bias columns
  // they need inside the operands (two aligned 16-byte vectors each, ShiftedColumn): those
  // run without a column test, two vectors a step so both vectors' operand loads — from L2, the
  // staged windows leaving little L1 — are in flight before either is used, the weight's and
  // bias's presence hoisted out of the loop (WithOperands). The rest — the first vector of a
  // shifted row and the row's last one or two — are at most three, one thread each, element by
  // element from the far end of the block.
  const T* const w = p.w;
  const T* const bias = KIND == kLayer ? p.b : nullptr;
  const int cols = p.cols;
  const int lo = g.full0, hi = min(g.full1, cols / N);
  const int hi_mine = min(hi, v1);
  // one output element: (x - mean) * inv (* w) (+ b), layer_norm's mean only
  auto value = [&](float x, bool has_w, float wj, bool has_b, float bj) {
    float y = (KIND == kLayer ? x - mean : x) * inv;
    if (has_w) y *= wj;
    if (has_b) y += bj;
    return y;
  };
  DispatchShift<N>(s, [&](auto s_c) {
    constexpr int S = decltype(s_c)::value;
    T* const yw = p.y + base - S;  // the window's first element, 16-byte aligned
    WithOperands(w != nullptr, bias != nullptr, [&](auto has_w, auto has_b) {
      constexpr bool kW = decltype(has_w)::value, kB = KIND == kLayer && decltype(has_b)::value;
      auto load = [&](int v, Pack<T, N>& xv, float (&wv)[N], float (&bv)[N]) {
        xv = LoadPack<T, N>(xs + v * N);
        if constexpr (kW) ShiftedColumn<T, N, S>(w, v, wv);
        if constexpr (kB) ShiftedColumn<T, N, S>(bias, v, bv);
      };
      auto store = [&](int v, const Pack<T, N>& xv, const float (&wv)[N], const float (&bv)[N]) {
        float o[N];
#pragma unroll
        for (int j = 0; j < N; ++j) o[j] = value(xv.get(j), kW, wv[j], kB, bv[j]);
        StoreGlobalPack<T, N>(yw + v * N, MakePack<T, N>(o));
      };
      int v = v0 + tid;
      if (v < lo) v += tpb;  // (vector 0 of a shifted row is an edge vector)
      for (; v + tpb < hi_mine; v += 2 * tpb) {
        Pack<T, N> x0, x1;
        float w0[N], w1[N], b0[N], b1[N];
        load(v, x0, w0, b0);
        load(v + tpb, x1, w1, b1);
        store(v, x0, w0, b0);
        store(v + tpb, x1, w1, b1);
      }
      if (v < hi_mine) {
        Pack<T, N> x0;
        float w0[N], b0[N];
        load(v, x0, w0, b0);
        store(v, x0, w0, b0);
      }
    });
    // the edge vectors of [v0, v1): vector 0 of a shifted row (lo == 1), and [max(hi, lo), nv)
    const int first = v0 == 0 ? lo : 0, tail = max(max(hi, lo), v0), edges = first + max(v1 - tail, 0), k = tpb - 1 - tid;
    if (k < edges) {
      const int ev = k < first ? 0 : tail + k - first;
      const Pack<T, N> xv = LoadPack<T, N>(xs + ev * N);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const int c = ev * N - S + j;
        if (c < 0 || c >= cols) continue;
        yw[ev * N + j] = FromF<T>(value(xv.get(j), w != nullptr, w ? ToF(w[c]) : 0.0f, bias != nullptr, bias ? ToF(bias[c]) : 0.0f));
      }
    }
  });
}

template <class T, int KIND>
__global__ void __launch_bounds__(target::kRowStageMaxThreads) NormStageKernel(NormParams<T> p) {
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  constexpr int IN = KIND == kAddRms ? 2 : 1;
  __shared__ float smem[64];
  BlockReducer red{smem};
  const T* src[IN];
  src[0] = p.x;
  if constexpr (IN == 2) src[1] = p.res;
  StagedRows<T, N, IN>(src, p.rows, p.cols, p.stage_elems, p.twin != 0, [&](int64_t, int64_t base, int s, int nv, int b) {
    NormStagedPasses<T, KIND>(p, base, s, nv, 0, nv, StagedWindow<T>(b * IN, p.stage_elems),
                              StagedWindow<T>(b * IN + IN - 1, p.stage_elems), red);
  });
}

// Staged split (target::ChooseRowStageSplit; many rows whose whole window leaves an SM one block
// and no overlap): a cluster a row, each block staging its share of x's — and the residual's —
// window (fused_common.cuh, ShareOf / StageShare), the passes of the staged kernel over it, the
// sums combined over the cluster (ClusterReducer: layer_norm's mean, then its centred variance — the
// staged kernel's two-pass math). Launched with exactly rows clusters.
template <class T, int KIND>
__global__ void __launch_bounds__(target::kRowStageSplitMaxThreads) NormStageSplitKernel(NormParams<T> p) {
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  constexpr int IN = KIND == kAddRms ? 2 : 1, EX = KIND == kLayer ? 2 : 1;
  __shared__ float smem[64];
  __shared__ float parts[EX][target::kRowSplitBlocks];
  __shared__ unsigned long long bar[EX];
  ClusterReducer<EX> red{smem, parts, bar};
  red.Arm();
  const T* src[IN];
  src[0] = p.x;
  if constexpr (IN == 2) src[1] = p.res;
  const ShareSpan sp = ShareOf<T, N>(p.cols, p.chunk / N);
  StageShare<T, N, IN>(src, sp, p.cols, p.chunk);
  fz::cluster_sync();  // every block's mbarriers are armed before any push (the copies in flight meanwhile)
  fz::cp_async_wait<0>();
  __syncthreads();  // every thread's copies have landed
  NormStagedPasses<T, KIND>(p, sp.base, sp.s, sp.nv, sp.v0, sp.v1, StagedWindow<T>(0, p.chunk), StagedWindow<T>(IN - 1, p.chunk),
                            red);
  // no closing cluster barrier: nothing reads another block's shared memory
}

// The staged kernel of a norm kind (the planner's register query and its launch).
template <class T>
auto NormStageFor(int kind) {
  return kind == kRms ? NormStageKernel<T, kRms> : kind == kAddRms ? NormStageKernel<T, kAddRms> : NormStageKernel<T, kLayer>;
}
template <class T>
auto NormStageSplitFor(int kind) {
  return kind == kRms ? NormStageSplitKernel<T, kRms> : kind == kAddRms ? NormStageSplitKernel<T, kAddRms> : NormStageSplitKernel<T, kLayer>;
}

// Looped path: the row streamed in steps of U vectors per thread.
template <class T, int N, int KIND>
__global__ void __launch_bounds__(1024) NormLoopKernel(NormParams<T> p) {
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  constexpr int U = 4;
  __shared__ float smem[64];
  const int tpr = p.tpr;
  const int g = threadIdx.x / tpr, t = threadIdx.x - g * tpr, rpb = blockDim.x / tpr;
  const int step = U * tpr * N;
  int phase = 0;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * rpb; r0 < p.rows; r0 += static_cast<int64_t>(gridDim.x) * rpb) {
    const int64_t r = r0 + g;
    const int cols = r < p.rows ? p.cols : 0;  // invalid groups skip the column loops
    const int64_t base = r * p.cols;
    // Pass 1: sum (layer_norm) or sum of squares (rms); add_rms_norm writes the rounded sum here.
    float acc = 0.0f;
    for (int c0 = t * N; c0 < cols; c0 += step) {
      Pack<T, N> xv[U], rv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * tpr * N;
        if (c < cols) {
          xv[u] = LoadPack<T, N>(p.x + base + c);
          if constexpr (KIND == kAddRms) rv[u] = LoadPack<T, N>(p.res + base + c);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * tpr * N;
        if (c < cols) {
          if constexpr (KIND == kAddRms) {
            float f[N];
#pragma unroll
            for (int j = 0; j < N; ++j) f[j] = xv[u].get(j) + rv[u].get(j);
            xv[u] = MakePack<T, N>(f);
            StoreGlobalPack<T, N>(p.sum + base + c, xv[u]);
          }
#pragma unroll
          for (int j = 0; j < N; ++j) {
            const float f = xv[u].get(j);
            acc += KIND == kLayer ? f : f * f;
          }
        }
      }
    }
    acc = RowReduce<SumOp>(acc, tpr, smem, phase);
    float mean = 0.0f, inv;
    const T* src = KIND == kAddRms ? p.sum : p.x;
    if constexpr (KIND == kLayer) {
      mean = acc * p.inv_cols;
      acc = 0.0f;
      for (int c0 = t * N; c0 < cols; c0 += step) {
        Pack<T, N> xv[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int c = c0 + u * tpr * N;
          if (c < cols) xv[u] = LoadPack<T, N>(p.x + base + c);
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (c0 + u * tpr * N < cols)
#pragma unroll
            for (int j = 0; j < N; ++j) {
              const float d = xv[u].get(j) - mean;
              acc += d * d;
            }
      }
      inv = rsqrtf(RowReduce<SumOp>(acc, tpr, smem, phase) * p.inv_cols + p.eps);
    } else {
      inv = rsqrtf(acc * p.inv_cols + p.eps);
    }
    // Output pass.
    for (int c0 = t * N; c0 < cols; c0 += step) {
      Pack<T, N> xv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * tpr * N;
        if (c < cols) xv[u] = LoadPack<T, N>(src + base + c);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * tpr * N;
        if (c < cols) Finish<T, N, false, true>(p, xv[u], base, c, mean, inv);
      }
    }
  }
}

}  // namespace

template <class T>
using NormKernelFn = void (*)(NormParams<T>);

// The register-path kernel (NormRegKernel's instance) of row shape `s` (not looped) for `kind`, rows of
// `cols` columns, `shifted` rows in their aligned window.
template <class T>
NormKernelFn<T> NormRegKernelFor(int kind, const RowShape& s, bool shifted, int64_t cols) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  // The exact-cover fast path (fused_common.cuh); not rms_norm at 4 vectors per thread (its prefill
  // shapes): there the runtime row group read slightly faster at 2048-16384 rows (bench ops), every
  // other case slower.
  if (!shifted && ExactCover(s, cols, kVec) && !(kind == kRms && s.vectors_per_thread == 4)) {
    auto r = DispatchExactShape<ExactShapes>(s, [&](auto shape) -> NormKernelFn<T> {
      constexpr int V = decltype(shape)::kVpt, KT = decltype(shape)::kTpr;
      switch (kind) {
        case kRms: return NormRegKernel<T, kVec, V, kRms, KT>;
        case kAddRms: return NormRegKernel<T, kVec, V, kAddRms, KT>;
        default: return NormRegKernel<T, kVec, V, kLayer, KT>;
      }
    });
    if (r) return *r;
  }
  return DispatchVpt(s.vectors_per_thread, [&](auto vpt_c) -> NormKernelFn<T> {
    constexpr int V = decltype(vpt_c)::value;
    auto pick = [&](auto n_c) -> NormKernelFn<T> {
      constexpr int N = decltype(n_c)::value;
      if constexpr (N > 1) {
        if (shifted) {
          switch (kind) {
            case kRms: return NormRegKernel<T, N, V, kRms, 0, true>;
            case kAddRms: return NormRegKernel<T, N, V, kAddRms, 0, true>;
            default: return NormRegKernel<T, N, V, kLayer, 0, true>;
          }
        }
      }
      switch (kind) {
        case kRms:
          if constexpr (V == 4) {  // wide rows: the late weight (NormRegKernel's EARLY_W)
            if (cols > target::kMaxRegisterCols) return NormRegKernel<T, N, 4, kRms, 0, false, 0>;
          }
          return NormRegKernel<T, N, V, kRms>;
        case kAddRms: return NormRegKernel<T, N, V, kAddRms>;
        default: return NormRegKernel<T, N, V, kLayer>;
      }
    };
    return s.vec == 1 ? pick(std::integral_constant<int, 1>{}) : pick(std::integral_constant<int, kVec>{});
  });
}

StatusOr<std::vector<cuda::KernelLaunch>> PlanNormEx(const Node& n, const std::vector<TensorRef>& in,
                                                     const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev,
                                                     const FusedPlanOptions& opt) {
  const char* op = OpName(n.op);
  int kind;
  size_t min_in, max_in, nout;
  switch (n.op) {
    case OpKind::kRmsNorm: kind = kRms; min_in = 1; max_in = 2; nout = 1; break;
    case OpKind::kAddRmsNorm: kind = kAddRms; min_in = 3; max_in = 3; nout = 2; break;
    case OpKind::kLayerNorm: kind = kLayer; min_in = 1; max_in = 3; nout = 1; break;
    default: return InvalidArgument(fmt::format("{}: not a norm op", op));
  }
  if (in.size() < min_in || in.size() > max_in || out.size() != nout)
    return InvalidArgument(fmt::format("{}: {} inputs / {} outputs", op, in.size(), out.size()));
  const TensorRef& x = in[0];
  const DType dt = x.dtype;
  if (!IsFloat(dt)) return Unimplemented(fmt::format("{}: dtype {} (the library kernel takes f32, f16, bf16)", op, DTypeName(dt)));
  if (x.shape.empty()) return InvalidArgument(fmt::format("{}: x is a scalar", op));
  for (const auto* set : {&in, &out})
    for (const TensorRef& t : *set)
      if (t.dtype != dt)
        return Unimplemented(fmt::format("{}: mixed dtypes ({} and {}); the library kernel needs one dtype", op,
                                         DTypeName(dt), DTypeName(t.dtype)));
  const int64_t cols = x.shape.back(), numel = x.numel();
  const int64_t rows = cols > 0 ? numel / cols : 0;
  const size_t nrow_like = kind == kAddRms ? 2 : 1;  // x (and residual) are full tensors
  for (size_t i = 1; i < in.size(); ++i) {
    const bool full = i < nrow_like;
    if (full ? in[i].numel() != numel : (in[i].shape.size() != 1 || in[i].shape[0] != cols))
      return InvalidArgument(fmt::format("{}: input {} has {} elements, expected {}", op, i, in[i].numel(), full ? numel : cols));
  }
  for (const TensorRef& o : out)
    if (o.numel() != numel) return InvalidArgument(fmt::format("{}: output has {} elements, x has {}", op, o.numel(), numel));
  if (cols > (int64_t{1} << 30)) return Unimplemented(fmt::format("{}: row of {} columns", op, cols));
  if (numel == 0) return std::vector<cuda::KernelLaunch>{};

  bool aligned = !opt.force_scalar;
  for (const auto* set : {&in, &out})
    for (const TensorRef& t : *set) aligned = aligned && Aligned(t.data, 16);
  target::RowAccess access = target::ChooseRowAccess(cols, DTypeSize(dt), aligned);
  const RowLimits lim = target::RowFamilyLimits(n.op, false);
  RowShape s;
  if (opt.shape) {
    s = *opt.shape;
    s.vec = access.vec;
    OPFUSE_RETURN_IF_ERROR(CheckRowShape(s, access.window_cols, lim));
  } else {
    // shifted rows past kMaxRegisterCols are staged or split, not held (target::RowFamilyLimits)
    s = ChooseRowShape(rows, access.window_cols, access.vec, dev, target::RowFamilyLimits(n.op, false, access.shifted));
  }
  // Rows past the register path: split over a cluster at every row count (target::ChooseRowSplit;
  // the 16-byte packs of x, and of the residual, held: 4 or 8 registers a vector).
  // With a row per SM or more, staged rows where the window fits shared memory
  // (target::ChooseRowStage: x, and add_rms_norm's residual, staged).
  std::optional<target::RowSplit> split;
  std::optional<target::RowStage> stage;
  if (s.looped && !opt.shape && aligned) {
    split = target::ChooseRowSplit(rows, cols, DTypeSize(dt), dev, kind == kAddRms ? 8 : 4, true);
    // the stage kernel's registers bound its threads (target::RowStageFor)
    const int regs = DispatchFloat(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      return KernelRegisters(NormStageFor<T>(kind));
    });
    stage = target::ChooseRowStage(rows, cols, DTypeSize(dt), kind == kAddRms ? 2 : 1, dev, regs);
  }
  // Where the whole staged row does not fit or gives way (target::StageGivesWayToSplit; the norms
  // also where the stage has no overlap on its SM), the staged split where it is taken
  // (target::ChooseRowStageSplit, every SM busy), else the split; else the split gives way to the stage.
  std::optional<target::RowStageSplit> ssplit;
  if (s.looped && !opt.shape && aligned && (!stage || target::StageGivesWayToSplit(*stage, true))) {
    const int regs = DispatchFloat(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      return KernelRegisters(NormStageSplitFor<T>(kind));
    });
    ssplit = target::ChooseRowStageSplit(rows, cols, DTypeSize(dt), kind == kAddRms ? 2 : 1, dev, regs);
  }
  if (ssplit) {
    stage.reset();
    split.reset();
  }
  if (stage && split && target::StageGivesWayToSplit(*stage, true)) stage.reset();
  if (stage) split.reset();
  if (access.shifted && s.looped && !split && !stage && !ssplit) {  // the looped kernel reads unaligned rows element by element
    access = target::ChooseRowAccess(cols, DTypeSize(dt), false);
    s = ChooseRowShape(rows, cols, 1, dev, lim);
  }
  const int vec = access.vec;
  const double eps = AttrFloat(n.attrs, "eps", kind == kLayer ? 1e-5 : 1e-6);
  const std::string name = ssplit  ? fmt::format("lib:{}_{}_{}", op, DTypeName(dt), ssplit->ToString())
                           : stage ? fmt::format("lib:{}_{}_{}", op, DTypeName(dt), stage->ToString())
                           : split ? fmt::format("lib:{}_{}_{}", op, DTypeName(dt), split->ToString())
                                   : fmt::format("lib:{}_{}_{}{}", op, DTypeName(dt), s.ToString(), access.shifted ? "_sh" : "");
  // the register kernel runs one row group a block (no grid-stride loop): a block for every group
  if (!s.looped && !stage && !split && !ssplit && (rows + s.rows_per_block - 1) / s.rows_per_block > 0x7fffffffLL)
    return Unimplemented(fmt::format("{}: {} rows in groups of {} exceed a grid of 2^31 - 1 blocks", op, rows, s.rows_per_block));
  const dim3 grid(GridFor((rows + s.rows_per_block - 1) / s.rows_per_block)), block(s.block());

  return DispatchFloat(dt, [&](auto tag) -> StatusOr<std::vector<cuda::KernelLaunch>> {
    using T = typename decltype(tag)::type;
    NormParams<T> p{};
    p.x = static_cast<const T*>(x.data);
    p.res = kind == kAddRms ? static_cast<const T*>(in[1].data) : nullptr;
    p.w = kind == kAddRms ? static_cast<const T*>(in[2].data) : in.size() > 1 ? static_cast<const T*>(in[1].data) : nullptr;
    p.b = kind == kLayer && in.size() > 2 ? static_cast<const T*>(in[2].data) : nullptr;
    p.y = static_cast<T*>(out[0].data);
    p.sum = kind == kAddRms ? static_cast<T*>(out[1].data) : nullptr;
    p.rows = rows;
    p.cols = static_cast<int>(cols);
    p.tpr = s.threads_per_row;
    p.eps = static_cast<float>(eps);
    p.inv_cols = static_cast<float>(1.0 / static_cast<double>(cols));
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    if (stage) {
      p.stage_elems = static_cast<int>(target::RowStageWindowBytes(cols, DTypeSize(dt)) / DTypeSize(dt));
      p.twin = stage->twin ? 1 : 0;
      auto make_stage = [&](auto kernel) -> StatusOr<std::vector<cuda::KernelLaunch>> {
        OPFUSE_RETURN_IF_ERROR(AllowSharedBytes(kernel, stage->smem_bytes, op));
        return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(name, kernel, dim3(GridFor(stage->grid)), dim3(stage->threads),
                                                                        static_cast<size_t>(stage->smem_bytes), p).Pdl()};
      };
      return make_stage(NormStageFor<T>(kind));
    }
    if (ssplit) return StageSplitLaunch(name, NormStageSplitFor<T>(kind), *ssplit, rows, p, op);
    if (split) {
      p.chunk = static_cast<int>(split->chunk);
      // 8 blocks per row: the kernel with the cluster compiled in; fewer: the launch attribute
      const bool fixed = split->blocks == target::kRowSplitBlocks;
      auto make_split = [&](auto kernel) {
        return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(name, kernel, dim3(static_cast<unsigned>(rows * split->blocks)),
                                                                        dim3(split->threads), 0, p).Pdl().Cluster(fixed ? 0 : split->blocks)};
      };
      // every block on an SM of its own: the weight and bias held from the start (NormSplitRow's EW)
      const bool early = kind != kAddRms && rows * split->blocks <= dev.sm_count;
      auto by_vpt = [&](auto vpt_c, auto ew_c) -> std::vector<cuda::KernelLaunch> {
        constexpr int V = decltype(vpt_c)::value;
        constexpr bool EW = decltype(ew_c)::value;
        if (fixed) {
          switch (kind) {
            case kRms: return make_split(NormSplit8Kernel<T, kVec, V, kRms, EW>);
            case kAddRms: return make_split(NormSplit8Kernel<T, kVec, V, kAddRms, false>);  // never early
            default: return make_split(NormSplit8Kernel<T, kVec, V, kLayer, EW>);
          }
        }
        switch (kind) {
          case kRms: return make_split(NormSplitKernel<T, kVec, V, kRms, EW>);
          case kAddRms: return make_split(NormSplitKernel<T, kVec, V, kAddRms, false>);  // never early
          default: return make_split(NormSplitKernel<T, kVec, V, kLayer, EW>);
        }
      };
      auto by_ew = [&](auto vpt_c) {
        return early ? by_vpt(vpt_c, std::true_type{}) : by_vpt(vpt_c, std::false_type{});
      };
      switch (split->vpt) {
        case 2: return by_ew(std::integral_constant<int, 2>{});
        case 4: return by_ew(std::integral_constant<int, 4>{});
        default: return by_ew(std::integral_constant<int, 8>{});
      }
    }
    auto make = [&](auto kernel) { return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(name, kernel, grid, block, 0, p).Pdl()}; };
    if (s.looped) {
      auto looped = [&](auto n_c) -> std::vector<cuda::KernelLaunch> {
        constexpr int N = decltype(n_c)::value;
        switch (kind) {
          case kRms: return make(NormLoopKernel<T, N, kRms>);
          case kAddRms: return make(NormLoopKernel<T, N, kAddRms>);
          default: return make(NormLoopKernel<T, N, kLayer>);
        }
      };
      return vec == 1 ? looped(std::integral_constant<int, 1>{}) : looped(std::integral_constant<int, kVec>{});
    }
    return make(NormRegKernelFor<T>(kind, s, access.shifted, cols));
  });
}

StatusOr<std::vector<cuda::KernelLaunch>> PlanNorm(const Node& n, const std::vector<TensorRef>& in,
                                                   const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev) {
  return PlanNormEx(n, in, out, dev, {});
}

}  // namespace opfuse::kernels
