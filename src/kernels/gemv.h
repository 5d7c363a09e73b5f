// GEMV: the decode-size matmul of the CUDA backend (a few rows of activations times a weight
// matrix), with horizontal fusion (several weights that read the same activations, one launch)
// and a SwiGLU epilogue (gate and up rows dotted in one pass, silu(gate) * up written).
//
// Why: at decode the matmul is C[M,N] = A[M,K] · Wᵀ with M = batch (1…kGemvMaxRows) and W a Hugging Face
// Linear weight [N,K] in bf16/f16 — pure weight streaming (N·K·2 bytes, about 2 FLOP per byte).
// cuBLASLt stays well below the copy bandwidth there (docs/BENCHMARKS.md) and costs one
// launch per matmul; the Llama layer has seven of them. The kernel design is in gemv.cu.
//
// Use: the executor plans a matmul step with PlanGemv when GemvSupported says yes (the reason
// otherwise goes to the launch name / fallback list), and a fused matmul group
// (passes/fuse_matmul.cc: "matmul:siblings", "matmul:swiglu") as one GemvArgs with its segments.
// Built with OPFUSE_CUDA only.
#pragma once
#include <cstdint>
#include <vector>

#include "opfuse/config.h"
#include "opfuse/graph.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/launch.h"

namespace opfuse::kernels {

inline constexpr int64_t kGemvMaxRows = kDecodeGemvMaxRows;  // M above this: cuBLASLt (opfuse/config.h)
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

// Ok when PlanGemv covers `args`; otherwise Unimplemented with the reason (dtype, m > 8, k not a
// multiple of 8, a pointer not 16-byte aligned, ...).
Status GemvSupported(const GemvArgs& args);

// The one launch computing every segment. `args` must pass GemvSupported.
StatusOr<cuda::KernelLaunch> PlanGemv(const GemvArgs& args, const cuda::DeviceInfo& dev);

}  // namespace opfuse::kernels
