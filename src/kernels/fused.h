// Launch-shape planning of the hand-tuned fused library kernels (norm.cu, softmax.cu, glu.cu,
// rope.cu), exposed for tests, tuning sweeps and `opfuse explain`.
//
// Design: the row layout and the rule that picks a row shape are host-only, in target/launch_shape.h
// (tested without a GPU); the planners here bind the chosen shape to a compiled kernel.
// FusedPlanOptions lets tests and sweeps force a shape or the scalar path; the executor uses the
// plain planners of library.h, which call these with default options.
// Built with OPFUSE_CUDA only.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/library.h"
#include "target/launch_shape.h"

namespace opfuse::kernels {

using target::ChooseRowShape;
using target::CheckRowShape;
using target::kDecodeRows;
using target::kMaxRegisterCols;
using target::kMaxVectorsPerThread;
using target::kPrefillRowsPerSm;
using target::RowBlockLimit;
using target::RowLimits;
using target::RowShape;

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
