// Generic grouping and scheduling tests: elementwise chains, elementwise -> reduction ->
// elementwise row groups, boundaries (library and view ops), max_group_size, the cycle rule,
// min_tensor_elements with and without shape bindings, and enable_fusion=false.
#include "pass_test_util.h"

namespace opfuse::testing {
namespace {

TEST(GenericFusion, ElementwiseChainWithFoldedConstant) {
  PipelineRun r = RunText(R"(graph g
input x: f32[T, 4096]
input y: f32[T, 4096]
two = constant() {value=2.0}
a = exp(x)
b = mul(a, two)
c = add(b, y)
output c
)");
  ASSERT_EQ(r.g.groups.size(), 1u) << r.Dump();
  const auto& grp = r.g.groups[0];
  EXPECT_EQ(grp.kind, "generic");
  EXPECT_TRUE(grp.decision.fuse);
  EXPECT_EQ(grp.decision.reason, "elementwise chain of 3 ops: exp, mul, add; size depends on T");
  EXPECT_EQ(grp.variant, Variant::kJit);
  EXPECT_EQ(grp.name, "fz_exp_mul_add_f32_w4096");
  EXPECT_EQ(grp.nodes.size(), 4u);  // the constant rides along as a scalar
}

TEST(GenericFusion, ReductionGroupInOneRowSpace) {
  // x * rsqrt(sum(x*x)) — a norm no pattern knows (sum, no eps): one generic row kernel.
  PipelineRun r = RunText(R"(graph g
input x: f32[T, 2048]
sq = mul(x, x)
ss = sum(sq)
inv = rsqrt(ss)
y = mul(x, inv)
output y
)");
  ASSERT_EQ(r.g.groups.size(), 1u) << r.Dump();
  EXPECT_EQ(r.g.groups[0].kind, "generic");
  EXPECT_EQ(r.Ops(r.g.groups[0]), "mul,sum,rsqrt,mul");
  EXPECT_NE(r.g.groups[0].decision.reason.find("elementwise -> sum -> elementwise"), std::string::npos);
}

TEST(GenericFusion, DifferentRowSpacesStayApart) {
  PipelineRun r = RunText(R"(graph g
input q: f32[T, 32, 64]
input c: f32[T, 1, 64]
c2 = mul(c, c)
y = mul(q, c2)
output y
)");
  ASSERT_EQ(r.g.groups.size(), 2u) << r.Dump();
  for (const auto& grp : r.g.groups) EXPECT_EQ(grp.kind, "single");
  EXPECT_NE(r.GroupOf("y")->decision.reason.find("shapes differ"), std::string::npos) << r.Dump();
}

TEST(GenericFusion, LibraryAndViewOpsAreBoundaries) {
  PipelineRun r = RunText(R"(graph g
input x: f32[T, 256]
param w: f32[256, 256]
a = exp(x)
m = matmul(a, w)
b = relu(m)
r = reshape(b) {shape=[T, 16, 16]}
s = slice(r) {axis=2, start=0, end=8}
c = neg(s)
output c
)");
  ASSERT_EQ(r.g.groups.size(), 6u) << r.Dump();
  EXPECT_EQ(r.GroupOf("m")->decision.reason, "matmul is a library op (cuBLASLt)");
  EXPECT_EQ(r.GroupOf("m")->variant, Variant::kLibrary);
  EXPECT_EQ(r.GroupOf("r")->decision.reason, "view op (reshape) moves no data");
  EXPECT_EQ(r.GroupOf("s")->decision.reason, "view op (slice) copies");
  EXPECT_EQ(r.GroupOf("a")->decision.reason, "single elementwise op: nothing to fuse with (min_nodes_for_fusion=2)");
  EXPECT_EQ(r.GroupOf("a")->variant, Variant::kUnfused);
}

TEST(GenericFusion, NoCycleThroughAView) {
  // a -> reshape -> reshape -> c and a -> c: putting c with a would make a value leave the group
  // and come back.
  PipelineRun r = RunText(R"(graph g
input x: f32[T, 64]
a = exp(x)
r = reshape(a) {shape=[T, 8, 8]}
r2 = reshape(r) {shape=[T, 64]}
c = add(a, r2)
output c
)");
  EXPECT_NE(r.GroupOf("a"), r.GroupOf("c")) << r.Dump();
  EXPECT_NE(r.GroupOf("c")->decision.reason.find("would create a cycle"), std::string::npos) << r.Dump();
  EXPECT_TRUE(GroupsAcyclic(r.g));
}

TEST(GenericFusion, MaxGroupSize) {
  FusionConfig c;
  c.max_group_size = 2;
  PipelineRun r = RunText(R"(graph g
input x: f32[T, 4096]
a = exp(x)
b = neg(a)
d = abs(b)
e = relu(d)
output e
)", c);
  ASSERT_EQ(r.g.groups.size(), 2u) << r.Dump();
  for (const auto& grp : r.g.groups) {
    EXPECT_EQ(grp.kind, "generic");
    EXPECT_EQ(grp.nodes.size(), 2u);
  }
}

TEST(GenericFusion, ArgmaxIsNotFused) {
  PipelineRun r = RunText("graph g\ninput x: f32[T, 4096]\na = exp(x)\ni = argmax(a)\noutput i\n");
  ASSERT_EQ(r.g.groups.size(), 2u) << r.Dump();
  EXPECT_NE(r.GroupOf("i")->decision.reason.find("argmax is not fusible"), std::string::npos);
}

// ---------------------------------------------------------------- schedule: config limits
constexpr const char* kSmall = R"(graph g
input x: f32[T, 128]
a = exp(x)
b = neg(a)
output b
)";

TEST(Schedule, MinTensorElementsUsesBindings) {
  PipelineRun small = RunText(kSmall, {}, {{"T", 4}});
  ASSERT_EQ(small.g.groups.size(), 1u);
  EXPECT_FALSE(small.g.groups[0].decision.fuse);
  EXPECT_EQ(small.g.groups[0].decision.reason, "tensor has 512 elements < min_tensor_elements 1024 (at T=4)");
  EXPECT_EQ(small.g.groups[0].variant, Variant::kUnfused);

  PipelineRun big = RunText(kSmall, {}, {{"T", 64}});
  EXPECT_TRUE(big.g.groups[0].decision.fuse);
  EXPECT_EQ(big.g.groups[0].decision.reason, "elementwise chain of 2 ops: exp, neg");
  EXPECT_EQ(big.g.groups[0].variant, Variant::kJit);

  PipelineRun unbound = RunText(kSmall);
  EXPECT_TRUE(unbound.g.groups[0].decision.fuse);
  EXPECT_EQ(unbound.g.groups[0].decision.reason, "elementwise chain of 2 ops: exp, neg; size depends on T");
}

TEST(Schedule, MinTensorElementsAppliesToPatternsToo) {
  PipelineRun r = RunText("graph s\ninput gate: bf16[T, 64]\ninput up: bf16[T, 64]\ng = silu(gate)\nout = mul(g, up)\noutput out\n",
                  {}, {{"T", 2}});
  ASSERT_EQ(r.g.groups.size(), 1u);
  EXPECT_EQ(r.g.groups[0].kind, "pattern:swiglu");
  EXPECT_FALSE(r.g.groups[0].decision.fuse);
  EXPECT_EQ(r.g.groups[0].decision.reason, "tensor has 128 elements < min_tensor_elements 1024 (at T=2)");
  EXPECT_EQ(r.g.groups[0].variant, Variant::kUnfused);
}

TEST(Schedule, MinNodesForFusion) {
  FusionConfig c;
  c.min_nodes_for_fusion = 3;
  PipelineRun r = RunText(kSmall, c);
  EXPECT_FALSE(r.g.groups[0].decision.fuse);
  EXPECT_EQ(r.g.groups[0].decision.reason, "group of 2 ops < min_nodes_for_fusion 3");
  EXPECT_EQ(r.g.groups[0].variant, Variant::kUnfused);
}

TEST(Schedule, FusionDisabled) {
  FusionConfig c;
  c.enable_fusion = false;
  PipelineRun r = RunText(R"(graph g
input x: f32[T, 4096]
input gate: f32[T, 4096]
param w: f32[4096]
a = exp(x)
b = neg(a)
n = rms_norm(b, w)
s = swiglu(gate, n)
output s
)", c);
  EXPECT_EQ(r.CountOp(OpKind::kRmsNorm), 0) << r.Dump();  // composites are decomposed
  EXPECT_EQ(r.CountOp(OpKind::kSwiglu), 0);
  for (const auto& grp : r.g.groups) {
    EXPECT_EQ(grp.kind, "single");
    EXPECT_EQ(grp.decision.reason, "fusion disabled (enable_fusion=false)");
    EXPECT_EQ(grp.nodes.size(), 1u);
  }
}

TEST(Pipeline, PassOrderAndDump) {
  std::vector<std::string> names;
  for (const auto& p : Pipeline()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"verify", "infer_shapes", "decompose", "fuse_patterns", "fuse_generic",
                                             "fuse_matmul", "fuse_collective", "schedule"}));
  PipelineRun r = RunText(kSmall);
  EXPECT_EQ(r.passes_seen, names);
}

TEST(Pipeline, UnknownShapeSymbolIsAnError) {
  auto g = ParseGraph(kSmall);
  ASSERT_TRUE(g.ok());
  PassContext ctx;
  ctx.bindings = {{"B", 2}};
  Status s = RunPipeline(*g, ctx);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("has no symbol 'B'"), std::string::npos) << s.message();
}

TEST(Pipeline, FuseGenericDisabled) {
  PipelineRun r = RunText(kSmall, Disabled({"fuse_generic"}));
  ASSERT_EQ(r.g.groups.size(), 2u) << r.Dump();
  for (const auto& grp : r.g.groups) EXPECT_EQ(grp.decision.reason, "fuse_generic disabled by OPFUSE_DISABLE");
  EXPECT_EQ(r.passes_seen.size(), 7u);
}

}  // namespace
}  // namespace opfuse::testing
