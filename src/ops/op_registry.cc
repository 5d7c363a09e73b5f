// Builds the OpDef table once from the family files, and the shared inference helpers.
#include <algorithm>

#include <fmt/format.h>

#include "ops/op_def.h"

namespace opfuse {

const OpDef& GetOpDef(OpKind op) {
  static const OpDefTable table = [] {
    OpDefTable t(kNumOps);
    RegisterElementwiseOps(t);
    RegisterReductionOps(t);
    RegisterCompositeOps(t);
    RegisterCompositeCpu(t);
    RegisterLibraryOps(t);
    RegisterCollectiveOps(t);
    RegisterViewOps(t);
    RegisterSourceOps(t);
    return t;
  }();
  return table[static_cast<int>(op)];
}

bool IsMutatedInput(OpKind op, int slot) {
  const auto& m = GetOpDef(op).mutated_inputs;
  return std::find(m.begin(), m.end(), slot) != m.end();
}

std::vector<int> StateInputs(const Graph& g) {
  std::vector<int> out;
  for (const auto& n : g.nodes) {
    if (n.dead) continue;
    for (int slot : GetOpDef(n.op).mutated_inputs)
      if (slot < static_cast<int>(n.inputs.size())) out.push_back(n.inputs[slot]);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string NodeLabel(const Node& n) {
  return n.line > 0 ? fmt::format("line {}: {}", n.line, OpName(n.op)) : std::string(OpName(n.op));
}

Status NodeError(const Node& n, const std::string& msg) {
  return InvalidArgument(fmt::format("{}: {}", NodeLabel(n), msg));
}

StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const Dim* da = i < rank - a.size() ? nullptr : &a[i - (rank - a.size())];
    const Dim* db = i < rank - b.size() ? nullptr : &b[i - (rank - b.size())];
    if (!da) { out[i] = *db; continue; }
    if (!db) { out[i] = *da; continue; }
    if (*da == *db) out[i] = *da;
    else if (da->is_static() && da->value == 1) out[i] = *db;
    else if (db->is_static() && db->value == 1) out[i] = *da;
    else
      return InvalidArgument(fmt::format("shape mismatch: {} and {} do not broadcast", ShapeToString(a),
                                         ShapeToString(b)));
  }
  return out;
}

}  // namespace opfuse
