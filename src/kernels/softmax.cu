// Fused softmax library kernel: softmax over the last axis of x (rank >= 1) with attrs scale
// (default 1) and causal (default 0), and an optional additive mask broadcastable to x.
//
// Design (launch shapes in target/launch_shape.h): causal masks key j of query row i (i = row % Tq,
// Tq = x.shape[-2], 1 for rank 1) when j > i + (S - Tq), as the CPU reference
// (src/ops/composite_cpu.cc) does. A row whose every key is masked (max is -inf) is written as
// zeros, like the reference. Softmax is memory-bound only if it stays lean — at 4.3 TB/s a bf16
// row element (2 B in, 2 B out) leaves ~30 thread instructions, so the math runs in the log2
// domain: z = (x * scale + mask) * log2(e) is one FFMA (scale * log2(e) folded on the host),
// each exponential is one MUFU.EX2. Causal is a template flag.
// Without a mask, each pass sorts a row's vectors three ways (RowVectors, and the register path's
// `kind`): those inside the row and at or before the last visible key take no column check, and the
// max pass compares their raw packs (RawMax: max.bf16x2 / max.f16x2 a word, max(x * s) = max(x) * s
// for s > 0); those wholly past the last visible key (causal) are neither read nor reduced — written
// as zeros, and the staged path does not even copy them; only the rest (a shifted row's edges, the
// vector the last visible key falls in) are checked element by element. So causal costs a branch a
// vector, not a compare and a select an element in every pass.
//  * Register path: e = 2^(z - max) is computed once, in the sum's step, and kept as f32; the write
//    is y = e * (1 / sum). The SFU does 16 MUFU ops a clock per SM, so at 512 rows x 2048 the second
//    exponential of the earlier form y = 2^(z - (max + log2(sum))) was on the critical path once the
//    data had arrived: one exponential is faster at 1-2048 rows and the same at 16384 (H200, bench ops,
//    docs/BENCHMARKS.md).
//  * Register path without a mask: the row's raw 16-byte packs stay in registers (laundered
//    after the max so the compiler does not hold f32 copies); z is recomputed for the sum.
//  * Exact-cover fast path (no mask, not causal, cols == threads_per_row x vectors x vec, and the
//    planner's shape one of fused_common.cuh's ExactShapes): the row group is a template constant (KTPR), so no
//    column guard and unrolled reductions; faster at 512-16384 rows x 2048 / 4096 (bench ops). With
//    a runtime row group, t128x2 executed twice the JIT's instructions at the same shape (ncu).
//  * Register path with a mask: z is computed once as f32 (x and mask packs are loaded together,
//    all in flight) and cached, so the kernel is "heavy" (<= 512 threads, <= 4 vectors/thread).
//  * Looped path (rows wider than the register path): one online pass keeps a running (max, sum)
//    per thread — rescaled by 2^(old_max - new_max) once per 4-vector step — merged across the
//    group, then a second pass re-reads the row (L2), recomputes the exponential and writes.
// The mask is read through a broadcast row map (fused_common.cuh): same shape as x, [T, S] under
// any leading dims, or any numpy-broadcastable shape; its last dim may be S or 1. Mask dtype: x's
// or f32. ex2.approx is ~2 ulp, well inside the f32 test bound.
#include <cooperative_groups.h>

#include "kernels/fused_common.cuh"
#include "kernels/staged_row.cuh"
#include "kernels/pdl.cuh"

namespace opfuse::kernels {
namespace {

using namespace fused;  // NOLINT

template <class T, class M>
struct SoftmaxParams {
  const T* x;
  const M* mask;  // null without a mask
  T* y;
  int64_t rows;
  int cols;
  int tpr;
  float s2;         // scale * log2(e)
  int causal;
  int64_t tq;       // x.shape[-2] (1 for rank 1)
  int mask_cols;    // mask column stride: 1 (mask last dim S) or 0 (last dim 1)
  RowMap mmap;      // row of x -> element offset of the mask row
  int chunk;        // split rows, staged split: window elements per block of the cluster (the staged split: its buffer)
  int stage_elems;  // staged rows: elements of the window buffer
  int twin;         // staged rows: double-buffered
};

// Loads N mask values for columns [c, c + N) of the row at `moff` (broadcast when mask_cols == 0).
template <class T, class M, int N>
__device__ __forceinline__ void LoadMask(const SoftmaxParams<T, M>& p, int64_t moff, int c, float* out) {
  if (p.mask_cols) {
    const Pack<M, N> m = LoadPack<M, N>(p.mask + moff + c);
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = m.get(j);
  } else {
    const float m = ToF(p.mask[moff]);
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = m;
  }
}

// Last visible column of row r (causal: i + (S - Tq) with i = r % Tq), clamped to [-1, cols - 1].
template <bool CAUSAL, class P>
__device__ __forceinline__ int LastVisible(const P& p, int64_t r) {
  if constexpr (CAUSAL) {
    const int64_t lv = (r % p.tq) + (p.cols - p.tq);
    return static_cast<int>(lv < -1 ? -1 : lv > p.cols - 1 ? p.cols - 1 : lv);
  } else {
    return p.cols - 1;
  }
}

// The running maximum of raw packs, compared in the elements' own type: 16-bit pairs by one max.bf16x2
// / max.f16x2 a word (half an instruction an element, no conversion), f32 and 1-element packs
// element by element. With scale > 0, max(x * scale) == max(x) * scale exactly (rounding is
// monotone), so a softmax's max pass over the vectors no column check touches reads raw packs;
// NaN is skipped as fmaxf does.
template <class T, int N>
struct RawMax {
  static constexpr bool kPaired = sizeof(T) == 2 && N >= 2;
  static constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  uint32_t w = fz::kNegInfPair<kBf16>;  // paired
  float f = NegInf();
  __device__ __forceinline__ void Add(const Pack<T, N>& p) {
    if constexpr (kPaired) {
#pragma unroll
      for (int k = 0; k < Pack<T, N>::kWords; ++k) w = fz::max_pair<kBf16>(w, p.w[k]);
    } else {
#pragma unroll
      for (int j = 0; j < N; ++j) f = fmaxf(f, p.get(j));
    }
  }
  __device__ __forceinline__ float Value() const {
    if constexpr (kPaired) return fz::pair_max_f32<kBf16>(w);
    else return f;
  }
};

// The vectors of a row a softmax pass treats alike, by window vector index v (columns v * N - s ..
// v * N - s + N - 1; s = 0 for rows on the 16-byte grid): `full` = [full0, full1) lie inside the row
// and (causal) at or before its last visible column lv — raw packs, no column check —; `live` = [0,
// live1) hold a visible column; the rest are masked to zeros, neither read nor reduced. Vectors in
// [0, live1) outside `full` take the element-checked path (at most the row's two edges and the one
// vector lv falls in).
struct VectorRanges {
  int full0, full1, live1;
};
template <bool CAUSAL, int N>
__device__ __forceinline__ VectorRanges RowVectors(int s, int cols, int nv, int lv) {
  VectorRanges g;
  const WindowSpan w = FullWindowVectors<N>(s, cols);  // vectors inside the row
  g.full0 = w.full0;
  int f1 = w.full1;
  int l1 = nv;
  if constexpr (CAUSAL) {
    f1 = min(f1, (lv + 1 + s) / N);  // ... and at or before lv (lv >= -1)
    l1 = min(nv, (lv + s + N) / N);  // first vector past lv
  }
  g.full1 = max(g.full0, f1);
  g.live1 = l1;
  return g;
}

// One vector's step of the max pass by its kind (the register and split paths' `kind`): 0 its raw
// pack into `rm` (raw_max: scale > 0) or x * s2 into `mx`; 1 element by element, z(j) into `mx`
// (-inf outside the row or past the last visible key); 2 nothing.
template <class T, int N, class ZF>
__device__ __forceinline__ void MaxStep(int kind, bool raw_max, const Pack<T, N>& xv, float s2, RawMax<T, N>& rm, float& mx,
                                        ZF&& z) {
  if (kind == 0 && raw_max) {
    rm.Add(xv);
  } else if (kind == 0) {
#pragma unroll
    for (int j = 0; j < N; ++j) mx = fmaxf(mx, xv.get(j) * s2);
  } else if (kind == 1) {
#pragma unroll
    for (int j = 0; j < N; ++j) mx = fmaxf(mx, z(j));
  }
}

// z = (x * scale + mask) * log2(e), or -inf where causally masked: softmax = 2^(z - max) / sum.
template <bool CAUSAL, class P>
__device__ __forceinline__ float Z(const P& p, float x, float m, int c, int lv) {
  const float v = x * p.s2 + m;
  return CAUSAL && c > lv ? NegInf() : v;
}

// Register path. HAS_MASK caches z as f32 (x and mask packs all in flight first); otherwise the
// raw packs are kept (laundered after the max) and z recomputed for the sum: one FMUL per element.
// e = 2^(z - max) is kept as f32 from the sum to the write (one exponential per element).
// KTPR > 0: the exact-cover fast path (no mask, not causal, cols == KTPR * VPT * N): the row group
// is a compile-time constant, so the group / lane split is shifts, the reductions unroll, and no
// column is out of the row (no per-vector guard). Without it the kernel read clearly slower than the
// JIT's (compile-time shaped) softmax at 512-2048 rows (bench ops).
// SH: shifted rows (fused_common.cuh; no mask): the row read in the aligned window around it, the
// elements outside the row at -inf.
template <class T, class M, bool HAS_MASK, bool CAUSAL, int N, int VPT, int KTPR = 0, bool SH = false>
__global__ void __launch_bounds__(RowBlockLimit(VPT, HAS_MASK)) SoftmaxRegKernel(SoftmaxParams<T, M> p) {
  static_assert(KTPR == 0 || (!HAS_MASK && !CAUSAL), "the exact-cover path has no mask and no causal mask");
  static_assert(!SH || (!HAS_MASK && KTPR == 0), "shifted rows: no mask, runtime row group");
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
    const int lv = LastVisible<CAUSAL>(p, r);
    // the first column of vector `it` of this thread (negative for the head of a shifted row)
    const int s = SH ? static_cast<int>(base % N) : 0;
    auto col = [&](int it) { return (it * tpr + t) * N - s; };
    Pack<T, N> xv[VPT];
    float z[HAS_MASK ? VPT : 1][N];
    if constexpr (HAS_MASK) {
      float mv[VPT][N];
      const int64_t moff = valid ? MapRow(p.mmap, static_cast<uint32_t>(r)) : 0;
#pragma unroll
      for (int it = 0; it < VPT; ++it) {
        const int c = (it * tpr + t) * N;
        if (valid && in_row(c)) {
          xv[it] = LoadPack<T, N>(p.x + base + c);
          LoadMask<T, M, N>(p, moff, c, mv[it]);
        }
      }
#pragma unroll
      for (int it = 0; it < VPT; ++it) {
        const int c = (it * tpr + t) * N;
#pragma unroll
        for (int j = 0; j < N; ++j)
          z[it][j] = valid && in_row(c) ? Z<CAUSAL>(p, xv[it].get(j), mv[it][j] * kLog2e, c + j, lv) : NegInf();
      }
    } else {
#pragma unroll
      for (int it = 0; it < VPT; ++it) {
        const int c = col(it);
        // (causal: a vector wholly past lv is never read)
        if (valid && in_row(c) && (!CAUSAL || c <= lv)) xv[it] = LoadRowPack<T, N, SH>(p.x + base, c, p.cols, base, p.rows * p.cols);
      }
    }
    // z of element j of vector `it`, -inf outside the row or past lv (the element-checked path)
    auto zval = [&](int it, int j) -> float {
      if constexpr (HAS_MASK) {
        return z[it][j];
      } else {
        const int c = col(it) + j;
        if (c < 0 || c >= p.cols) return NegInf();  // outside a shifted row
        return Z<CAUSAL>(p, xv[it].get(j), 0.0f, c, lv);
      }
    };
    // Each vector's kind (no mask): 0 full — inside the row and, causal, at or before lv: raw packs, no
    // column check —; 1 checked per element (a shifted row's edges, the vector lv falls in); 2 wholly
    // past lv: zeros, not reduced. With a mask every vector takes the cached z (kind 1).
    auto kind = [&](int it) -> int {
      if constexpr (HAS_MASK) {
        return 1;
      } else {
        const int c = col(it);
        if (CAUSAL && c > lv) return 2;
        if ((SH && !FullVector<T, N, SH>(c, p.cols)) || (CAUSAL && c + N - 1 > lv)) return 1;
        return 0;
      }
    };
    const bool raw_max = !HAS_MASK && p.s2 > 0.0f;  // max(z) of the full vectors from raw packs (RawMax)
    float mx = NegInf();
    RawMax<T, N> rm;
#pragma unroll
    for (int it = 0; it < VPT; ++it)
      if (valid && in_row(col(it))) MaxStep<T, N>(kind(it), raw_max, xv[it], p.s2, rm, mx, [&](int j) { return zval(it, j); });
    if (raw_max) mx = fmaxf(mx, rm.Value() * p.s2);
    mx = RowReduce<MaxOp>(mx, tpr, smem, phase);
    const bool dead = mx == NegInf();  // every key masked: zeros
#pragma unroll
    for (int it = 0; it < VPT; ++it) Launder(xv[it]);
    float sum = 0.0f;
    float e[VPT][N];
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const bool live = valid && !dead && in_row(col(it));
      const int k = live ? kind(it) : 2;
      if (k == 0) {
#pragma unroll
        for (int j = 0; j < N; ++j) e[it][j] = Exp2(xv[it].get(j) * p.s2 - mx);
      } else if (k == 1) {
#pragma unroll
        for (int j = 0; j < N; ++j) e[it][j] = Exp2(zval(it, j) - mx);
      } else {
#pragma unroll
        for (int j = 0; j < N; ++j) e[it][j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < N; ++j) sum += e[it][j];
    }
    sum = RowReduce<SumOp>(sum, tpr, smem, phase);
    const float inv = dead ? 0.0f : __frcp_rn(sum);  // dead: every e is 0 and so is y
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const int c = col(it);
      if (valid && in_row(c)) {
        float o[N];
#pragma unroll
        for (int j = 0; j < N; ++j) o[j] = e[it][j] * inv;
        StoreRowPack<T, N, SH>(p.y + base, c, p.cols, MakePack<T, N>(o));
      }
    }
  }
}

// Split row (rows past the register path, sm_90; target::ChooseRowSplit): a cluster of blocks per
// row (1 to kRowSplitBlocks, the launch's cluster attribute), block k holding window elements
// [k * chunk, (k + 1) * chunk) of the row in registers (the aligned window of shifted rows: column =
// window element - s, s = base % N).
// Each block reduces its max and then its sum, the cluster combines them by pushing each partial into
// every block's shared memory (device_common.cuh's push_send; no closing cluster barrier), so the row
// is read once and written once. No mask.
// CL: the cluster size compiled in (__cluster_dims__, SoftmaxSplit8Kernel), or 0 for the launch's
// (a launch attribute, SoftmaxSplitKernel): the compiled form is taken for 8 blocks per row, the
// common few-row case, where it measured faster.
template <class T, bool CAUSAL, int N, int VPT, int CL>
__device__ __forceinline__ void SoftmaxSplitRow(const SoftmaxParams<T, T>& p) {
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  namespace cg = cooperative_groups;
  __shared__ float smem[64];
  __shared__ float pmax[target::kRowSplitBlocks], psum[target::kRowSplitBlocks];  // the cluster's partials, pushed here
  __shared__ unsigned long long bars[2];  // complete when every block's max / sum landed
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int C = CL > 0 ? CL : static_cast<int>(cluster.num_blocks());  // blocks per row
  const int64_t r = blockIdx.x / C;  // the planner launches exactly rows clusters
  const int64_t base = r * p.cols;
  const int s = static_cast<int>(base % N);
  const int tpb = blockDim.x;
  const int w0 = rank * p.chunk;
  const int lv = LastVisible<CAUSAL>(p, r);
  int phase = 0;
  auto col = [&](int it) { return w0 + (it * tpb + static_cast<int>(threadIdx.x)) * N - s; };
  auto mine = [&](int it) { return (it * tpb + static_cast<int>(threadIdx.x)) * N < p.chunk && col(it) < p.cols; };
  if (threadIdx.x == 0) {
    fz::push_arm(&bars[0], static_cast<unsigned>(4 * C));
    fz::push_arm(&bars[1], static_cast<unsigned>(4 * C));
  }
  // each vector's kind: 0 inside the row and (causal) at or before lv — raw packs, no column check —;
  // 1 checked per element; 2 not this block's, or wholly past lv (never read; zeros)
  auto kind = [&](int it) -> int {
    const int c = col(it);
    if (!mine(it) || (CAUSAL && c > lv)) return 2;
    if (c < 0 || c + N > p.cols || (CAUSAL && c + N - 1 > lv)) return 1;
    return 0;
  };
  Pack<T, N> xv[VPT];
#pragma unroll
  for (int it = 0; it < VPT; ++it)
    if (kind(it) != 2) xv[it] = LoadRowPack<T, N, true>(p.x + base, col(it), p.cols, base, p.rows * p.cols);
  cluster.sync();  // every block's mbarriers are armed before any push (the loads are in flight meanwhile)
  auto zval = [&](int it, int j) -> float {
    const int c = col(it) + j;
    if (c < 0 || c >= p.cols) return NegInf();  // outside the row
    return Z<CAUSAL>(p, xv[it].get(j), 0.0f, c, lv);
  };
  const bool raw_max = p.s2 > 0.0f;  // max(z) of the kind-0 vectors from raw packs (RawMax)
  float mx = NegInf();
  RawMax<T, N> rm;
#pragma unroll
  for (int it = 0; it < VPT; ++it) MaxStep<T, N>(kind(it), raw_max, xv[it], p.s2, rm, mx, [&](int j) { return zval(it, j); });
  if (raw_max) mx = fmaxf(mx, rm.Value() * p.s2);
  // the exchanges are pushed (device_common.cuh): threads 0 .. C - 1 write this block's partial into
  // block k's slot [rank]; each block waits on its own mbarrier and combines in rank order
  mx = BlockRowReduce<MaxOp>(mx, smem, phase);
  if (static_cast<int>(threadIdx.x) < C) fz::push_send(&pmax[rank], &bars[0], threadIdx.x, mx);
  fz::push_wait(&bars[0]);
  float gmx = NegInf();
#pragma unroll
  for (int k = 0; k < C; ++k) gmx = fmaxf(gmx, pmax[k]);
  const bool dead = gmx == NegInf();  // every key masked: zeros
#pragma unroll
  for (int it = 0; it < VPT; ++it) Launder(xv[it]);
  float e[VPT][N];
  float sum = 0.0f;
#pragma unroll
  for (int it = 0; it < VPT; ++it) {
    const int k = dead ? 2 : kind(it);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      e[it][j] = k == 0 ? Exp2(xv[it].get(j) * p.s2 - gmx) : k == 1 ? Exp2(zval(it, j) - gmx) : 0.0f;
      sum += e[it][j];
    }
  }
  sum = BlockRowReduce<SumOp>(sum, smem, phase);
  if (static_cast<int>(threadIdx.x) < C) fz::push_send(&psum[rank], &bars[1], threadIdx.x, sum);
  fz::push_wait(&bars[1]);
  float gsum = 0.0f;
#pragma unroll
  for (int k = 0; k < C; ++k) gsum += psum[k];
  const float inv = dead ? 0.0f : __frcp_rn(gsum);
#pragma unroll
  for (int it = 0; it < VPT; ++it) {
    if (mine(it)) {
      float o[N];
#pragma unroll
      for (int j = 0; j < N; ++j) o[j] = e[it][j] * inv;
      StoreRowPack<T, N, true>(p.y + base, col(it), p.cols, MakePack<T, N>(o));
    }
  }
  // no closing cluster barrier: nothing reads another block's shared memory
}

template <class T, bool CAUSAL, int N, int VPT>
__global__ void __launch_bounds__(target::kRowSplitMaxThreads) SoftmaxSplitKernel(SoftmaxParams<T, T> p) {
  SoftmaxSplitRow<T, CAUSAL, N, VPT, 0>(p);
}
template <class T, bool CAUSAL, int N, int VPT>
__global__ void __cluster_dims__(target::kRowSplitBlocks, 1, 1) __launch_bounds__(target::kRowSplitMaxThreads)
    SoftmaxSplit8Kernel(SoftmaxParams<T, T> p) {
  SoftmaxSplitRow<T, CAUSAL, N, VPT, target::kRowSplitBlocks>(p);
}

// Staged path (target::ChooseRowStage; many rows past the register path, no mask): persistent blocks
// (fused_common.cuh, StagedRows) stage each row's aligned window in shared memory — causal: only up
// to the row's last visible key —, double-buffered where two fit, then run three passes over shared
// memory — the max, the sum of e = 2^(z - max), the write of e * (1 / sum) (e recomputed:
// bit-identical to the sum's) — the split's math, the row read from DRAM once. Each thread handles
// the same vectors in every pass.
// The passes over a staged row r (the staged kernel's whole row; the staged split's share [v0, v1)
// of it): xs holds window vector v at (v - v0) x N; `red` reduces over the block or the row's
// cluster (fused_common.cuh, BlockReducer / ClusterReducer).
template <class T, bool CAUSAL, class R>
__device__ __forceinline__ void SoftmaxStagedPasses(const SoftmaxParams<T, T>& p, int64_t r, int64_t base, int s, int nv, int v0,
                                                    int v1, const T* xs, R& red) {
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  const int tpb = blockDim.x, tid = threadIdx.x;
  const bool raw_max = p.s2 > 0.0f;  // max(z) from raw packs (RawMax)
  xs -= v0 * N;
  const int lv = LastVisible<CAUSAL>(p, r);
  const VectorRanges g = RowVectors<CAUSAL, N>(s, p.cols, nv, lv);
  // f(v, full) for this thread's vectors of [v0, min(end, v1)) (ForWindowVectorRange over g's full
  // range); the vectors outside it read columns outside the row or past lv as -inf
  auto vectors = [&](int end, auto&& f) { ForWindowVectorRange(v0, min(end, v1), g.full0, g.full1, f); };
  auto zval = [&](const Pack<T, N>& xv, int v, int j) -> float {
    const int c = v * N - s + j;
    if (c < 0 || c >= p.cols) return NegInf();  // outside the row
    return Z<CAUSAL>(p, xv.get(j), 0.0f, c, lv);
  };
  float mx = NegInf();
  RawMax<T, N> rm;
  vectors(g.live1, [&](int v, auto full) {
    const Pack<T, N> xv = LoadPack<T, N>(xs + v * N);
    if constexpr (decltype(full)::value) {
      if (raw_max) {
        rm.Add(xv);
      } else {
#pragma unroll
        for (int j = 0; j < N; ++j) mx = fmaxf(mx, xv.get(j) * p.s2);
      }
    } else {
#pragma unroll
      for (int j = 0; j < N; ++j) mx = fmaxf(mx, zval(xv, v, j));
    }
  });
  if (raw_max) mx = fmaxf(mx, rm.Value() * p.s2);
  mx = red.template Reduce<MaxOp>(mx);
  const bool dead = mx == NegInf();  // every key masked: zeros
  float sum = 0.0f;
  if (!dead)
    vectors(g.live1, [&](int v, auto full) {
      const Pack<T, N> xv = LoadPack<T, N>(xs + v * N);
#pragma unroll
      for (int j = 0; j < N; ++j) sum += Exp2((decltype(full)::value ? xv.get(j) * p.s2 : zval(xv, v, j)) - mx);
    });
  sum = red.template Reduce<SumOp>(sum);
  const float inv = dead ? 0.0f : __frcp_rn(sum);
  const int live1 = dead ? 0 : g.live1;
  for (int v = v0 + tid; v < v1; v += tpb) {
    float o[N];
    const bool full = v >= g.full0 && v < g.full1 && v < live1;
    if (full) {
      const Pack<T, N> xv = LoadPack<T, N>(xs + v * N);
#pragma unroll
      for (int j = 0; j < N; ++j) o[j] = Exp2(xv.get(j) * p.s2 - mx) * inv;
      StoreGlobalPack<T, N>(p.y + base + v * N - s, MakePack<T, N>(o));
    } else {
      if (v < live1) {
        const Pack<T, N> xv = LoadPack<T, N>(xs + v * N);
#pragma unroll
        for (int j = 0; j < N; ++j) o[j] = Exp2(zval(xv, v, j) - mx) * inv;
      } else {
#pragma unroll
        for (int j = 0; j < N; ++j) o[j] = 0.0f;  // past lv (or a dead row)
      }
      StoreRowPack<T, N, true, true>(p.y + base, v * N - s, p.cols, MakePack<T, N>(o));
    }
  }
}

template <class T, bool CAUSAL>
__global__ void __launch_bounds__(target::kRowStageMaxThreads) SoftmaxStageKernel(SoftmaxParams<T, T> p) {
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  __shared__ float smem[64];
  BlockReducer red{smem};
  const T* src[1] = {p.x};
  StagedRows<T, N, 1>(src, p.rows, p.cols, p.stage_elems, p.twin != 0, [&](int64_t r, int64_t base, int s, int nv, int b) {
    SoftmaxStagedPasses<T, CAUSAL>(p, r, base, s, nv, 0, nv, StagedWindow<T>(b, p.stage_elems), red);
  }, [&](int64_t r) { return CAUSAL ? LastVisible<CAUSAL>(p, r) + 1 : p.cols; });  // keys past lv are not copied
}

// Staged split (target::ChooseRowStageSplit; many rows whose whole window leaves an SM one block and
// no overlap): a cluster a row, each block staging its share of the row's window — causal: of the
// visible keys — (fused_common.cuh, ShareOf / StageShare), the staged kernel's passes over it, the
// max and the sum combined over the cluster (ClusterReducer). Launched with exactly rows clusters.
template <class T, bool CAUSAL>
__global__ void __launch_bounds__(target::kRowStageSplitMaxThreads) SoftmaxStageSplitKernel(SoftmaxParams<T, T> p) {
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  __shared__ float smem[64];
  __shared__ float parts[2][target::kRowSplitBlocks];
  __shared__ unsigned long long bar[2];
  ClusterReducer<2> red{smem, parts, bar};
  red.Arm();
  const T* src[1] = {p.x};
  const ShareSpan sp = ShareOf<T, N>(p.cols, p.chunk / N);
  StageShare<T, N, 1>(src, sp, CAUSAL ? LastVisible<CAUSAL>(p, sp.r) + 1 : p.cols, p.chunk);
  fz::cluster_sync();  // every block's mbarriers are armed before any push (the copies in flight meanwhile)
  fz::cp_async_wait<0>();
  __syncthreads();  // every thread's copies have landed
  SoftmaxStagedPasses<T, CAUSAL>(p, sp.r, sp.base, sp.s, sp.nv, sp.v0, sp.v1, StagedWindow<T>(0, p.chunk), red);
  // no closing cluster barrier: nothing reads another block's shared memory
}

// Looped path: online (max, sum) in one read of the row, then a write pass.
template <class T, class M, bool HAS_MASK, bool CAUSAL, int N>
__global__ void __launch_bounds__(1024) SoftmaxLoopKernel(SoftmaxParams<T, M> p) {
  PdlEnter();  // pdl.cuh: wait for the earlier kernels before any memory access
  constexpr int U = 4;
  __shared__ float smem[64];
  const int tpr = p.tpr;
  const int g = threadIdx.x / tpr, t = threadIdx.x - g * tpr, rpb = blockDim.x / tpr;
  const int step = U * tpr * N;
  int phase = 0;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * rpb; r0 < p.rows; r0 += static_cast<int64_t>(gridDim.x) * rpb) {
    const int64_t r = r0 + g;
    const bool valid = r < p.rows;
    const int cols = valid ? p.cols : 0;
    const int64_t base = r * p.cols;
    const int lv = LastVisible<CAUSAL>(p, r);
    const int64_t moff = HAS_MASK && valid ? MapRow(p.mmap, static_cast<uint32_t>(r)) : 0;
    // z of U vectors starting at c0 (masked-off / out-of-row slots are -inf).
    auto load_z = [&](int c0, float (&z)[U][N]) {
      Pack<T, N> xv[U];
      float mv[U][N];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * tpr * N;
        if (c < cols) {
          xv[u] = LoadPack<T, N>(p.x + base + c);
          if constexpr (HAS_MASK) LoadMask<T, M, N>(p, moff, c, mv[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * tpr * N;
#pragma unroll
        for (int j = 0; j < N; ++j)
          z[u][j] = c < cols ? Z<CAUSAL>(p, xv[u].get(j), HAS_MASK ? mv[u][j] * kLog2e : 0.0f, c + j, lv) : NegInf();
      }
    };
    float m = NegInf(), s = 0.0f;
    for (int c0 = t * N; c0 < cols; c0 += step) {
      float z[U][N];
      load_z(c0, z);
      float lm = NegInf();
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int j = 0; j < N; ++j) lm = fmaxf(lm, z[u][j]);
      const float nm = fmaxf(m, lm);
      if (nm != NegInf()) {
        s *= Exp2(m - nm);  // m = -inf: 2^-inf = 0 and s was 0
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int j = 0; j < N; ++j) s += Exp2(z[u][j] - nm);
        m = nm;
      }
    }
    const float mx = RowReduce<MaxOp>(m, tpr, smem, phase);
    const bool dead = mx == NegInf();
    const float sum = RowReduce<SumOp>(m == NegInf() ? 0.0f : s * Exp2(m - mx), tpr, smem, phase);
    const float off = dead ? 0.0f : mx + log2f(sum);
    for (int c0 = t * N; c0 < cols; c0 += step) {
      float z[U][N];
      load_z(c0, z);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * tpr * N;
        if (c < cols) {
          float o[N];
#pragma unroll
          for (int j = 0; j < N; ++j) o[j] = dead ? 0.0f : Exp2(z[u][j] - off);
          StoreGlobalPack<T, N>(p.y + base + c, MakePack<T, N>(o));
        }
      }
    }
  }
}

template <class T, class M, bool HAS_MASK, bool CAUSAL>
std::vector<cuda::KernelLaunch> MakeSoftmax(const std::string& name, const RowShape& s, bool shifted, dim3 grid,
                                            const SoftmaxParams<T, M>& p) {
  auto make = [&](auto kernel) {
    return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(name, kernel, grid, dim3(s.block()), 0, p).Pdl()};
  };
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  if constexpr (!HAS_MASK && !CAUSAL) {
    // The exact-cover fast path (fused_common.cuh): the common shapes, and three of 8 vectors a
    // thread (t32x8, t64x8, t128x8).
    using Shapes = decltype(std::tuple_cat(ExactShapes{}, std::tuple<ExactShape<8, 32>, ExactShape<8, 64>, ExactShape<8, 128>>{}));
    if (ExactCover(s, p.cols, kVec)) {
      auto r = DispatchExactShape<Shapes>(s, [&](auto shape) {
        return make(SoftmaxRegKernel<T, M, false, false, kVec, decltype(shape)::kVpt, decltype(shape)::kTpr>);
      });
      if (r) return *std::move(r);
    }
  }
  if (s.looped)
    return s.vec == 1 ? make(SoftmaxLoopKernel<T, M, HAS_MASK, CAUSAL, 1>) : make(SoftmaxLoopKernel<T, M, HAS_MASK, CAUSAL, kVec>);
  return DispatchVpt(s.vectors_per_thread, [&](auto vpt_c) {
    constexpr int V = decltype(vpt_c)::value;
    if constexpr (HAS_MASK && V > 4) {
      return make(SoftmaxRegKernel<T, M, HAS_MASK, CAUSAL, 1, 1>);  // unreachable: CheckRowShape caps vpt at 4
    } else {
      if constexpr (!HAS_MASK) {
        if (shifted && s.vec == kVec) return make(SoftmaxRegKernel<T, M, false, CAUSAL, kVec, V, 0, true>);
      }
      return s.vec == 1 ? make(SoftmaxRegKernel<T, M, HAS_MASK, CAUSAL, 1, V>)
                        : make(SoftmaxRegKernel<T, M, HAS_MASK, CAUSAL, kVec, V>);
    }
  });
}

template <class T, bool CAUSAL>
std::vector<cuda::KernelLaunch> MakeSoftmaxSplit(const std::string& name, const target::RowSplit& sp, int64_t rows,
                                                 const SoftmaxParams<T, T>& p) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  // 8 blocks per row: the kernel with the cluster compiled in; fewer: the launch attribute
  const bool fixed = sp.blocks == target::kRowSplitBlocks;
  auto make = [&](auto kernel) {
    return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(name, kernel, dim3(static_cast<unsigned>(rows * sp.blocks)),
                                                                    dim3(sp.threads), 0, p).Pdl().Cluster(fixed ? 0 : sp.blocks)};
  };
  switch (sp.vpt) {
    case 2: return fixed ? make(SoftmaxSplit8Kernel<T, CAUSAL, kVec, 2>) : make(SoftmaxSplitKernel<T, CAUSAL, kVec, 2>);
    case 4: return fixed ? make(SoftmaxSplit8Kernel<T, CAUSAL, kVec, 4>) : make(SoftmaxSplitKernel<T, CAUSAL, kVec, 4>);
    default: return fixed ? make(SoftmaxSplit8Kernel<T, CAUSAL, kVec, 8>) : make(SoftmaxSplitKernel<T, CAUSAL, kVec, 8>);
  }
}

template <class T, class M, bool HAS_MASK>
std::vector<cuda::KernelLaunch> MakeSoftmax(const std::string& name, const RowShape& s, bool shifted, dim3 grid,
                                            const SoftmaxParams<T, M>& p) {
  return p.causal ? MakeSoftmax<T, M, HAS_MASK, true>(name, s, shifted, grid, p)
                  : MakeSoftmax<T, M, HAS_MASK, false>(name, s, shifted, grid, p);
}

}  // namespace

StatusOr<std::vector<cuda::KernelLaunch>> PlanSoftmaxEx(const Node& n, const std::vector<TensorRef>& in,
                                                        const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev,
                                                        const FusedPlanOptions& opt) {
  const char* op = OpName(n.op);
  if (n.op != OpKind::kSoftmax) return InvalidArgument(fmt::format("{}: not softmax", op));
  if (in.empty() || in.size() > 2 || out.size() != 1)
    return InvalidArgument(fmt::format("{}: {} inputs / {} outputs", op, in.size(), out.size()));
  const TensorRef& x = in[0];
  const DType dt = x.dtype;
  if (!IsFloat(dt)) return Unimplemented(fmt::format("{}: dtype {} (the library kernel takes f32, f16, bf16)", op, DTypeName(dt)));
  if (out[0].dtype != dt) return Unimplemented(fmt::format("{}: output dtype {} differs from x's {}", op, DTypeName(out[0].dtype), DTypeName(dt)));
  if (x.shape.empty()) return InvalidArgument(fmt::format("{}: x is a scalar", op));
  const bool has_mask = in.size() == 2;
  const TensorRef* mask = has_mask ? &in[1] : nullptr;
  if (mask && mask->dtype != dt && mask->dtype != DType::kF32)
    return Unimplemented(fmt::format("{}: mask dtype {} with x {} (the library kernel takes x's dtype or f32)", op,
                                     DTypeName(mask->dtype), DTypeName(dt)));
  const int64_t cols = x.shape.back(), numel = x.numel();
  const int64_t rows = cols > 0 ? numel / cols : 0;
  if (out[0].numel() != numel) return InvalidArgument(fmt::format("{}: output has {} elements, x has {}", op, out[0].numel(), numel));
  if (cols > (int64_t{1} << 30)) return Unimplemented(fmt::format("{}: row of {} columns", op, cols));
  RowMap mmap;
  int mask_cols = 1;
  if (mask) {
    if (mask->shape.empty()) return Unimplemented(fmt::format("{}: scalar mask", op));
    const int64_t mc = mask->shape.back();
    if (mc != cols && mc != 1) return InvalidArgument(fmt::format("{}: mask last dim {} does not broadcast to {}", op, mc, cols));
    mask_cols = mc == cols ? 1 : 0;
    auto m = BuildRowMap(x.shape, mask->shape);
    if (!m.ok()) return Status(m.status().code(), fmt::format("{}: mask: {}", op, m.status().message()));
    mmap = *m;
  }
  if (numel == 0) return std::vector<cuda::KernelLaunch>{};

  bool aligned = !opt.force_scalar && Aligned(x.data, 16) && Aligned(out[0].data, 16);
  if (mask && mask_cols) aligned = aligned && Aligned(mask->data, int64_t{16} / DTypeSize(dt) * DTypeSize(mask->dtype));
  // Shifted rows (row starts off the 16-byte grid) only without a mask: the mask's columns would need
  // their own window.
  target::RowAccess access = target::ChooseRowAccess(cols, DTypeSize(dt), aligned);
  if (access.shifted && mask) access = target::ChooseRowAccess(cols, DTypeSize(dt), false);
  const RowLimits lim = target::RowFamilyLimits(OpKind::kSoftmax, has_mask);
  RowShape s;
  if (opt.shape) {
    s = *opt.shape;
    s.vec = access.vec;
    OPFUSE_RETURN_IF_ERROR(CheckRowShape(s, access.window_cols, lim));
  } else {
    s = ChooseRowShape(rows, access.window_cols, access.vec, dev, lim);
  }
  const bool causal = AttrInt(n.attrs, "causal", 0) != 0;
  // Rows past the register path, no mask, 16-byte aligned bases, sm_90: split over a cluster
  // (target::ChooseRowSplit).
  // With a row per SM or more, staged rows where the window fits shared memory (target::ChooseRowStage).
  std::optional<target::RowSplit> split;
  std::optional<target::RowStage> stage;
  if (s.looped && !opt.shape && !mask && aligned) {
    // x's 16-byte packs (4 registers a vector) and the kept f32 exponentials (one register an element);
    // with every SM busy only over aligned rows (target::UseRowSplit)
    split = target::ChooseRowSplit(rows, cols, DTypeSize(dt), dev, 4 + 16 / static_cast<int>(DTypeSize(dt)), !access.shifted);
    // the stage kernel's registers bound its threads (target::RowStageFor)
    const int regs = DispatchFloat(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      return KernelRegisters(causal ? SoftmaxStageKernel<T, true> : SoftmaxStageKernel<T, false>);
    });
    stage = target::ChooseRowStage(rows, cols, DTypeSize(dt), 1, dev, regs);
  }
  // Where the whole staged row does not fit or gives way (target::StageGivesWayToSplit), the staged
  // split where it is taken (target::ChooseRowStageSplit, every SM busy); else a stage gives way to
  // the split where the rule says, else the split gives way to the stage.
  std::optional<target::RowStageSplit> ssplit;
  if (s.looped && !opt.shape && !mask && aligned && (!stage || target::StageGivesWayToSplit(*stage, true))) {
    const int regs = DispatchFloat(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      return KernelRegisters(causal ? SoftmaxStageSplitKernel<T, true> : SoftmaxStageSplitKernel<T, false>);
    });
    ssplit = target::ChooseRowStageSplit(rows, cols, DTypeSize(dt), 1, dev, regs);
  }
  if (ssplit) {
    stage.reset();
    split.reset();
  }
  if (stage && split && target::StageGivesWayToSplit(*stage, false)) stage.reset();
  if (stage) split.reset();
  if (access.shifted && s.looped && !stage && !ssplit) {  // the looped kernel reads unaligned rows element by element
    access = target::ChooseRowAccess(cols, DTypeSize(dt), false);
    s = ChooseRowShape(rows, cols, 1, dev, lim);
  }
  const double scale = AttrFloat(n.attrs, "scale", 1.0);
  const int64_t tq = x.shape.size() >= 2 ? x.shape[x.shape.size() - 2] : 1;
  const std::string name = fmt::format("lib:softmax_{}{}{}{}_{}{}", DTypeName(dt), causal ? "_causal" : "",
                                       mask ? "_mask" : "", mask && mask->dtype != dt ? DTypeName(mask->dtype) : "",
                                       s.ToString(), access.shifted ? "_sh" : "");
  // the register kernel runs one row group a block (no grid-stride loop): a block for every group
  if (!s.looped && !stage && !split && !ssplit && (rows + s.rows_per_block - 1) / s.rows_per_block > 0x7fffffffLL)
    return Unimplemented(fmt::format("{}: {} rows in groups of {} exceed a grid of 2^31 - 1 blocks", op, rows, s.rows_per_block));
  const dim3 grid(GridFor((rows + s.rows_per_block - 1) / s.rows_per_block));

  return DispatchFloat(dt, [&](auto tag) -> StatusOr<std::vector<cuda::KernelLaunch>> {
    using T = typename decltype(tag)::type;
    auto fill = [&](auto& p) {
      p.x = static_cast<const T*>(x.data);
      p.y = static_cast<T*>(out[0].data);
      p.rows = rows;
      p.cols = static_cast<int>(cols);
      p.tpr = s.threads_per_row;
      p.s2 = static_cast<float>(scale * 1.4426950408889634);
      p.causal = causal ? 1 : 0;
      p.tq = std::max<int64_t>(tq, 1);
      p.mask_cols = mask_cols;
      p.mmap = mmap;
    };
    if (!mask && stage) {
      SoftmaxParams<T, T> p{};
      fill(p);
      p.mask = nullptr;
      p.stage_elems = static_cast<int>(target::RowStageWindowBytes(cols, DTypeSize(dt)) / DTypeSize(dt));
      p.twin = stage->twin ? 1 : 0;
      const std::string sname = fmt::format("lib:softmax_{}{}_{}", DTypeName(dt), causal ? "_causal" : "", stage->ToString());
      auto make_stage = [&](auto kernel) -> StatusOr<std::vector<cuda::KernelLaunch>> {
        OPFUSE_RETURN_IF_ERROR(AllowSharedBytes(kernel, stage->smem_bytes, op));
        return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(sname, kernel, dim3(GridFor(stage->grid)), dim3(stage->threads),
                                                                        static_cast<size_t>(stage->smem_bytes), p).Pdl()};
      };
      return causal ? make_stage(SoftmaxStageKernel<T, true>) : make_stage(SoftmaxStageKernel<T, false>);
    }
    if (!mask && ssplit) {
      SoftmaxParams<T, T> p{};
      fill(p);
      p.mask = nullptr;
      const std::string sname = fmt::format("lib:softmax_{}{}_{}", DTypeName(dt), causal ? "_causal" : "", ssplit->ToString());
      return StageSplitLaunch(sname, causal ? SoftmaxStageSplitKernel<T, true> : SoftmaxStageSplitKernel<T, false>, *ssplit, rows, p,
                              op);
    }
    if (!mask && split) {
      SoftmaxParams<T, T> p{};
      fill(p);
      p.mask = nullptr;
      p.tpr = split->threads;
      p.chunk = static_cast<int>(split->chunk);
      const std::string sname = fmt::format("lib:softmax_{}{}_{}", DTypeName(dt), causal ? "_causal" : "", split->ToString());
      return causal ? MakeSoftmaxSplit<T, true>(sname, *split, rows, p) : MakeSoftmaxSplit<T, false>(sname, *split, rows, p);
    }
    if (!mask) {
      SoftmaxParams<T, T> p{};
      fill(p);
      p.mask = nullptr;
      return MakeSoftmax<T, T, false>(name, s, access.shifted, grid, p);
    }
    if (mask->dtype == dt) {
      SoftmaxParams<T, T> p{};
      fill(p);
      p.mask = static_cast<const T*>(mask->data);
      return MakeSoftmax<T, T, true>(name, s, false, grid, p);
    }
    SoftmaxParams<T, float> p{};
    fill(p);
    p.mask = static_cast<const float*>(mask->data);
    return MakeSoftmax<T, float, true>(name, s, false, grid, p);
  });
}

StatusOr<std::vector<cuda::KernelLaunch>> PlanSoftmax(const Node& n, const std::vector<TensorRef>& in,
                                                      const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev) {
  return PlanSoftmaxEx(n, in, out, dev, {});
}

}  // namespace opfuse::kernels
