// Pattern fusion tests: for every pattern a graph written in primitives (the way a framework
// traces it) must become one pattern group with a "matched ..." reason, and a near miss (an
// interior value used outside, a shape the fused op cannot take) must not — with the reason noted.
#include "pass_test_util.h"

namespace opfuse::testing {
namespace {

const FusionGroup& Only(const PipelineRun& r, const std::string& kind) {
  auto groups = r.Kind(kind);
  EXPECT_EQ(groups.size(), 1u) << r.Dump();
  static const FusionGroup kEmpty{};
  return groups.empty() ? kEmpty : *groups[0];
}

// ---------------------------------------------------------------- SwiGLU
TEST(SwigluPattern, BothOperandOrders) {
  for (const char* mul : {"out = mul(g, up)", "out = mul(up, g)"}) {
    PipelineRun r = RunText(std::string("graph s\ninput gate: bf16[T, 256]\ninput up: bf16[T, 256]\ng = silu(gate)\n") + mul +
                    "\noutput out\n");
    const auto& grp = Only(r, "pattern:swiglu");
    EXPECT_TRUE(grp.decision.fuse);
    EXPECT_EQ(grp.decision.reason.rfind("matched silu(gate) * up", 0), 0u) << grp.decision.reason;
    EXPECT_EQ(r.Ops(grp), "swiglu");
    EXPECT_EQ(grp.variant, Variant::kLibrary);
    EXPECT_EQ(grp.name, "fz_swiglu_bf16_h256");
    EXPECT_EQ(r.g.groups.size(), 1u) << r.Dump();
    EXPECT_EQ(r.g.values[r.g.outputs[0]].name, "out");  // output names survive the rewrite
  }
}

TEST(SwigluPattern, InteriorValueUsedOutsideBlocksIt) {
  PipelineRun r = RunText(
      "graph s\ninput gate: bf16[T, 256]\ninput up: bf16[T, 256]\ng = silu(gate)\nout = mul(g, up)\nalso = exp(g)\n"
      "output out, also\n");
  EXPECT_TRUE(r.Kind("pattern:swiglu").empty()) << r.Dump();
  EXPECT_TRUE(r.HasNote("interior value 'g' is also used outside the match")) << r.Notes();
  // The ops are still fused, generically: silu feeds both mul and exp.
  const auto* grp = r.GroupOf("out");
  ASSERT_NE(grp, nullptr);
  EXPECT_EQ(grp->kind, "generic");
  EXPECT_EQ(r.Ops(*grp), "silu,mul,exp");
}

TEST(SwigluPattern, BroadcastingUpIsNotSwiglu) {
  PipelineRun r = RunText("graph s\ninput gate: f32[T, 256]\ninput up: f32[256]\ng = silu(gate)\nout = mul(g, up)\noutput out\n");
  EXPECT_TRUE(r.Kind("pattern:swiglu").empty()) << r.Dump();
  EXPECT_TRUE(r.HasNote("same-shaped operands")) << r.Notes();
}

// ---------------------------------------------------------------- GeGLU
TEST(GegluPattern, ErfAndTanhGelu) {
  for (const char* act : {"gelu", "gelu_tanh"}) {
    PipelineRun r = RunText(std::string("graph s\ninput gate: f16[T, 512]\ninput up: f16[T, 512]\ng = ") + act +
                    "(gate)\nout = mul(up, g)\noutput out\n");
    const auto& grp = Only(r, "pattern:geglu");
    EXPECT_TRUE(grp.decision.fuse) << r.Dump();
    ASSERT_EQ(r.CountOp(OpKind::kGeglu), 1);
    const Node& n = r.g.nodes[grp.nodes[0]];
    EXPECT_EQ(AttrString(n.attrs, "approximate", ""), std::string(act) == "gelu" ? "none" : "tanh");
  }
}

TEST(GegluPattern, ReluIsNotGelu) {
  PipelineRun r = RunText("graph s\ninput gate: f32[T, 512]\ninput up: f32[T, 512]\ng = relu(gate)\nout = mul(g, up)\noutput out\n");
  EXPECT_TRUE(r.Kind("pattern:geglu").empty());
  EXPECT_EQ(r.Kind("generic").size(), 1u) << r.Dump();
}

// ---------------------------------------------------------------- RMSNorm
constexpr const char* kRmsNorm = R"(graph r
input x: bf16[T, 1024]
param w: bf16[1024]
eps = constant() {value=1e-06}
sq = mul(x, x)
ms = mean(sq)
mse = add(eps, ms)
inv = rsqrt(mse)
n = mul(inv, x)
y = mul(w, n)
output y
)";

TEST(RmsNormPattern, WithWeightAnyOperandOrder) {
  PipelineRun r = RunText(kRmsNorm);
  const auto& grp = Only(r, "pattern:rms_norm");
  EXPECT_TRUE(grp.decision.fuse);
  ASSERT_EQ(r.g.nodes.size(), 1u) << r.Dump();  // the eps constant was absorbed
  const Node& n = r.g.nodes[0];
  EXPECT_EQ(n.op, OpKind::kRmsNorm);
  EXPECT_EQ(n.inputs.size(), 2u);
  EXPECT_DOUBLE_EQ(AttrFloat(n.attrs, "eps", 0), 1e-6);
  EXPECT_EQ(grp.name, "fz_rms_norm_bf16_h1024");
}

TEST(RmsNormPattern, WithoutWeightAndWithPow) {
  PipelineRun r = RunText(R"(graph r
input x: f32[T, 1024]
two = constant() {value=2.0}
eps = constant() {value=1e-05}
sq = pow(x, two)
ms = mean(sq)
mse = add(ms, eps)
inv = rsqrt(mse)
y = mul(x, inv)
output y
)");
  Only(r, "pattern:rms_norm");
  ASSERT_EQ(r.CountOp(OpKind::kRmsNorm), 1);
  EXPECT_EQ(r.g.nodes.size(), 1u) << r.Dump();
  EXPECT_EQ(r.g.nodes[0].inputs.size(), 1u);
}

TEST(RmsNormPattern, FullTensorMultiplierStaysOutside) {
  // y = norm(x) * z with z a full tensor: the norm is fused without weight, the mul is not part of it.
  PipelineRun r = RunText(R"(graph r
input x: f32[T, 1024]
input z: f32[T, 1024]
eps = constant() {value=1e-05}
sq = mul(x, x)
ms = mean(sq)
mse = add(ms, eps)
inv = rsqrt(mse)
n = mul(x, inv)
y = mul(n, z)
output y
)");
  const auto& grp = Only(r, "pattern:rms_norm");
  EXPECT_EQ(r.g.nodes[grp.nodes[0]].inputs.size(), 1u);
  EXPECT_EQ(r.GroupOf("y")->kind, "single") << r.Dump();
}

TEST(RmsNormPattern, InteriorValueUsedOutsideBlocksIt) {
  std::string text = kRmsNorm;
  text.replace(text.find("output y"), 8, "other = mul(inv, inv)\noutput y, other");
  PipelineRun r = RunText(text);
  EXPECT_TRUE(r.Kind("pattern:rms_norm").empty()) << r.Dump();
  EXPECT_TRUE(r.HasNote("interior value 'inv' is also used outside the match")) << r.Notes();
  // Generic fusion still makes one row kernel of it.
  const auto* grp = r.GroupOf("y");
  ASSERT_NE(grp, nullptr);
  EXPECT_EQ(grp->kind, "generic");
  EXPECT_NE(grp->decision.reason.find("row group"), std::string::npos) << grp->decision.reason;
}

TEST(RmsNormPattern, EpsMustBeAConstant) {
  PipelineRun r = RunText(R"(graph r
input x: f32[T, 1024]
input eps: f32[]
sq = mul(x, x)
ms = mean(sq)
mse = add(ms, eps)
inv = rsqrt(mse)
y = mul(x, inv)
output y
)");
  EXPECT_TRUE(r.Kind("pattern:rms_norm").empty()) << r.Dump();
}

// ---------------------------------------------------------------- Add+RMSNorm
TEST(AddRmsNormPattern, SumIsSecondOutputAndOtherUsersAreRedirected) {
  PipelineRun r = RunText(R"(graph a
input x: bf16[T, 2048]
input res: bf16[T, 2048]
input down: bf16[T, 2048]
param w: bf16[2048]
eps = constant() {value=1e-05}
h = add(x, res)
sq = mul(h, h)
ms = mean(sq)
mse = add(ms, eps)
inv = rsqrt(mse)
n = mul(h, inv)
y = mul(n, w)
z = exp(y)
out = add(h, down)
output z, out
)");
  const auto& grp = Only(r, "pattern:add_rms_norm");
  EXPECT_TRUE(grp.decision.fuse);
  const Node& n = r.g.nodes[grp.nodes[0]];
  ASSERT_EQ(n.op, OpKind::kAddRmsNorm);
  EXPECT_EQ(r.g.values[n.outputs[0]].name, "y");
  EXPECT_EQ(r.g.values[n.outputs[1]].name, "h");
  // The only adds left are the residual add of the next step.
  EXPECT_EQ(r.CountOp(OpKind::kAdd), 1) << r.Dump();
  auto users = r.g.Users();
  EXPECT_EQ(users[n.outputs[1]].size(), 1u);
  EXPECT_EQ(r.g.nodes[users[n.outputs[1]][0]].op, OpKind::kAdd);
}

TEST(AddRmsNormPattern, AddPlusRmsNormOpFromTheInput) {
  PipelineRun r = RunText(R"(graph a
input x: f32[T, 2048]
input res: f32[T, 2048]
param w: f32[2048]
h = add(x, res)
y = rms_norm(h, w) {eps=1e-06}
output y, h
)");
  const auto& grp = Only(r, "pattern:add_rms_norm");
  EXPECT_TRUE(grp.decision.fuse);
  EXPECT_EQ(r.g.nodes.size(), 1u);
  EXPECT_DOUBLE_EQ(AttrFloat(r.g.nodes[0].attrs, "eps", 0), 1e-6);
}

TEST(AddRmsNormPattern, BroadcastingAddStaysAnAddPlusRmsNorm) {
  PipelineRun r = RunText(R"(graph a
input x: f32[T, 2048]
param bias: f32[2048]
param w: f32[2048]
eps = constant() {value=1e-05}
h = add(x, bias)
sq = mul(h, h)
ms = mean(sq)
mse = add(ms, eps)
inv = rsqrt(mse)
n = mul(h, inv)
y = mul(n, w)
output y
)");
  EXPECT_TRUE(r.Kind("pattern:add_rms_norm").empty()) << r.Dump();
  Only(r, "pattern:rms_norm");
  EXPECT_TRUE(r.HasNote("the add broadcasts")) << r.Notes();
}

// ---------------------------------------------------------------- LayerNorm
constexpr const char* kLayerNorm = R"(graph l
input x: f32[T, 768]
param w: f32[768]
param b: f32[768]
eps = constant() {value=1e-05}
mu = mean(x)
d = sub(x, mu)
dd = mul(d, d)
var = mean(dd)
ve = add(var, eps)
inv = rsqrt(ve)
n = mul(d, inv)
y = mul(n, w)
z = add(b, y)
output z
)";

TEST(LayerNormPattern, WeightAndBias) {
  PipelineRun r = RunText(kLayerNorm);
  const auto& grp = Only(r, "pattern:layer_norm");
  EXPECT_TRUE(grp.decision.fuse);
  ASSERT_EQ(r.g.nodes.size(), 1u) << r.Dump();
  EXPECT_EQ(r.g.nodes[0].inputs.size(), 3u);
  // Not mistaken for an RMSNorm of x - mean.
  EXPECT_TRUE(r.Kind("pattern:rms_norm").empty());
}

TEST(LayerNormPattern, EscapingMeanBlocksIt) {
  std::string text = kLayerNorm;
  text.replace(text.find("output z"), 8, "output z, mu");
  PipelineRun r = RunText(text);
  EXPECT_TRUE(r.Kind("pattern:layer_norm").empty()) << r.Dump();
  EXPECT_TRUE(r.HasNote("interior value 'mu' is a graph output")) << r.Notes();
}

// ---------------------------------------------------------------- Softmax
TEST(SoftmaxPattern, PlainAndRecipForm) {
  PipelineRun r = RunText(R"(graph s
input x: f32[T, 512]
m = max(x)
d = sub(x, m)
e = exp(d)
s = sum(e)
rs = recip(s)
y = mul(rs, e)
output y
)");
  const auto& grp = Only(r, "pattern:softmax");
  EXPECT_TRUE(grp.decision.fuse);
  EXPECT_EQ(r.g.nodes.size(), 1u) << r.Dump();
  EXPECT_EQ(r.g.nodes[0].inputs.size(), 1u);
}

TEST(SoftmaxPattern, ScaleAndMaskAbsorbed) {
  PipelineRun r = RunText(R"(graph s
input x: f32[T, 8, 128, 128]
input mask: f32[128, 128]
c = constant() {value=0.125}
xs = mul(x, c)
y = add(xs, mask)
m = max(y)
d = sub(y, m)
e = exp(d)
s = sum(e)
p = div(e, s)
output p
)");
  Only(r, "pattern:softmax");
  ASSERT_EQ(r.g.nodes.size(), 1u) << r.Dump();
  const Node& n = r.g.nodes[0];
  EXPECT_EQ(n.inputs.size(), 2u);
  EXPECT_DOUBLE_EQ(AttrFloat(n.attrs, "scale", 0), 0.125);
}

TEST(SoftmaxPattern, EscapingScaledValueFallsBackToSmallerVariant) {
  PipelineRun r = RunText(R"(graph s
input x: f32[T, 128]
input mask: f32[T, 128]
c = constant() {value=0.5}
xs = mul(x, c)
y = add(xs, mask)
m = max(y)
d = sub(y, m)
e = exp(d)
s = sum(e)
p = div(e, s)
output p, xs
)");
  Only(r, "pattern:softmax");
  const auto* grp = r.GroupOf("p");
  ASSERT_NE(grp, nullptr);
  const Node& n = r.g.nodes[grp->nodes.back()];
  EXPECT_EQ(n.op, OpKind::kSoftmax);
  EXPECT_EQ(r.g.values[n.inputs[0]].name, "xs");  // softmax(xs, mask): the scale stays outside
  EXPECT_EQ(n.attrs.count("scale"), 0u);
}

TEST(SoftmaxPattern, WithoutMaxSubtractionIsNotSoftmax) {
  PipelineRun r = RunText("graph s\ninput x: f32[T, 128]\ne = exp(x)\ns = sum(e)\np = div(e, s)\noutput p\n");
  EXPECT_TRUE(r.Kind("pattern:softmax").empty());
  EXPECT_EQ(r.Kind("generic").size(), 1u) << r.Dump();
}

// ---------------------------------------------------------------- RoPE
constexpr const char* kRope = R"(graph r
input x: bf16[T, 8, 64]
input cos: bf16[T, 1, 64]
input sin: bf16[T, 1, 64]
lo = slice(x) {axis=2, start=0, end=32}
hi = slice(x) {axis=-1, start=32, end=64}
nh = neg(hi)
rot = concat(nh, lo) {axis=2}
a = mul(cos, x)
b = mul(rot, sin)
y = add(b, a)
output y
)";

TEST(RopePattern, RotateHalfForm) {
  PipelineRun r = RunText(kRope);
  const auto& grp = Only(r, "pattern:rope");
  EXPECT_TRUE(grp.decision.fuse);
  ASSERT_EQ(r.g.nodes.size(), 1u) << r.Dump();
  EXPECT_EQ(r.g.nodes[0].op, OpKind::kRope);
  EXPECT_EQ(grp.name, "fz_rope_bf16_h64");
}

TEST(RopePattern, WrongHalvesAreNotRope) {
  std::string text = kRope;
  text.replace(text.find("end=32}"), 7, "end=30}");
  text.replace(text.find("concat(nh, lo)"), 14, "concat(nh, lo, lo2)");
  text.replace(text.find("nh = neg(hi)"), 12, "nh = neg(hi)\nlo2 = slice(x) {axis=2, start=30, end=32}");
  PipelineRun r = RunText(text);
  EXPECT_TRUE(r.Kind("pattern:rope").empty()) << r.Dump();
}

// ---------------------------------------------------------------- composites in the input
TEST(CompositeInput, FormsPatternGroups) {
  PipelineRun r = RunText(R"(graph c
input x: f32[T, 256]
input g: f32[T, 256]
param w: f32[256]
n = rms_norm(x, w) {eps=1e-05}
p = softmax(n) {causal=1}
y = swiglu(p, g)
output y
)");
  ASSERT_EQ(r.g.groups.size(), 3u) << r.Dump();
  EXPECT_EQ(r.g.groups[0].kind, "pattern:rms_norm");
  EXPECT_EQ(r.g.groups[1].kind, "pattern:softmax");
  EXPECT_EQ(r.g.groups[2].kind, "pattern:swiglu");
  for (const auto& grp : r.g.groups) {
    EXPECT_TRUE(grp.decision.fuse);
    EXPECT_NE(grp.decision.reason.find("given in the input"), std::string::npos);
    EXPECT_EQ(grp.variant, Variant::kLibrary);
  }
}

}  // namespace
}  // namespace opfuse::testing
