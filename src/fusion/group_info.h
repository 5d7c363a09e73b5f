// Describing fusion groups: the op list, kernel-style names, the tensor size the scheduler's
// min_tensor_elements rule looks at, and the standard reason for an op that stays alone.
//
// Kept in one place so that fuse_patterns, fuse_generic, schedule and `opfuse explain` word things
// the same way. Constants are scalars folded into their consumer's kernel, so they are left out of
// op lists and op counts.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "opfuse/config.h"
#include "opfuse/graph.h"

namespace opfuse::fusion {

// Group nodes that compute something (constants excluded), in group order.
std::vector<int> ComputeNodes(const Graph& g, const std::vector<int>& nodes);
// Op names for display; constants are listed only when the group is nothing but constants.
std::vector<std::string> GroupOpNames(const Graph& g, const std::vector<int>& nodes);
// The first output name of each node listed by GroupOpNames (parallel to it).
std::vector<std::string> GroupValueNames(const Graph& g, const std::vector<int>& nodes);

// Size of the work a group does: the largest tensor it reads or writes.
struct GroupSize {
  std::optional<int64_t> largest_known;  // elements of the largest tensor whose size is known
  std::string largest_known_at;          // "T=4" for the symbols that tensor used ("" if static)
  std::vector<std::string> unbound;      // symbols of tensors whose size is unknown (sorted)
};
GroupSize MeasureGroup(const Graph& g, const std::vector<int>& nodes, const Bindings& bindings);

// Kernel-style names: fz_<pattern>_<dtype>_h<C> for pattern groups, fz_<op>_<op>..._<dtype>_w<C>
// for generic groups, <op>_<dtype>_w<C> for ops that run alone. C is the last dim of the group's
// widest output (a symbol name when symbolic).
std::string KernelName(const Graph& g, const FusionGroup& group);

// Why `node` runs alone, from what kind of op it is ("matmul is a library op (cuBLASLt)", ...).
// `detail`, when given, says why it could not join a neighbour ("would create a cycle ...").
std::string SingleReason(const Graph& g, int node, const FusionConfig& config, const std::string& detail = "");

// A group of one node that is not fused ("single"), with the reason.
FusionGroup SingleGroup(int node, FusionDecision why);

// Whether the generic fuser may put this op in a group: elementwise/broadcast ops and last-axis
// reductions producing values (argmax's integer index is not fused).
bool IsGenericFusible(OpKind op);

// fuse_collective's groups ("collective:all_reduce_add_rms_norm"): a collective and the op it feeds,
// run on the rank's communicator (no JIT form).
inline bool IsCollectiveGroup(const FusionGroup& grp) { return grp.kind.rfind("collective:", 0) == 0; }

// Whether a fused group has a hand-written fused kernel (the "library" variant): fuse_matmul's
// groups (the decode GEMV), fuse_collective's (the communicator's) and a group of one composite op (every composite has its library
// kernel: kernels::HasLibraryKernel, checked by LibraryOpsHost.EveryCompositeHasALibraryKernel).
bool HasFusedLibraryKernel(const Graph& g, const FusionGroup& grp);

}  // namespace opfuse::fusion
