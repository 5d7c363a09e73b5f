// PlanLibraryNode: dispatch of a node to its family's planner (library.h).
#include <fmt/format.h>

#include "kernels/library.h"

namespace opfuse::kernels {

namespace {
using PlanFn = StatusOr<std::vector<cuda::KernelLaunch>> (*)(const Node&, const std::vector<TensorRef>&,
                                                              const std::vector<TensorRef>&, const cuda::DeviceInfo&);
PlanFn PlannerFor(OpKind op) {
  switch (op) {
    case OpKind::kRmsNorm: case OpKind::kAddRmsNorm: case OpKind::kLayerNorm: return PlanNorm;
    case OpKind::kSoftmax: return PlanSoftmax;
    case OpKind::kSwiglu: case OpKind::kGeglu: return PlanGlu;
    case OpKind::kRope: return PlanRope;
    case OpKind::kAttention: return PlanAttention;
    case OpKind::kKvAttention: return nullptr;  // PlanKvAttention, with the run's options (below)
    case OpKind::kEmbedding: return PlanEmbedding;
    case OpKind::kMatmul: case OpKind::kConstant: return nullptr;  // cuBLASLt / host constant, in the executor
    default: break;
  }
  switch (GetOpInfo(op).kind) {
    case FusionKind::kElementwise: case FusionKind::kBroadcast: return PlanElementwise;
    case FusionKind::kReduction: return PlanReduction;
    case FusionKind::kView: return PlanView;
    default: return nullptr;
  }
}
}  // namespace

bool HasLibraryKernel(OpKind op) { return op == OpKind::kKvAttention || PlannerFor(op) != nullptr; }

StatusOr<std::vector<cuda::KernelLaunch>> PlanLibraryNode(const Node& n, const std::vector<TensorRef>& in,
                                                          const std::vector<TensorRef>& out,
                                                          const cuda::DeviceInfo& dev, const LibraryPlanOptions& opts) {
  if (n.op == OpKind::kKvAttention) return PlanKvAttention(n, in, out, dev, opts.early_reads);
  PlanFn fn = PlannerFor(n.op);
  if (!fn) return Unimplemented(fmt::format("{}: no library kernel", OpName(n.op)));
  return fn(n, in, out, dev);
}

}  // namespace opfuse::kernels
