// RMSNorm: x * rsqrt(mean(x*x) + eps) [* w] -> rms_norm(x[, w]) {eps}.
// x*x may be traced as pow(x, 2); every mul/add is matched in either operand order. eps must be a
// scalar constant (it becomes the attribute). The weight is optional, and only taken when it is a
// per-channel vector [C] of x's dtype; a full-tensor multiplier stays outside the norm. In f16/bf16
// the traced form may normalise in f32 between two casts (cast(x) to f32 ... cast back, then * w):
// the "f32 inside" variants, which is also how composite_decompose.cc writes a half-precision norm.
#include <fmt/format.h>

#include "fusion/patterns.h"

namespace opfuse::fusion {

Pat RmsNormCoreOver(const Pat& x, const std::string& name) {
  Pat sq = Pat::AnyOf({Pat::Op(OpKind::kMul, {Pat::Var(name), Pat::Var(name)}),
                       Pat::Op(OpKind::kPow, {Pat::Var(name), Pat::ConstValue(2.0)})});
  Pat inv = Pat::Op(OpKind::kRsqrt, {Pat::Op(OpKind::kAdd, {Pat::Op(OpKind::kMean, {sq}), Pat::Const("eps")}).Commutative()});
  return Pat::Op(OpKind::kMul, {x, inv}).Commutative();
}

Pat RmsNormCore(const Pat& x) { return RmsNormCoreOver(x, "x"); }

Pat RmsNormUpcast(const Pat& x) {
  return Pat::Op(OpKind::kCast, {RmsNormCoreOver(Pat::Op(OpKind::kCast, {x}).As("x32"), "x32")}).As("n");
}

bool RmsNormUpcastTypesOk(const Graph& g, const Binding& b, std::string* why) {
  const DType xt = g.values[b.value("x")].type.dtype, up = g.values[b.value("x32")].type.dtype,
              down = g.values[b.value("n")].type.dtype;
  if (up == DType::kF32 && down == xt) return true;
  *why = fmt::format("rms_norm: the casts around the normalisation go {} -> {} -> {}, not x's dtype -> f32 -> x's dtype",
                     DTypeName(xt), DTypeName(up), DTypeName(down));
  return false;
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
  // Half precision as eager frameworks trace it: the normalisation in f32 between two casts.
  p.variants.push_back({"f32 inside, with weight",
                        Pat::Op(OpKind::kMul, {RmsNormUpcast(Pat::Var("x")), Pat::Var("w")}).Commutative(),
                        [](const Graph& g, const Binding& b, std::string* why) -> std::optional<Rewrite> {
                          if (!RmsNormUpcastTypesOk(g, b, why)) return std::nullopt;
                          return Build(g, b, why, true);
                        }});
  p.variants.push_back({"f32 inside, no weight", RmsNormUpcast(Pat::Var("x")),
                        [](const Graph& g, const Binding& b, std::string* why) -> std::optional<Rewrite> {
                          if (!RmsNormUpcastTypesOk(g, b, why)) return std::nullopt;
                          return Build(g, b, why, false);
                        }});
  p.variants.push_back({"no weight", RmsNormCore(Pat::Var("x")),
                        [](const Graph& g, const Binding& b, std::string* why) { return Build(g, b, why, false); }});
  return p;
}

}  // namespace opfuse::fusion
