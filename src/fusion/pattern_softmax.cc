// Softmax over the last axis: y = x [* scale | / d] [+ mask]; e = exp(y - max(y)); e / sum(e)
// (or e * recip(sum(e))) -> softmax(x[, mask]) {scale}. The composite computes
// softmax(x * scale + mask), so the scale multiply and additive mask are absorbed when they feed
// the softmax and nothing else uses their result; otherwise a smaller variant applies (the
// variants are tried largest first). scale must be a scalar constant; the mask must broadcast to
// x's shape (it becomes the composite's second operand). Causal masking has no primitive form in
// the op set, so causal softmax only ever arrives as a softmax op {causal=1}.
#include <fmt/format.h>

#include "fusion/patterns.h"
#include "ops/op_def.h"

namespace opfuse::fusion {
namespace {

Pat Scaled() {
  return Pat::AnyOf({Pat::Op(OpKind::kMul, {Pat::Var("x"), Pat::Const("scale")}).Commutative(),
                     Pat::Op(OpKind::kDiv, {Pat::Var("x"), Pat::Const("inv_scale")})});
}

// exp(y - max(y)) / sum(..), where y is `pre` (bound to "y").
Pat Core(const Pat& pre) {
  const Pat e = Pat::Op(OpKind::kExp, {Pat::Op(OpKind::kSub, {pre, Pat::Op(OpKind::kMax, {Pat::Var("y")})})}).As("e");
  const Pat sum = Pat::Op(OpKind::kSum, {Pat::Var("e")});
  return Pat::AnyOf({Pat::Op(OpKind::kDiv, {e, sum}),
                     Pat::Op(OpKind::kMul, {e, Pat::Op(OpKind::kRecip, {sum})}).Commutative()});
}

bool BroadcastsTo(const Graph& g, int mask, int x) {
  auto s = BroadcastShapes(g.values[x].type.shape, g.values[mask].type.shape);
  return s.ok() && *s == g.values[x].type.shape && IsFloat(g.values[mask].type.dtype);
}

std::optional<Rewrite> Build(const Graph& g, const Binding& b, std::string* why) {
  int x = b.has("x") ? b.value("x") : b.value("y");
  int mask = b.value("mask");
  const TensorType& yt = g.values[b.value("y")].type;
  if (!IsFloat(yt.dtype) || yt.shape.empty()) return std::nullopt;
  double scale = 1.0;
  const bool has_scale = b.has("scale") || b.has("inv_scale");
  if (b.has("scale")) scale = *ConstantValue(g, b.value("scale"));
  if (b.has("inv_scale")) {
    double d = *ConstantValue(g, b.value("inv_scale"));
    if (d == 0.0) return std::nullopt;
    scale = 1.0 / d;
  }
  if (mask >= 0) {
    // add(x, mask) is symmetric: x is the operand with the full shape.
    if (!b.has("scale") && !b.has("inv_scale") && !(g.values[x].type == yt) && g.values[mask].type == yt) std::swap(x, mask);
    if (!(g.values[x].type == yt) || !BroadcastsTo(g, mask, x)) {
      *why = fmt::format("softmax: mask '{}' {} does not broadcast to x '{}' {}", VName(g, mask),
                         g.values[mask].type.ToString(), VName(g, x), g.values[x].type.ToString());
      return std::nullopt;
    }
  }
  if (!(g.values[x].type == yt)) return std::nullopt;  // x * scale must not broadcast x up
  const int root = g.nodes[b.nodes.front()].outputs[0];
  Rewrite rw{{x}, {}, {root}, ""};
  std::string arg = VName(g, x);
  if (has_scale) {
    rw.attrs["scale"] = scale;
    arg += " * " + Num(scale);
  }
  if (mask >= 0) {
    rw.inputs.push_back(mask);
    arg += " + " + VName(g, mask);
  }
  rw.what = fmt::format("Softmax exp(y - max(y)) / sum(exp(y - max(y))), y = {}", arg);
  return rw;
}

}  // namespace

PatternDef MakeSoftmaxPattern() {
  PatternDef p;
  p.name = "softmax";
  p.op = OpKind::kSoftmax;
  p.summary = "exp(y - max(y)) / sum(exp(y - max(y))), y = x * scale + mask";
  p.variants.push_back({"scale and mask",
                        Core(Pat::Op(OpKind::kAdd, {Scaled().As("scaled"), Pat::Var("mask")}).Commutative().As("y")), Build});
  p.variants.push_back({"mask", Core(Pat::Op(OpKind::kAdd, {Pat::Var("x"), Pat::Var("mask")}).As("y")), Build});
  p.variants.push_back({"scale", Core(Scaled().As("y")), Build});
  p.variants.push_back({"plain", Core(Pat::Var("y")), Build});
  return p;
}

}  // namespace opfuse::fusion
