// Graph surgery shared by the fusion rewrites and the rewriting passes (decompose, fuse_patterns, fuse_generic).
//
// Rewrites keep value *names* stable: the value that replaces another takes over its name, so a
// graph output called `out` is still called `out` after fusion and callers (the runtime, tests
// comparing original vs rewritten graphs) can match outputs by name. Groups refer to node ids,
// which Graph::Compact renumbers; CompactKeepGroups carries them across via the (unique) name of
// each node's first output.
#pragma once
#include <string>
#include <vector>

#include "opfuse/graph.h"

namespace opfuse {

// Redirects every use of `from` to `to` and moves `from`'s name onto `to` (`from` is renamed to a
// scratch name; it is expected to die with its producer).
void ReplaceValue(Graph& g, int from, int to);

// Graph::Compact that keeps g.groups (node ids remapped; nodes that disappeared are dropped).
Status CompactKeepGroups(Graph& g);

// Gives every use of a constant its own constant node (clones named after the original), so a
// scalar can fold into each consumer's group. Returns whether anything changed (then the graph
// needs a Compact to restore topological order).
bool UnshareConstants(Graph& g);

// Marks constant nodes that nothing uses (and that are not graph outputs) dead. Returns how many.
int RemoveOrphanConstants(Graph& g);

// Checks the fusion invariant: every live node is in exactly one group and groups list their
// nodes in topological order. Internal error naming the first offender.
Status CheckGroupPartition(const Graph& g);

// Value and node labels for messages: "'x_n' (mul, line 12)".
std::string ValueLabel(const Graph& g, int value);
std::string NodeDescr(const Graph& g, int node);

}  // namespace opfuse
