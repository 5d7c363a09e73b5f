// OpDef: the one definition record of each op (DESIGN.md "One source of truth for ops").
//
// Each family file in src/ops/ fills the records of its ops: shape/dtype inference, the CPU
// reference, and for composite ops the decomposition into primitives. Capabilities such as
// "has a CPU reference" or "can be decomposed" are read off these records — never a second list.
// The scalar math of elementwise ops (shared by the CPU reference, the kernel-IR interpreter and
// the CUDA emitter) lives in scalar_ops.h.
#pragma once
#include <vector>

#include "opfuse/graph.h"
#include "ir/host_tensor.h"

namespace opfuse {

using InferFn = StatusOr<std::vector<TensorType>> (*)(const Node& node, const std::vector<TensorType>& in);
// Outputs are preallocated by the caller with the bound output shapes. For an op that writes some
// of its inputs (OpDef::mutated_inputs, e.g. kv_attention's caches), `out` holds the node's outputs
// followed by one writable tensor per mutated input, in mutated_inputs order; each is the very
// tensor in[slot] points to (the executor hands the op the state it must update).
using CpuFn = Status (*)(const Node& node, const std::vector<const HostTensor*>& in,
                         const std::vector<HostTensor*>& out);
// Appends primitive nodes to `g` computing `node`'s outputs from its inputs; returns the value ids
// that replace node.outputs (same order). Types are left for VerifyAndInfer.
using DecomposeFn = StatusOr<std::vector<int>> (*)(Graph& g, const Node& node);

// An attribute an op reads, and the values it accepts. The verifier refuses an attribute the op does
// not list (a misspelled `epsilon` would otherwise be a silent default) and a value outside its
// rule; names beginning with '_' are the passes' own annotations and are not checked.
enum class AttrRule {
  kFlag,            // integer 0 or 1 (causal, transpose_b)
  kInt,             // any integer (slice bounds, axis: the op's inference checks the range)
  kNonNegativeInt,  // integer >= 0 (window)
  kPositive,        // finite number > 0 (eps)
  kFinite,          // finite number (scale)
  kNumber,          // any number, ±inf included (a constant's value)
  kString,          // text (geglu approximate: the op checks the choices)
  kDType,           // a dtype name
  kDims,            // a dim list (reshape shape, transpose perm)
};
struct AttrSpec {
  const char* name;
  AttrRule rule;
};

struct OpDef {
  InferFn infer = nullptr;
  CpuFn cpu = nullptr;
  DecomposeFn decompose = nullptr;
  // Input slots the op writes in place ("state": kv_attention's k_cache and v_cache). The verifier
  // requires each to be a graph input (input/param) that no other node reads and that is not a
  // graph output, so the write is the only effect on it and no pass can reorder a reader around
  // it; such nodes are library ops, which the fusion passes never group or remove.
  std::vector<int> mutated_inputs;
  std::vector<AttrSpec> attrs;  // every attribute the op reads (empty: none)
};

const OpDef& GetOpDef(OpKind op);

// True when op `op` writes its input `slot` in place.
bool IsMutatedInput(OpKind op, int slot);
// Value ids of the graph's state inputs: graph inputs some live node writes (sorted).
std::vector<int> StateInputs(const Graph& g);

// Family registration (called once by the registry, in op_registry.cc).
using OpDefTable = std::vector<OpDef>;
void RegisterElementwiseOps(OpDefTable& t);
void RegisterReductionOps(OpDefTable& t);
void RegisterCompositeOps(OpDefTable& t);
void RegisterCompositeDecompositions(OpDefTable& t);  // composite_decompose.cc: fills OpDef::decompose
void RegisterCompositeCpu(OpDefTable& t);  // composite_cpu.cc: fills OpDef::cpu only
void RegisterLibraryOps(OpDefTable& t);
void RegisterCollectiveOps(OpDefTable& t);  // collective.cc: all_reduce, all_gather
void RegisterViewOps(OpDefTable& t);
void RegisterSourceOps(OpDefTable& t);

// Shared inference helpers.
StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);
std::string NodeLabel(const Node& n);  // "mul (line 7)" / "mul"
Status NodeError(const Node& n, const std::string& msg);  // InvalidArgument("line 7: mul: msg")

}  // namespace opfuse
