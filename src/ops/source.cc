// Source ops: `constant` — a rank-0 tensor from attributes value (number) and dtype (default f32).
#include <fmt/format.h>

#include "ops/op_def.h"

namespace opfuse {
namespace {

StatusOr<std::vector<TensorType>> InferConstant(const Node& n, const std::vector<TensorType>&) {
  auto it = n.attrs.find("value");
  if (it == n.attrs.end() || !(std::holds_alternative<int64_t>(it->second) || std::holds_alternative<double>(it->second)))
    return NodeError(n, "needs a numeric attribute value=<number>");
  std::string name = AttrString(n.attrs, "dtype", "f32");
  auto dt = DTypeFromName(name);
  if (!dt) return NodeError(n, fmt::format("unknown dtype '{}'", name));
  return std::vector<TensorType>{{*dt, {}}};
}

Status CpuConstant(const Node& n, const std::vector<const HostTensor*>&, const std::vector<HostTensor*>& out) {
  out[0]->set(0, AttrFloat(n.attrs, "value", 0.0));
  return Status::Ok();
}

}  // namespace

void RegisterSourceOps(OpDefTable& t) {
  t[static_cast<int>(OpKind::kConstant)] = {InferConstant, CpuConstant, nullptr, {},
                                            {{"value", AttrRule::kNumber}, {"dtype", AttrRule::kDType}}};
}

}  // namespace opfuse
