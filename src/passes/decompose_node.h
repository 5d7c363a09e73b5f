// One composite node written out in primitives as a graph of its own — how the CUDA executor runs a
// composite op by op when its group is not fused (src/runtime/cuda/executor.cc, add_decomposed).
//
// Design note: the node's distinct input values become the graph's inputs (first use first; a value
// read twice is one input), the composite is added as a node with its declared output names and
// types, and the `decompose` pass's own recipe (OpDef::decompose, then ReplaceValue so the outputs
// keep their names, then Compact + VerifyAndInfer) runs on that one-node graph. The caller maps the
// graph's inputs and outputs back onto its own values by position. Kept host-side (not in the CUDA
// executor) so tests can run the result through the CPU reference without a GPU.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "opfuse/graph.h"
#include "opfuse/status.h"

namespace opfuse {

struct NodeDecomposition {
  Graph graph;              // inputs: `inputs` below, in order; outputs: n.outputs, in order
  std::vector<int> inputs;  // the caller's value ids graph.inputs stand for (n's distinct inputs)
};

// `value_of(id)` gives (name, type) of the caller's value `id` (ids as in n.inputs / n.outputs).
// Unimplemented when the op has no decomposition (or its decomposition fails, e.g. causal softmax)
// or passes an input straight through; Internal when the decomposition's output type differs from
// the node's.
StatusOr<NodeDecomposition> DecomposeNode(const Node& n,
                                          const std::function<std::pair<std::string, TensorType>(int)>& value_of);

}  // namespace opfuse
