// DecomposeNode (see decompose_node.h).
#include "passes/decompose_node.h"

#include <map>

#include <fmt/format.h>

#include "ops/op_def.h"
#include "passes/pass.h"
#include "ir/graph_edit.h"

namespace opfuse {

StatusOr<NodeDecomposition> DecomposeNode(const Node& n,
                                          const std::function<std::pair<std::string, TensorType>(int)>& value_of) {
  const OpDef& def = GetOpDef(n.op);
  if (!def.decompose) return Unimplemented(fmt::format("{} has no decomposition", OpName(n.op)));
  if (n.outputs.empty()) return InvalidArgument(fmt::format("{}: node without outputs", OpName(n.op)));
  NodeDecomposition out;
  Graph& sub = out.graph;
  sub.name = OpName(n.op);
  std::map<int, int> input_id;  // caller id -> sub value id
  std::vector<int> ins;
  for (int v : n.inputs) {
    auto it = input_id.find(v);
    if (it == input_id.end()) {
      auto [name, type] = value_of(v);
      const int id = sub.AddValue(std::move(name), std::move(type), ValueKind::kInput);  // lists it in sub.inputs
      sub.values[id].declared = true;
      it = input_id.emplace(v, id).first;
      out.inputs.push_back(v);
    }
    ins.push_back(it->second);
  }
  std::vector<TensorType> types;
  std::vector<std::string> names;
  for (int v : n.outputs) {
    auto [name, type] = value_of(v);
    if (sub.FindValue(name)) return InvalidArgument(fmt::format("{}: output '{}' has an input's name", OpName(n.op), name));
    names.push_back(std::move(name));
    types.push_back(std::move(type));
  }
  const int nid = sub.AddNode(n.op, ins, types, n.attrs, names);
  const Node node = sub.nodes[nid];  // copy: decompose appends to sub.nodes
  sub.outputs = node.outputs;
  auto outs = def.decompose(sub, node);
  if (!outs.ok()) return Unimplemented(fmt::format("{}: {}", OpName(n.op), outs.status().message()));
  if (outs->size() != node.outputs.size())
    return Internal(fmt::format("{}: decomposition returned {} outputs, the op has {}", OpName(n.op), outs->size(),
                                node.outputs.size()));
  for (size_t k = 0; k < outs->size(); ++k) {
    const int o = (*outs)[k];
    if (sub.values[o].kind != ValueKind::kNode || sub.values[o].producer < 0)
      return Unimplemented(fmt::format("{}: decomposition passes an input straight through", OpName(n.op)));
    for (size_t j = 0; j < k; ++j)
      if ((*outs)[j] == o) return Unimplemented(fmt::format("{}: decomposition returns one value twice", OpName(n.op)));
  }
  for (size_t k = 0; k < outs->size(); ++k) ReplaceValue(sub, node.outputs[k], (*outs)[k]);
  sub.nodes[nid].dead = true;
  for (auto& v : sub.values)
    if (v.kind == ValueKind::kNode) v.declared = false;  // re-inferred below; checked against `types` after
  OPFUSE_RETURN_IF_ERROR(sub.Compact());
  OPFUSE_RETURN_IF_ERROR(VerifyAndInfer(sub));
  if (sub.inputs.size() != out.inputs.size())
    return Internal(fmt::format("{}: decomposition has {} inputs, the node {}", OpName(n.op), sub.inputs.size(), out.inputs.size()));
  for (size_t k = 0; k < sub.outputs.size(); ++k)
    if (!(sub.values[sub.outputs[k]].type == types[k]))
      return Internal(fmt::format("{}: decomposition output {} is {}{} but the op's is {}{}", OpName(n.op), k,
                                  DTypeName(sub.values[sub.outputs[k]].type.dtype), ShapeToString(sub.values[sub.outputs[k]].type.shape),
                                  DTypeName(types[k].dtype), ShapeToString(types[k].shape)));
  return out;
}

}  // namespace opfuse
