// Add+RMSNorm: s = add(a, b) feeding an RMSNorm with weight -> (y, s) = add_rms_norm(a, b, w) {eps}.
// The residual stream of a decoder layer: the sum is a second output of the fused op, and every
// other user of the add (the next residual add, a graph output) is redirected to it, so no
// standalone add remains. The norm may still be primitives or already an rms_norm op (from the
// input, or a disabled rms_norm pattern left as a composite). Both addends must have the sum's
// exact type (the fused op does not broadcast), and the weight must be per-channel.
#include <fmt/format.h>

#include "fusion/patterns.h"

namespace opfuse::fusion {
namespace {

std::optional<Rewrite> Build(const Graph& g, const Binding& b, std::string* why, std::optional<double> eps) {
  const int a = b.value("a"), r = b.value("b"), x = b.value("x"), w = b.value("w");
  if (!eps) eps = ConstantValue(g, b.value("eps"));
  if (!eps) return std::nullopt;
  const TensorType& xt = g.values[x].type;
  if (!IsFloat(xt.dtype) || xt.shape.empty()) return std::nullopt;
  if (!(g.values[a].type == xt) || !(g.values[r].type == xt)) {
    *why = fmt::format("add_rms_norm: the add broadcasts ({} + {}); the fused op needs same-shaped operands",
                       g.values[a].type.ToString(), g.values[r].type.ToString());
    return std::nullopt;
  }
  if (!IsChannelVector(g, w, x)) {
    *why = fmt::format("add_rms_norm: '{}' {} is not a per-channel weight of '{}'", VName(g, w),
                       g.values[w].type.ToString(), VName(g, x));
    return std::nullopt;
  }
  const int root = g.nodes[b.nodes.front()].outputs[0];
  return Rewrite{{a, r, w},
                 {{"eps", *eps}},
                 {root, x},
                 fmt::format("Add+RMSNorm {0} = {1} + {2}; {0} * rsqrt(mean({0}*{0}) + {3}) * {4} (sum kept as 2nd output)",
                             VName(g, x), VName(g, a), VName(g, r), Num(*eps), VName(g, w))};
}

}  // namespace

PatternDef MakeAddRmsNormPattern() {
  PatternDef p;
  p.name = "add_rms_norm";
  p.op = OpKind::kAddRmsNorm;
  p.summary = "h = a + b; h * rsqrt(mean(h*h) + eps) * w, h kept";
  p.claim_when_disabled = false;  // disabled: the add stays, the RMSNorm is still fused
  const Pat sum = Pat::Op(OpKind::kAdd, {Pat::Var("a"), Pat::Var("b")}).As("x");
  p.variants.push_back({"primitives", Pat::Op(OpKind::kMul, {RmsNormCore(sum).As("n"), Pat::Var("w")}).Commutative(),
                        [](const Graph& g, const Binding& b, std::string* why) { return Build(g, b, why, std::nullopt); }});
  p.variants.push_back({"primitives, f32 inside", Pat::Op(OpKind::kMul, {RmsNormUpcast(sum), Pat::Var("w")}).Commutative(),
                        [](const Graph& g, const Binding& b, std::string* why) -> std::optional<Rewrite> {
                          if (!RmsNormUpcastTypesOk(g, b, why)) return std::nullopt;
                          return Build(g, b, why, std::nullopt);
                        }});
  p.variants.push_back({"add + rms_norm op", Pat::Op(OpKind::kRmsNorm, {sum, Pat::Var("w")}).As("norm"),
                        [](const Graph& g, const Binding& b, std::string* why) {
                          const Node* norm = Producer(g, b.value("norm"));
                          return Build(g, b, why, AttrFloat(norm->attrs, "eps", 1e-6));
                        }});
  return p;
}

}  // namespace opfuse::fusion
