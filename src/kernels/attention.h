// Attention library kernel: planning options beyond PlanLibraryNode (src/kernels/attention.cu).
//
// Design: attention(q[T,Hq,D], k[S,Hkv,D], v[S,Hkv,D]) has three kernels, chosen per shape at plan time:
//   * tensor-core prefill ("mma"): flash-attention-2 style for f16/bf16 with D = 64 or 128 and
//     T > kAttentionDecodeMaxT and a positive scale — a 64- or 128-row Q tile per block held in
//     registers as mma.sync m16n8k16 fragments, 64-key K/V tiles double-buffered in shared memory
//     with cp.async, online softmax in f32 (maximum over the raw scores, so the scale must be
//     positive; other scales take the general kernel), causal tiles skipped and causal grids folded
//     (a block takes a heavy and a light row tile) where the device stays full (ChooseMma);
//     On a cc 9.0 device the same tile runs as a Hopper kernel where ChooseMma takes it
//     (sm90a/attention_wgmma.cu: a TMA producer warpgroup feeding K/V tiles through an mbarrier ring
//     to two consumer warpgroups that run S = Q K^T and O += P V as warpgroup MMAs);
//   * general ("simt"): CUDA cores, any float dtype and any D <= 256. A block takes up to 8 query
//     rows (4 when decoding) of one kv head (query heads of a GQA group share its K/V reads) and a range of
//     keys; its 4 warps take interleaved key tiles, each keeping its own online-softmax state, and
//     merge at the end. This is the decode kernel (T small), and the correct-for-everything path;
//   * split-K decode (flash-decoding): the same general kernel with the key range cut into splits
//     so that a short-T, long-S problem fills the GPU; each split writes a partial (max, sum, acc)
//     to f32 scratch and a second small kernel combines them. The planner cannot allocate, so the
//     scratch comes from the caller: AttentionWorkspaceBytes (library.h) says how much, and the
//     executor passes it as a 4th TensorRef. Without it the general kernel runs in one pass.
// Tests and comparisons choose the path explicitly through AttentionPlanOptions::path. Built with
// OPFUSE_CUDA only.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/library.h"

namespace opfuse::kernels {

struct AttentionPlanOptions {
  AttentionPath path = AttentionPath::kAuto;
  // f32 scratch for split-K (nullptr / 0: none, so no split). Must stay untouched between the
  // split kernel and the combine kernel of one run (same stream ordering suffices).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // 0: splits chosen from the shape and the SM count; otherwise at most this many (1: no split).
  int max_splits = 0;
  // Zeroed u32 arrival counters (at least AttentionCounterCount of them) that stay reserved for the
  // plan's lifetime: the last split block merges the partials (no combine kernel) and leaves its
  // counter at zero again. nullptr: the combine kernel runs.
  unsigned* counters = nullptr;
  size_t counter_count = 0;
  // kv_attention's general kernel (decode) may read pos and the cache rows below pos[b] before its PDL wait
  // (overlapping the previous kernel): only when no earlier kernel of the same run writes them —
  // pos is an input of the run and no other step touches the caches. The CUDA executor says so
  // through PlanLibraryNode's LibraryPlanOptions::early_reads.
  bool early_reads = false;
  // Tests and comparisons: the tensor-core instance (index, largest row tile first) and whether causal
  // grids fold (0/1); -1: ChooseMma decides from the shape and the device.
  int mma_instance = -1;
  int mma_fold = -1;
  // The Hopper (wgmma + TMA) form of the tensor-core kernel: -1 the chooser decides (on a cc 9.0
  // device it is the first candidate, unless mma_instance forces an mma.sync instance); 0 never;
  // 1 always (Unimplemented where WgmmaRefusal says why not). mma_fold forces its folding too.
  int wgmma = -1;
};

// Launches computing attention node `n` (see PlanAttention in library.h) with explicit options.
StatusOr<std::vector<cuda::KernelLaunch>> PlanAttentionWith(const Node& n, const std::vector<TensorRef>& in,
                                                            const std::vector<TensorRef>& out,
                                                            const cuda::DeviceInfo& dev,
                                                            const AttentionPlanOptions& opts);

// kv_attention (q[B,T,Hq,D], k/v[B,T,Hkv,D], k_cache/v_cache[B,S,Hkv,D] written in place, pos[B] i32
// in device memory): a cache-write kernel (k[b,t] -> k_cache[b, pos[b]+t], 16-byte units) and then
// the kernels above over the caches with B sequences, sequence b seeing min(S, pos[b] + T) keys —
// the length is read inside the kernels, so nothing on the host depends on pos and a captured
// CUDA graph replays with new positions. T <= kAttentionDecodeMaxT: the general kernel, split-K
// sized for the capacity S (splits past a sequence's length write empty partials that the combine
// weighs 0); longer T: the tensor-core kernel (f16/bf16, D 64/128), one grid z-slice per sequence.
// A pos[b] + T beyond S cannot fail on the device: rows past S are not written and the keys are
// clamped to S (the engine checks the context length on the host). `in` may carry the split-K
// scratch as a 7th TensorRef (AttentionWorkspaceBytes dispatches on the node's op).
StatusOr<std::vector<cuda::KernelLaunch>> PlanKvAttentionWith(const Node& n, const std::vector<TensorRef>& in,
                                                              const std::vector<TensorRef>& out,
                                                              const cuda::DeviceInfo& dev,
                                                              const AttentionPlanOptions& opts);
size_t KvAttentionWorkspaceBytesFor(const std::vector<TensorRef>& in, const cuda::DeviceInfo& dev,
                                    AttentionPath path, int max_splits = 0);

}  // namespace opfuse::kernels
