// Device helpers of the staged row kernels beyond fused_common.cuh's StagedRows: a pass over part
// of a staged window, the staged split's share of a row (target::ChooseRowStageSplit) and the
// reductions of a staged row over its block or its cluster. Included by the library's staged row
// kernels (norm.cu, softmax.cu).
#pragma once
#include <string>
#include <vector>

#include "cuda/launch.h"
#include "kernels/fused_common.cuh"

namespace opfuse::kernels::fused {

// f(v, full) for this thread's window vectors of [begin, end) of a block-wide pass (v = begin +
// threadIdx.x, + blockDim.x, ...): `full` (std::true_type) for v in [full0, full1), where no column
// is checked, else std::false_type — ForWindowVectors over part of the window (the staged split's
// share).
template <class F>
__device__ __forceinline__ void ForWindowVectorRange(int begin, int end, int full0, int full1, F&& f) {
  for (int v = begin + static_cast<int>(threadIdx.x); v < end; v += static_cast<int>(blockDim.x)) {
    if (v >= full0 && v < full1) f(v, std::true_type{});
    else f(v, std::false_type{});
  }
}

// The staged split's row (target::ChooseRowStageSplit): one row a cluster of C blocks (the launch's
// cluster attribute), row blockIdx.x / C; the block of cluster rank k stages window vectors
// [v0, v1) = [k x share, min(nv, (k + 1) x share)) of every input, input i's vector v at
// StagedWindow(i, buffer_elems) + (v - v0) x N — StagedRows' window, a block's share of it. Only the
// columns [0, copy_cols) are copied (a causal softmax's visible keys), the vector holding the last of
// them zero-filled past it. The copies are issued and committed, not waited for.
struct ShareSpan {
  int64_t r, base;
  int s, nv, v0, v1;  // the row's shift and window vectors; this block's share [v0, v1)
};
template <class T, int N>
__device__ __forceinline__ ShareSpan ShareOf(int cols, int share_vectors) {
  ShareSpan sp;
  const int C = static_cast<int>(fz::cluster_blocks()), k = static_cast<int>(fz::cluster_rank());
  sp.r = blockIdx.x / C;
  sp.base = sp.r * cols;
  sp.s = static_cast<int>(sp.base % N);
  sp.nv = StageVectors(sp.s, cols, N);
  sp.v0 = min(k * share_vectors, sp.nv);
  sp.v1 = min(sp.v0 + share_vectors, sp.nv);
  return sp;
}
template <class T, int N, int INPUTS>
__device__ __forceinline__ void StageShare(const T* const (&src)[INPUTS], const ShareSpan& sp, int copy_cols, int buffer_elems) {
  const int nvc = StageVectors(sp.s, copy_cols, N), end = min(sp.v1, nvc);
#pragma unroll
  for (int i = 0; i < INPUTS; ++i) {
    T* const dst = StagedWindow<T>(i, buffer_elems) - sp.v0 * N;
    const T* const row = src[i] + sp.base - sp.s;
    for (int v = sp.v0 + static_cast<int>(threadIdx.x); v < end; v += static_cast<int>(blockDim.x)) {
      if (v < nvc - 1) fz::cp_async16(dst + v * N, row + v * N);
      else fz::cp_async16(dst + v * N, row + v * N, (sp.s + copy_cols - v * N) * static_cast<int>(sizeof(T)));
    }
  }
  fz::cp_async_commit();
}
// A staged row's reductions: over the block (one row a block: the persistent staged kernels), or over
// the row's cluster (the staged split: exchange e pushes the block's value to every block's parts[e],
// completing on bar[e], both armed by Arm before the kernel's cluster barrier — fz::cluster_reduce;
// every thread of the cluster gets the bit-identical value). Every thread calls Reduce, in the same
// order.
struct BlockReducer {
  float* smem;
  int phase = 0;
  template <class Op>
  __device__ __forceinline__ float Reduce(float v) { return BlockRowReduce<Op>(v, smem, phase); }
};
template <int EXCHANGES>
struct ClusterReducer {
  float* smem;
  float (*parts)[target::kRowSplitBlocks];
  unsigned long long* bar;
  int phase = 0, e = 0;
  // thread 0, before the kernel's cluster barrier
  __device__ __forceinline__ void Arm() const {
    if (threadIdx.x == 0)
#pragma unroll
      for (int k = 0; k < EXCHANGES; ++k) fz::push_arm(&bar[k], 4u * fz::cluster_blocks());
  }
  template <class Op>
  __device__ __forceinline__ float Reduce(float v) {
    const float t = fz::cluster_reduce<Op>(v, static_cast<int>(blockDim.x), smem, phase, parts[e], &bar[e],
                                           static_cast<int>(fz::cluster_blocks()));
    ++e;
    return t;
  }
};

// The staged split's launch of `kernel` over `rows` rows (target::ChooseRowStageSplit's `sp`): exactly
// rows clusters of sp.blocks blocks, the share's dynamic shared memory allowed first; p.chunk (the
// window elements a block stages, also each staged input's buffer) set from sp.
template <class P>
StatusOr<std::vector<cuda::KernelLaunch>> StageSplitLaunch(const std::string& name, void (*kernel)(P), const target::RowStageSplit& sp,
                                                           int64_t rows, P p, const char* what) {
  OPFUSE_RETURN_IF_ERROR(AllowSharedBytes(kernel, sp.smem_bytes, what));
  p.chunk = static_cast<int>(sp.chunk);
  return std::vector<cuda::KernelLaunch>{cuda::KernelLaunch::Make(name, kernel, dim3(static_cast<unsigned>(rows * sp.blocks)),
                                                                  dim3(sp.threads), static_cast<size_t>(sp.smem_bytes), p)
                                             .Pdl()
                                             .Cluster(sp.blocks)};
}

}  // namespace opfuse::kernels::fused
