// GeGLU: mul(gelu(gate), up) or mul(gelu_tanh(gate), up), either operand order ->
// geglu(gate, up) {approximate="none"|"tanh"} (PyTorch's F.gelu(approximate=...) naming), so the
// fused op computes exactly the gelu variant that was traced.
#include <fmt/format.h>

#include "fusion/patterns.h"

namespace opfuse::fusion {

PatternDef MakeGegluPattern() {
  PatternDef p;
  p.name = "geglu";
  p.op = OpKind::kGeglu;
  p.summary = "gelu(gate) * up (erf or tanh gelu)";
  p.variants.push_back(
      {"gelu(gate) * up",
       Pat::Op(OpKind::kMul, {Pat::Op({OpKind::kGelu, OpKind::kGeluTanh}, {Pat::Var("gate")}).As("act"), Pat::Var("up")})
           .Commutative(),
       [](const Graph& g, const Binding& b, std::string* why) -> std::optional<Rewrite> {
         const int gate = b.value("gate"), up = b.value("up");
         if (!(g.values[gate].type == g.values[up].type)) {
           *why = fmt::format("geglu: gate {} and up {} differ (the fused op takes same-shaped operands)",
                              g.values[gate].type.ToString(), g.values[up].type.ToString());
           return std::nullopt;
         }
         const bool tanh = Producer(g, b.value("act"))->op == OpKind::kGeluTanh;
         const int root = g.nodes[b.nodes.front()].outputs[0];
         Attrs attrs{{"approximate", std::string(tanh ? "tanh" : "none")}};
         return Rewrite{{gate, up}, attrs, {root},
                        fmt::format("{}({}) * {}", tanh ? "gelu_tanh" : "gelu", VName(g, gate), VName(g, up))};
       }});
  return p;
}

}  // namespace opfuse::fusion
