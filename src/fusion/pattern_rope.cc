// RoPE (rotate-half form, as Hugging Face Llama traces it):
//   x * cos + concat(neg(x[..., D/2:]), x[..., :D/2]) * sin  -> rope(x, cos, sin)
// Every mul/add in either operand order; neg(h) may also be traced as h * -1. Slices and the
// concat must be on the last axis with the halves exactly [0, D/2) and [D/2, D) of a static, even
// D; cos and sin must broadcast to x (the gathered tables [T, 1, D] against [T, heads, D]).
#include <fmt/format.h>

#include "fusion/patterns.h"
#include "ops/op_def.h"

namespace opfuse::fusion {
namespace {

// The static last dim of a node's first input, or -1.
int64_t LastDim(const Graph& g, const Node& n, size_t* rank) {
  const Shape& s = g.values[n.inputs[0]].type.shape;
  *rank = s.size();
  if (s.empty() || !s.back().is_static()) return -1;
  return s.back().value;
}

bool IsHalf(const Graph& g, const Node& n, bool upper) {
  size_t rank = 0;
  const int64_t d = LastDim(g, n, &rank);
  if (d <= 0 || d % 2 || NormalizedAxis(n, rank) != static_cast<int64_t>(rank) - 1) return false;
  int64_t start = AttrInt(n.attrs, "start", 0);
  if (start < 0) start += d;
  int64_t end = n.attrs.count("end") ? AttrInt(n.attrs, "end", d) : d;
  if (end < 0) end += d;
  return upper ? (start == d / 2 && end == d) : (start == 0 && end == d / 2);
}

bool LastAxisConcat(const Graph& g, const Node& n) {
  const size_t rank = g.values[n.inputs[0]].type.shape.size();
  return NormalizedAxis(n, rank) == static_cast<int64_t>(rank) - 1;
}

bool BroadcastsTo(const Graph& g, int t, int x) {
  auto s = BroadcastShapes(g.values[x].type.shape, g.values[t].type.shape);
  return s.ok() && *s == g.values[x].type.shape && IsFloat(g.values[t].type.dtype);
}

}  // namespace

PatternDef MakeRopePattern() {
  PatternDef p;
  p.name = "rope";
  p.op = OpKind::kRope;
  p.summary = "x * cos + rotate_half(x) * sin";
  const Pat lo = Pat::Op(OpKind::kSlice, {Pat::Var("x")}).Where([](const Graph& g, const Node& n) { return IsHalf(g, n, false); });
  const Pat hi = Pat::Op(OpKind::kSlice, {Pat::Var("x")}).Where([](const Graph& g, const Node& n) { return IsHalf(g, n, true); });
  const Pat neg_hi = Pat::AnyOf({Pat::Op(OpKind::kNeg, {hi}), Pat::Op(OpKind::kMul, {hi, Pat::ConstValue(-1.0)}).Commutative()});
  const Pat rot = Pat::Op(OpKind::kConcat, {neg_hi, lo}).Where(LastAxisConcat);
  const Pat tree = Pat::Op(OpKind::kAdd, {Pat::Op(OpKind::kMul, {Pat::Var("x"), Pat::Var("cos")}).Commutative(),
                                          Pat::Op(OpKind::kMul, {rot, Pat::Var("sin")}).Commutative()})
                       .Commutative();
  p.variants.push_back(
      {"rotate-half", tree, [](const Graph& g, const Binding& b, std::string* why) -> std::optional<Rewrite> {
         const int x = b.value("x"), cos = b.value("cos"), sin = b.value("sin");
         const int root = g.nodes[b.nodes.front()].outputs[0];
         if (!IsFloat(g.values[x].type.dtype) || !(g.values[root].type == g.values[x].type)) return std::nullopt;
         if (!BroadcastsTo(g, cos, x) || !BroadcastsTo(g, sin, x)) {
           *why = fmt::format("rope: cos {} / sin {} do not broadcast to x '{}' {}", g.values[cos].type.ToString(),
                              g.values[sin].type.ToString(), VName(g, x), g.values[x].type.ToString());
           return std::nullopt;
         }
         return Rewrite{{x, cos, sin}, {}, {root},
                        fmt::format("RoPE {0} * {1} + rotate_half({0}) * {2}", VName(g, x), VName(g, cos), VName(g, sin))};
       }});
  return p;
}

}  // namespace opfuse::fusion
