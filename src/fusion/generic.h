// Generic grouping: what no pattern claimed, grouped greedily into kernels the JIT can emit.
//
// Walks the nodes in topological order; each fusible op (elementwise, broadcast, last-axis
// reduction) starts a group and then tries to merge with the group of each fusible producer, in
// operand order (greedy along producer->consumer edges). A merge is refused when
//   - the group would exceed max_group_size ops,
//   - the shapes do not share one row space: every value produced (and every reduction input) must
//     be R + [C] or R + [1] for one row prefix R and width C — the [R, C] iteration space of the
//     generated kernel, where [.., 1] values are per-row (a reduction result and what is computed
//     from it). That admits elementwise chains and elementwise -> reduction -> elementwise, the
//     shape of every norm and softmax, and keeps e.g. [T,1,64] and [T,32,64] apart;
//   - the merged group would sit on a cycle: some path leaves it and comes back (through other
//     ops or other groups), so no order could run it as one kernel.
// Library, view and composite ops never join a generic group: they are boundaries. Constants are
// placed by the caller (each folds into its consumer's group as a scalar).
#pragma once
#include <string>
#include <vector>

#include "opfuse/config.h"
#include "opfuse/graph.h"

namespace opfuse::fusion {

struct GenericGroups {
  std::vector<std::vector<int>> groups;  // node ids, topological order; singletons included
  std::vector<std::string> refused;      // per node: why its last refused merge failed ("" if none)
};

// `existing[n]` is the index of the group node n already belongs to (pattern groups), or -1.
// Nodes with existing >= 0 and non-fusible nodes are not grouped but count for the cycle check.
GenericGroups GroupGeneric(const Graph& g, const std::vector<int>& existing, const FusionConfig& config);

// True when the row-space rule above admits all of `nodes` in one kernel; else *why says why.
bool SameRowSpace(const Graph& g, const std::vector<int>& nodes, std::string* why);

}  // namespace opfuse::fusion
