// The one-shot all-reduce over peer-to-peer access between the GPUs of one process (tensor
// parallelism, docs/tensor_parallel.md): the decode-size transport, ahead of NCCL.
//
// Design (after vLLM's and TensorRT-LLM's one-shot custom all-reduce, written for our executor):
// every rank owns a staging buffer and a signal block in its own device memory, and holds the
// device pointers of every rank's (peer access enabled: one process, so plain pointers). One kernel
// per call, on every rank: block b copies its share of the vector into its own region of its
// staging buffer, tells block b of every peer (a flag in the peer's signal block), waits for theirs,
// reads the same share from every rank's region, adds the ranks in rank order 0..world-1 in f32,
// rounds once and writes it. The staging buffer is two halves, taken by the parity of block b's
// call counter: a region is written again only two calls later, after every peer's block b has
// raised its flag in the call between — which it does after its reads — so one meeting per call
// suffices. Block b only ever waits for block b of the peers, and the shares are the same partition
// on every rank, so no block waits for work that cannot start.
// The flag values are per-block counters kept in device memory (incremented by the kernel), so
// the kernel may be captured in a CUDA graph and replayed. A block that waits more than a minute for
// a peer traps (an error, not a GPU hung for good). Bits: the same sum, in the same order, as the
// CPU reference's (ops/collective.cc).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "opfuse/graph.h"

namespace opfuse::kernels {

inline constexpr int kOneShotMaxRanks = 8;
inline constexpr int kOneShotMaxBlocks = 64;

// The signal block each rank owns (zeroed once at creation).
struct OneShotSignal {
  uint32_t start[kOneShotMaxBlocks][kOneShotMaxRanks];
  uint32_t counter[kOneShotMaxBlocks];
};

struct OneShotArgs {
  int rank = 0, world = 1;
  void* staging[kOneShotMaxRanks] = {};          // every rank's staging buffer (device pointers)
  OneShotSignal* signal[kOneShotMaxRanks] = {};  // every rank's signal block
  int64_t staging_bytes = 0;                     // capacity of each staging buffer (both halves)
  const void* in = nullptr;
  void* out = nullptr;
  int64_t count = 0;
  DType dtype = DType::kBF16;
  bool pdl = true;  // launch with PDL (off under OPFUSE_DISABLE=pdl, as every PDL launch)
};

// Whether the one-shot kernel takes this call: f32/f16/bf16, 16-byte aligned in and out, each
// block's share (rounded up to 16 bytes) within its region of half a staging buffer, at most
// kOneShotMaxRanks ranks. A staging buffer of 2 x B bytes takes every message of up to B bytes.
bool OneShotSupported(const OneShotArgs& a);
// Enqueues the kernel on `stream` (the caller checked OneShotSupported). Every rank must enqueue
// the same call.
Status LaunchOneShotAllReduce(const OneShotArgs& a, cudaStream_t stream);

// The all-reduce fused with the add_rms_norm that consumes it (the collective group of
// passes/fuse_collective.cc): a.in holds this rank's [rows, cols] partial (a.count = rows x cols,
// a.out unused); per row, the sum over the ranks (f32, rank order, rounded to the dtype: the
// all_reduce's output), plus the residual (f32, rounded: add_rms_norm's second output `sum`), then
// y = sum x rsqrt(mean(sum^2) + eps) x weight in f32 (add_rms_norm's semantics, ops/composite_cpu.cc).
// Block b takes whole rows, so the norm's reduction stays in the block; the staging regions and
// the meeting are the all-reduce's; 16-byte vectors where the row length and every pointer allow
// (elements otherwise, the same sums in the same order). `sum` may alias `residual`.
struct OneShotNormArgs {
  const void* residual = nullptr;  // [rows, cols]
  const void* weight = nullptr;    // [cols]
  void* sum = nullptr;             // [rows, cols]
  void* y = nullptr;               // [rows, cols]
  int64_t rows = 0, cols = 0;
  float eps = 1e-6f;
};
// Whether it takes this call: OneShotSupported's dtypes and ranks, and a block's rows within its
// staging region.
bool OneShotAddRmsNormSupported(const OneShotArgs& a, int64_t rows, int64_t cols);
Status LaunchOneShotAddRmsNorm(const OneShotArgs& a, const OneShotNormArgs& n, cudaStream_t stream);

}  // namespace opfuse::kernels
