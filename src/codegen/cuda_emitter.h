// CUDA C emitter for the kernel IR.
//
// Generated source is self-contained (no #include: NVRTC compiles it in tens of milliseconds, and
// f16/bf16 conversions are single PTX cvt instructions), opens with a comment naming the fused ops
// and the ABI, and the kernel is named after its contents (fz_add_rms_norm_bf16_h2048_v8).
// Memory: 16-byte vectorised, coalesced loads/stores when the caller guarantees alignment (the
// `aligned` variant), f32 math for f16/bf16. Pointwise kernels: a grid-stride loop over vectors.
// Row kernels: rows up to 32 * kMaxWarpIters vectors get one warp per row (kRowsPerBlock rows per
// block, shuffle-only reductions, the row in registers: many independent 16-byte loads in flight per
// lane); wider rows get one block per row with warp-shuffle then shared-memory reductions, the row
// in registers when it fits (<= kMaxRegIters vectors per thread). Both grid-stride over rows.
// ABI: kernel(inputs..., outputs..., long long <symbol>...) in Kernel order; launch with
// `threads` threads per block; grid: rows (row kernels) or ceil(N / vec / threads), capped by the
// caller from the SM count (any grid size is correct).
#pragma once
#include <string>

#include "codegen/kernel_ir.h"

namespace opfuse::codegen {

struct EmitOptions {
  bool aligned = true;  // every pointer 16-byte aligned: allows vector accesses
  int max_threads = 256;
};

struct EmittedKernel {
  std::string function;  // extern "C" name
  std::string source;
  int threads = 256;
  int vec = 1;
  bool row_in_registers = false;
  bool row = false;
  int rows_per_block = 1;  // row kernels: rows a block handles per step (warp-per-row mode: one per warp)
};

inline constexpr int kMaxRegIters = 8;
// Warp-per-row row kernels: rows up to 32 * kMaxWarpIters vectors (4096 bf16 / 2048 f32 columns).
inline constexpr int kMaxWarpIters = 16;
inline constexpr int kRowsPerBlock = 4;

StatusOr<EmittedKernel> EmitCuda(const Kernel& k, const EmitOptions& opts = {});

}  // namespace opfuse::codegen
