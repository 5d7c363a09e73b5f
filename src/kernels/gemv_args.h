// The GEMV's arguments and the rule of what it covers (GemvSupported): host-only, so the rule is
// tested in CPU-only builds (tests/unit/gemv_rules_test.cc); the kernel and PlanGemv are in
// gemv.h / gemv.cu.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "opfuse/config.h"
#include "opfuse/graph.h"

namespace opfuse::kernels {

// M above this: cuBLASLt (opfuse/config.h). Plain matmuls and fuse_matmul's groups take the GEMV up to
// kDecodeGemvMaxRows rows; a group a profile measured up to this many (MatmulGroupPlan::gemv_max_rows).
inline constexpr int64_t kGemvMaxRows = kGemvCapacityRows;
// The GEMV's two forms over the same arguments: CUDA cores (gemv.cu; a lane keeps 1, 2 or 4 rows'
// partial sums, issue-bound past a few rows) up to kGemvCudaCoreMaxRows rows, tensor cores
// (gemv_mma.cu; mma.sync m16n8k16, 8 rows a tile) from kGemvTensorCoreMinRows rows on
// (GemvUsesTensorCores).
inline constexpr int64_t kGemvCudaCoreMaxRows = 4;
inline constexpr int64_t kGemvTensorCoreMinRows = 3;
inline constexpr int kGemvMaxSegments = 4;
inline constexpr int kGemvLongKSplit = 4;  // warps per column when k > 2048 (gemv.cu, KSplitFor)

enum class GemvEpilogue { kNone, kSwiglu };

// One weight matrix W[n, k] (row-major, i.e. transpose_b) with its optional bias[n] and its
// output [m, n]. With kSwiglu there are exactly two segments (gate, up) of the same n, and the
// output is segments[0].out; segments[1].out is ignored.
struct GemvSegment {
  const void* w = nullptr;
  const void* bias = nullptr;
  void* out = nullptr;
  int64_t n = 0;
  // RoPE epilogue (fuse_matmul's "_rope" groups): rope_half > 0 rotates each head of 2 * rope_half
  // output columns, rope(x) = x * cos + rotate_half(x) * sin, with cos/sin [m, 2 * rope_half] in
  // the GEMV's dtype (row r of the output uses row r of cos/sin); the output is the rope's.
  int64_t rope_half = 0;
  const void* cos = nullptr;
  const void* sin = nullptr;
};

// Norm prologue (fuse_matmul's "norm" groups): the activations are rms_norm(x) or add_rms_norm(x,
// res) of the norm's input instead of a stored tensor; the block stages the row(s) in shared memory
// as f32 and scales the dot products by rstd. kAddRms writes x + res (rounded) to sum_out, which
// must not alias x or res.
enum class GemvNormKind { kNone, kRms, kAddRms };
struct GemvNorm {
  GemvNormKind kind = GemvNormKind::kNone;
  const void* x = nullptr;       // [m, k]
  const void* res = nullptr;     // kAddRms: [m, k]
  const void* weight = nullptr;  // [k] or nullptr (no weight)
  void* sum_out = nullptr;       // kAddRms: [m, k]
  double eps = 1e-6;
};
inline constexpr size_t kGemvNormMaxSmem = 48 * 1024;
inline size_t NormSmemBytes(int64_t m, int64_t k) { return static_cast<size_t>(m * k) * sizeof(float); }

// Overrides of the planner's launch rules, for tests that must reach each form on small shapes
// (the defaults are the tuned rules; docs/knobs.md).
struct GemvTuning {
  int ksplit = 0;          // 1, 2 or 4 warps per column at long k (> 2048); 0: kGemvLongKSplit
  int blocks_per_sm = -1;  // the persistent grid's blocks per SM cap; 0: one block per logical block; -1: occupancy
  int grid = 0;            // > 0: the whole grid capped at this many blocks
  int tensor_cores = -1;   // 1: the tensor-core form, 0: the CUDA-core form (<= kGemvCudaCoreMaxRows rows), -1: the rule
  int mma_warps = 0;       // tensor-core form: warps per block (each a slice of k); 0: derived from the shape and SMs
};

struct GemvArgs {
  DType dtype = DType::kBF16;  // of A, W, bias and the outputs (bf16 or f16)
  int64_t m = 0, k = 0;
  const void* a = nullptr;     // [m, k] row-major
  std::vector<GemvSegment> segments;
  GemvEpilogue epilogue = GemvEpilogue::kNone;
  GemvNorm norm;               // kind != kNone: `a` is ignored, the activations are the norm's output
  GemvTuning tuning;
};

// The tensor-core form for `args`: GemvTuning::tensor_cores, else rows >= kGemvTensorCoreMinRows.
bool GemvUsesTensorCores(const GemvArgs& args);

// Ok when PlanGemv covers `args`; otherwise Unimplemented with the reason (dtype, m > 8, k not a
// multiple of 8, a pointer not 16-byte aligned, ...).
Status GemvSupported(const GemvArgs& args);

}  // namespace opfuse::kernels
