// SwiGLU: mul(silu(gate), up) in either operand order -> swiglu(gate, up).
// The Llama MLP's activation; gate and up must agree in shape and dtype (no broadcasting), since
// the composite takes two same-shaped operands.
#include <fmt/format.h>

#include "fusion/patterns.h"

namespace opfuse::fusion {

PatternDef MakeSwigluPattern() {
  PatternDef p;
  p.name = "swiglu";
  p.op = OpKind::kSwiglu;
  p.summary = "silu(gate) * up";
  p.variants.push_back(
      {"silu(gate) * up",
       Pat::Op(OpKind::kMul, {Pat::Op(OpKind::kSilu, {Pat::Var("gate")}), Pat::Var("up")}).Commutative(),
       [](const Graph& g, const Binding& b, std::string* why) -> std::optional<Rewrite> {
         const int gate = b.value("gate"), up = b.value("up");
         if (!(g.values[gate].type == g.values[up].type)) {
           *why = fmt::format("swiglu: gate {} and up {} differ (the fused op takes same-shaped operands)",
                              g.values[gate].type.ToString(), g.values[up].type.ToString());
           return std::nullopt;
         }
         const int root = g.nodes[b.nodes.front()].outputs[0];
         return Rewrite{{gate, up}, {}, {root}, fmt::format("silu({}) * {}", VName(g, gate), VName(g, up))};
       }});
  return p;
}

}  // namespace opfuse::fusion
