// RMSNorm: x * rsqrt(mean(x*x) + eps) [* w] -> rms_norm(x[, w]) {eps}.
// x*x may be traced as pow(x, 2); every mul/add is matched in either operand order. eps must be a
// scalar constant (it becomes the attribute). The weight is optional, and only taken when it is a
// per-channel vector [C] of x's dtype; a full-tensor multiplier stays outside the norm.
#include <fmt/format.h>

#include "fusion/patterns.h"

namespace opfuse::fusion {

Pat RmsNormCore(const Pat& x) {
  Pat sq = Pat::AnyOf({Pat::Op(OpKind::kMul, {Pat::Var("x"), Pat::Var("x")}),
                       Pat::Op(OpKind::kPow, {Pat::Var("x"), Pat::ConstValue(2.0)})});
  Pat inv = Pat::Op(OpKind::kRsqrt, {Pat::Op(OpKind::kAdd, {Pat::Op(OpKind::kMean, {sq}), Pat::Const("eps")}).Commutative()});
  return Pat::Op(OpKind::kMul, {x, inv}).Commutative();
}

namespace {

std::optional<Rewrite> Build(const Graph& g, const Binding& b, std::string* why, bool weighted) {
  const int x = b.value("x");
  auto eps = ConstantValue(g, b.value("eps"));
  if (!eps) return std::nullopt;
  if (!IsFloat(g.values[x].type.dtype) || g.values[x].type.shape.empty()) return std::nullopt;
  const int root = g.nodes[b.nodes.front()].outputs[0];
  Rewrite rw{{x}, {{"eps", *eps}}, {root}, ""};
  if (weighted) {
    const int w = b.value("w");
    if (!IsChannelVector(g, w, x)) {
      *why = fmt::format("rms_norm (with weight): '{}' {} is not a per-channel weight of '{}' {}", VName(g, w),
                         g.values[w].type.ToString(), VName(g, x), g.values[x].type.ToString());
      return std::nullopt;
    }
    rw.inputs.push_back(w);
    rw.what = fmt::format("RMSNorm {0} * rsqrt(mean({0}*{0}) + {1}) * {2}", VName(g, x), Num(*eps), VName(g, w));
  } else {
    rw.what = fmt::format("RMSNorm {0} * rsqrt(mean({0}*{0}) + {1})", VName(g, x), Num(*eps));
  }
  return rw;
}

}  // namespace

PatternDef MakeRmsNormPattern() {
  PatternDef p;
  p.name = "rms_norm";
  p.op = OpKind::kRmsNorm;
  p.summary = "x * rsqrt(mean(x*x) + eps) * w";
  p.variants.push_back({"with weight",
                        Pat::Op(OpKind::kMul, {RmsNormCore(Pat::Var("x")).As("n"), Pat::Var("w")}).Commutative(),
                        [](const Graph& g, const Binding& b, std::string* why) { return Build(g, b, why, true); }});
  p.variants.push_back({"no weight", RmsNormCore(Pat::Var("x")),
                        [](const Graph& g, const Binding& b, std::string* why) { return Build(g, b, why, false); }});
  return p;
}

}  // namespace opfuse::fusion
