// Launch-shape planning of the hand-tuned fused library kernels (norm.cu, softmax.cu, glu.cu,
// rope.cu), exposed for tests, tuning sweeps and `opfuse explain`.
//
// Design: the row kernels (rms_norm, add_rms_norm, layer_norm, softmax) all use one layout. A row
// is owned by a *row group* of `threads_per_row` threads (a power of two below 32 — several rows
// per warp —, or a multiple of 32 up to 1024); a block holds `rows_per_block` such groups. Each
// thread owns `vectors_per_thread` vectors of `vec` elements (16 bytes when the row and every
// pointer allow it, else 1 element) at columns (it * threads_per_row + t) * vec, so the whole row
// sits in registers, every load is issued before the first use, and reductions are warp shuffles
// plus (groups wider than a warp) one shared-memory exchange. Rows wider than the register path
// (more than kMaxRegisterCols columns, or more vectors than fit) take the *looped* path: the same
// group layout streaming over the row (online max+sum for softmax), re-reading it from L2.
//
// ChooseRowShape picks, from the row count and the device's SM count:
//   decode / small batches (rows < 4 x SMs): one row per block and as many threads per row as the
//     row has vectors (up to 1024), so the few rows still spread over many SMs and every load of
//     the row is in flight at once;
//   prefill (rows >= 4 x SMs): a per-family number of vectors per thread (several 16-byte loads
//     in flight per thread; RowLimits::prefill_vpt) and as many threads per row as that needs,
//     blocks of ~kPrefillBlockThreads. The best per family on an H200 (LibraryFusedBandwidthTest.
//     DISABLED_ShapeSweep, 16384 and 2048 rows x 2048 / 4096 bf16; numbers in docs/BENCHMARKS.md):
//     rms_norm / layer_norm 4 (t64x4, t128x4: at or near copy bandwidth), add_rms_norm 2 (two inputs
//     in registers: t128x2, t256x2: at or near copy bandwidth), softmax 4 (t64x4, t128x4; bench ops
//     after softmax.cu's exact-cover fast path: faster than 8, level with 2 at 2048 x 2048 and faster
//     at 16384 x 2048; 8 had been best with a runtime row group); 1 vector per thread was much slower
//     for all of them.
//   Decode (1 and 32 rows, CUDA-graph replay): 1 vector per thread was fastest.
//   Between (kDecodeRows < rows < 4 x SMs, e.g. 512): at most kMidThreadsPerRow threads per row —
//     at 512 x 4096 bf16 (same sweep, L2 flushed) t256x2 beat t512x1 for add_rms_norm, rms_norm and
//     softmax; at h2048 t256x1 stays.
// FusedPlanOptions lets tests and sweeps force a shape or the scalar path; the executor uses the
// plain planners of library.h, which call these with default options.
// Built with OPFUSE_CUDA only.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/library.h"

namespace opfuse::kernels {

inline constexpr int64_t kMaxRegisterCols = 16384;   // widest row held in registers
inline constexpr int kMaxVectorsPerThread = 8;        // register path: vectors per thread
inline constexpr int kPrefillVectorsPerThread = 4;    // prefill default (RowLimits::prefill_vpt)
inline constexpr int kPrefillBlockThreads = 128;      // prefill: rows per block fill ~this many threads
inline constexpr int kPrefillRowsPerSm = 4;           // rows >= this x SMs: prefill shapes
inline constexpr int64_t kDecodeRows = 64;            // rows above this (and below prefill): "mid" shapes
inline constexpr int kMidThreadsPerRow = 256;         // mid shapes: at most this many threads per row

struct RowShape {
  int threads_per_row = 32;     // 1,2,4,8,16 or a multiple of 32, <= 1024
  int vectors_per_thread = 1;   // 1,2,4,8 (register path); 4 = loads in flight per step (looped)
  int rows_per_block = 1;
  int vec = 1;                  // elements per vector (16 bytes / dtype size, or 1)
  bool looped = false;          // row streamed from memory instead of held in registers
  int block() const { return threads_per_row * rows_per_block; }
  std::string ToString() const;  // e.g. "v8 t32x8 p8" / "v8 t1024x1 looped"
};

// Register-path limits of one kernel family: `max_vpt` caps vectors per thread; `heavy` kernels
// (softmax with a mask: f32 values cached per element) are compiled for blocks of at most 512.
struct RowLimits {
  int max_vpt = kMaxVectorsPerThread;
  bool heavy = false;
  int prefill_vpt = kPrefillVectorsPerThread;  // the family's measured best at prefill sizes
};
// Largest block a register-path kernel with `vpt` vectors per thread is compiled for
// (__launch_bounds__): 8 vectors (32+ registers of data) get up to 128 registers per thread.
inline constexpr int RowBlockLimit(int vpt, bool heavy) { return heavy || vpt >= 8 ? 512 : 1024; }

// Shape for `rows` rows of `cols` columns with `vec`-element vectors.
RowShape ChooseRowShape(int64_t rows, int64_t cols, int vec, const cuda::DeviceInfo& dev, RowLimits lim = {});
// Whether `s` is a launchable shape for a row of `cols` columns (the register path must cover it).
Status CheckRowShape(const RowShape& s, int64_t cols, RowLimits lim = {});

struct FusedPlanOptions {
  std::optional<RowShape> shape;  // row kernels: use this shape (its vec is ignored: see below)
  bool force_scalar = false;      // 1-element vectors even where 16-byte vectors would work
  int unroll = 0;                 // glu: packs per thread per step (1, 2 or 4); 0 = by size
  int64_t max_blocks = 0;         // glu: cap the grid (threads loop grid-stride); 0 = no cap
};

// The planners of library.h with options (library.h's PlanNorm etc. pass default options).
StatusOr<std::vector<cuda::KernelLaunch>> PlanNormEx(const Node& n, const std::vector<TensorRef>& in,
                                                     const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev,
                                                     const FusedPlanOptions& opt);
StatusOr<std::vector<cuda::KernelLaunch>> PlanSoftmaxEx(const Node& n, const std::vector<TensorRef>& in,
                                                        const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev,
                                                        const FusedPlanOptions& opt);
StatusOr<std::vector<cuda::KernelLaunch>> PlanGluEx(const Node& n, const std::vector<TensorRef>& in,
                                                    const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev,
                                                    const FusedPlanOptions& opt);
StatusOr<std::vector<cuda::KernelLaunch>> PlanRopeEx(const Node& n, const std::vector<TensorRef>& in,
                                                     const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev,
                                                     const FusedPlanOptions& opt);

}  // namespace opfuse::kernels
