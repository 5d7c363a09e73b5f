// LayerNorm: d = x - mean(x); d * rsqrt(mean(d*d) + eps) [* w [+ b]] -> layer_norm(x[, w[, b]]) {eps}.
// The variance may be traced as mean(pow(d, 2)). Weight and bias are optional (bias only with a
// weight, since the composite's operands are positional) and must be per-channel vectors.
#include <fmt/format.h>

#include "fusion/patterns.h"

namespace opfuse::fusion {
namespace {

Pat Normalized() {
  const Pat d = Pat::Op(OpKind::kSub, {Pat::Var("x"), Pat::Op(OpKind::kMean, {Pat::Var("x")})}).As("d");
  const Pat sq = Pat::AnyOf({Pat::Op(OpKind::kMul, {Pat::Var("d"), Pat::Var("d")}),
                             Pat::Op(OpKind::kPow, {Pat::Var("d"), Pat::ConstValue(2.0)})});
  const Pat inv = Pat::Op(OpKind::kRsqrt, {Pat::Op(OpKind::kAdd, {Pat::Op(OpKind::kMean, {sq}), Pat::Const("eps")}).Commutative()});
  return Pat::Op(OpKind::kMul, {d, inv}).Commutative();
}

std::optional<Rewrite> Build(const Graph& g, const Binding& b, std::string* why, int params) {
  const int x = b.value("x");
  auto eps = ConstantValue(g, b.value("eps"));
  if (!eps) return std::nullopt;
  if (!IsFloat(g.values[x].type.dtype) || g.values[x].type.shape.empty()) return std::nullopt;
  const int root = g.nodes[b.nodes.front()].outputs[0];
  Rewrite rw{{x}, {{"eps", *eps}}, {root}, ""};
  std::string tail;
  for (const char* name : {"w", "bias"}) {
    if (static_cast<int>(rw.inputs.size()) > params) break;
    const int v = b.value(name);
    if (!IsChannelVector(g, v, x)) {
      *why = fmt::format("layer_norm: '{}' {} is not a per-channel {} of '{}'", VName(g, v), g.values[v].type.ToString(),
                         name[0] == 'w' ? "weight" : "bias", VName(g, x));
      return std::nullopt;
    }
    rw.inputs.push_back(v);
    tail += fmt::format(" {} {}", name[0] == 'w' ? "*" : "+", VName(g, v));
  }
  rw.what = fmt::format("LayerNorm ({0} - mean({0})) * rsqrt(var({0}) + {1}){2}", VName(g, x), Num(*eps), tail);
  return rw;
}

}  // namespace

PatternDef MakeLayerNormPattern() {
  PatternDef p;
  p.name = "layer_norm";
  p.op = OpKind::kLayerNorm;
  p.summary = "(x - mean) * rsqrt(var + eps) * w + b";
  const Pat weighted = Pat::Op(OpKind::kMul, {Normalized(), Pat::Var("w")}).Commutative();
  p.variants.push_back({"weight and bias", Pat::Op(OpKind::kAdd, {weighted, Pat::Var("bias")}).Commutative(),
                        [](const Graph& g, const Binding& b, std::string* why) { return Build(g, b, why, 2); }});
  p.variants.push_back({"weight", weighted,
                        [](const Graph& g, const Binding& b, std::string* why) { return Build(g, b, why, 1); }});
  p.variants.push_back({"plain", Normalized(),
                        [](const Graph& g, const Binding& b, std::string* why) { return Build(g, b, why, 0); }});
  return p;
}

}  // namespace opfuse::fusion
