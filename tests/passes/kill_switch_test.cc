// FusionConfig and kill switches: OPFUSE_DISABLE parsing (unknown names are an error that lists
// the valid ones), a disabled pattern's ops stay unfused in a visible "no" group, composite ops
// whose pattern is disabled are decomposed, and decompose -> fuse_patterns gives back the same
// composite op (the decompositions are written in exactly the form the patterns match).
#include <fmt/format.h>

#include "fusion/patterns.h"
#include "ops/op_def.h"
#include "../scoped_env.h"
#include "pass_test_util.h"

namespace opfuse::testing {
namespace {

using testing_env::ScopedEnv;

TEST(FusionConfig, Defaults) {
  FusionConfig c;
  EXPECT_TRUE(c.enable_fusion);
  EXPECT_TRUE(c.enable_cache);
  EXPECT_EQ(c.min_tensor_elements, 1024);
  EXPECT_EQ(c.min_nodes_for_fusion, 2);
  EXPECT_EQ(c.max_group_size, 64);
  EXPECT_TRUE(c.fallback_on_error);
  EXPECT_FALSE(c.debug);
  EXPECT_TRUE(c.disabled.empty());
}

TEST(FusionConfig, FromEnv) {
  ScopedEnv env("OPFUSE_DISABLE", "swiglu, rope,,fuse_generic");
  auto c = FusionConfig::FromEnv();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->IsDisabled("swiglu"));
  EXPECT_TRUE(c->IsDisabled("rope"));
  EXPECT_TRUE(c->IsDisabled("fuse_generic"));
  EXPECT_FALSE(c->IsDisabled("geglu"));
  EXPECT_FALSE(c->PatternEnabled("swiglu"));
  EXPECT_TRUE(c->PatternEnabled("geglu"));
}

TEST(FusionConfig, UnknownNameListsValidNames) {
  ScopedEnv env("OPFUSE_DISABLE", "swiglu,swiglue");
  auto c = FusionConfig::FromEnv();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("OPFUSE_DISABLE: unknown name 'swiglue'"), std::string::npos) << m;
  for (const char* name : {"swiglu", "geglu", "rms_norm", "add_rms_norm", "layer_norm", "softmax", "rope", "decompose",
                           "fuse_patterns", "fuse_generic", "fuse_matmul", "gemv", "pdl"})
    EXPECT_NE(m.find(name), std::string::npos) << name << " missing from: " << m;
  FusionConfig d;
  EXPECT_FALSE(d.ApplyEnv().ok());
}

TEST(FusionConfig, KnownNamesAreEveryPatternAndOptionalPass) {
  auto names = FusionConfig::KnownNames();
  for (const auto& p : fusion::AllPatterns()) EXPECT_NE(std::find(names.begin(), names.end(), p.name), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "verify"), names.end());  // required passes cannot be switched off
}

TEST(KillSwitch, DisabledPatternLeavesItsOpsUnfused) {
  PipelineRun r = RunText(Example("swiglu.ofg"), Disabled({"swiglu"}));
  ASSERT_EQ(r.g.groups.size(), 1u) << r.Dump();
  const auto& grp = r.g.groups[0];
  EXPECT_EQ(grp.kind, "pattern:swiglu");
  EXPECT_FALSE(grp.decision.fuse);
  EXPECT_EQ(grp.decision.reason.rfind("pattern swiglu disabled by OPFUSE_DISABLE", 0), 0u) << grp.decision.reason;
  EXPECT_EQ(r.Ops(grp), "silu,mul");
  EXPECT_EQ(grp.variant, Variant::kUnfused);
  EXPECT_EQ(r.CountOp(OpKind::kSwiglu), 0);
}

TEST(KillSwitch, EnvironmentSwitchReachesThePipeline) {
  ScopedEnv env("OPFUSE_DISABLE", "add_rms_norm");
  auto c = FusionConfig::FromEnv();
  ASSERT_TRUE(c.ok());
  PipelineRun r = RunText(Example("llama_decoder_layer.ofg"), *c);
  EXPECT_EQ(r.CountOp(OpKind::kAddRmsNorm), 0) << r.Dump();
  EXPECT_EQ(r.CountOp(OpKind::kRmsNorm), 2);  // both norms are plain RMSNorms now
  // bf16: fuse_matmul takes the swiglu with its matmuls, and the norm before them as a prologue
  EXPECT_EQ(r.Kind("matmul:norm_swiglu").size(), 1u) << r.Dump();
}

TEST(KillSwitch, DisabledLayerNormIsNotEatenByRmsNorm) {
  PipelineRun r = RunText(R"(graph l
input x: f32[T, 768]
param w: f32[768]
eps = constant() {value=1e-05}
mu = mean(x)
d = sub(x, mu)
dd = mul(d, d)
var = mean(dd)
ve = add(var, eps)
inv = rsqrt(ve)
n = mul(d, inv)
y = mul(n, w)
output y
)", Disabled({"layer_norm"}));
  ASSERT_EQ(r.g.groups.size(), 1u) << r.Dump();
  EXPECT_EQ(r.g.groups[0].kind, "pattern:layer_norm");
  EXPECT_FALSE(r.g.groups[0].decision.fuse);
  EXPECT_EQ(r.CountOp(OpKind::kRmsNorm), 0);
}

TEST(KillSwitch, CompositeOfADisabledPatternIsDecomposed) {
  const char* text = R"(graph c
input x: f32[T, 256]
param w: f32[256]
y = rms_norm(x, w) {eps=1e-05}
output y
)";
  PipelineRun r = RunText(text, Disabled({"rms_norm"}));
  EXPECT_EQ(r.CountOp(OpKind::kRmsNorm), 0) << r.Dump();
  ASSERT_EQ(r.g.groups.size(), 1u) << r.Dump();
  EXPECT_EQ(r.g.groups[0].kind, "pattern:rms_norm");
  EXPECT_FALSE(r.g.groups[0].decision.fuse);
  EXPECT_EQ(r.g.values[r.g.outputs[0]].name, "y");
  EXPECT_TRUE(r.HasNote("decomposed into")) << r.Notes();

  // With fuse_patterns off the primitives go to the generic fuser instead.
  PipelineRun g = RunText(text, Disabled({"fuse_patterns"}));
  ASSERT_EQ(g.g.groups.size(), 1u) << g.Dump();
  EXPECT_EQ(g.g.groups[0].kind, "generic");
  EXPECT_TRUE(g.g.groups[0].decision.fuse);
}

TEST(KillSwitch, CausalSoftmaxHasNoPrimitiveForm) {
  PipelineRun r = RunText("graph c\ninput x: f32[T, 4, 128, 128]\np = softmax(x) {causal=1}\noutput p\n", Disabled({"softmax"}));
  ASSERT_EQ(r.g.groups.size(), 1u) << r.Dump();
  const auto& grp = r.g.groups[0];
  EXPECT_EQ(r.CountOp(OpKind::kSoftmax), 1);
  EXPECT_FALSE(grp.decision.fuse);
  EXPECT_NE(grp.decision.reason.find("causal softmax has no primitive form"), std::string::npos) << grp.decision.reason;
  EXPECT_EQ(grp.variant, Variant::kLibrary);
  EXPECT_TRUE(r.HasNote("no primitive form")) << r.Notes();
}

// decompose then fuse_patterns: every composite op comes back with the same inputs and attributes.
TEST(Decompose, RoundTripsThroughThePatterns) {
  struct Case {
    const char* pattern;
    const char* text;
  };
  const Case cases[] = {
      {"rms_norm", "y = rms_norm(x, w) {eps=1e-06}\noutput y"},
      {"rms_norm", "y = rms_norm(x) {eps=0.001}\noutput y"},
      {"add_rms_norm", "y, sum = add_rms_norm(x, r, w) {eps=1e-05}\noutput y, sum"},
      {"layer_norm", "y = layer_norm(x, w, b) {eps=1e-05}\noutput y"},
      {"layer_norm", "y = layer_norm(x) {eps=1e-05}\noutput y"},
      {"softmax", "y = softmax(x) {scale=0.125}\noutput y"},
      {"softmax", "y = softmax(x, r) {scale=0.5}\noutput y"},
      {"softmax", "y = softmax(x, r)\noutput y"},
      {"swiglu", "y = swiglu(x, r)\noutput y"},
      {"geglu", "y = geglu(x, r) {approximate=\"tanh\"}\noutput y"},
      {"geglu", "y = geglu(x, r) {approximate=\"none\"}\noutput y"},
      {"rope", "y = rope(x3, c, s)\noutput y"},
  };
  // f32, and bf16, where the norms decompose with their normalisation in f32 between two casts.
  for (const std::string dt : {"f32", "bf16"})
  for (const auto& c : cases) {
    const std::string header = fmt::format(
        "graph d\ninput x: {0}[T, 64]\ninput r: {0}[T, 64]\ninput x3: {0}[T, 4, 64]\ninput c: {0}[T, 1, 64]\n"
        "input s: {0}[T, 1, 64]\nparam w: {0}[64]\nparam b: {0}[64]\n", dt);
    SCOPED_TRACE(dt + ": " + c.text);
    auto parsed = ParseGraph(header + c.text + "\n");
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    Graph g = *parsed;
    const Node original = g.nodes[0];
    PassContext off;
    off.config.disabled.insert(c.pattern);
    ASSERT_TRUE(Decompose(g, off).ok());
    for (const auto& n : g.nodes) EXPECT_NE(GetOpInfo(n.op).kind, FusionKind::kComposite) << PrintGraph(g);
    EXPECT_GT(g.nodes.size(), 1u);
    PassContext on;
    ASSERT_TRUE(FusePatterns(g, on).ok());
    ASSERT_EQ(g.nodes.size(), 1u) << PrintGraph(g);
    const Node& back = g.nodes[0];
    EXPECT_EQ(back.op, original.op);
    ASSERT_EQ(back.inputs.size(), original.inputs.size());
    for (size_t i = 0; i < back.inputs.size(); ++i)
      EXPECT_EQ(g.values[back.inputs[i]].name, parsed->values[original.inputs[i]].name);
    for (const auto& [key, val] : original.attrs) {
      ASSERT_TRUE(back.attrs.count(key)) << key;
      if (std::holds_alternative<std::string>(val)) EXPECT_EQ(AttrString(back.attrs, key, ""), std::get<std::string>(val));
      else EXPECT_DOUBLE_EQ(AttrFloat(back.attrs, key, -1), AttrFloat(original.attrs, key, -2)) << key;
    }
    for (size_t k = 0; k < original.outputs.size(); ++k)
      EXPECT_EQ(g.values[back.outputs[k]].name, parsed->values[original.outputs[k]].name);
  }
}

}  // namespace
}  // namespace opfuse::testing
