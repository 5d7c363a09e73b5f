// Pass fuse_matmul (src/passes/fuse_matmul.cc): sibling matmuls of one input and the matmul ->
// swiglu epilogue become "matmul:*" groups with a reason; what blocks them is noted; the fused
// groups compute the same on the CPU reference with f32 kept inside the group.
#include <cmath>

#include "../matmul_graphs.h"
#include "pass_test_util.h"
#include "runtime/cpu/cpu_executor.h"

namespace opfuse::testing {
namespace {

constexpr const char* kMlp = R"(graph mlp
input x: bf16[T, 256]
param wq: bf16[256, 256]
param wk: bf16[32, 256]
param wv: bf16[32, 256]
param wg: bf16[704, 256]
param wu: bf16[704, 256]
q = matmul(x, wq) {transpose_b=1}
k = matmul(x, wk) {transpose_b=1}
v = matmul(x, wv) {transpose_b=1}
g = matmul(x, wg) {transpose_b=1}
u = matmul(x, wu) {transpose_b=1}
s = silu(g)
act = mul(s, u)
output q, k, v, act
)";

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  for (size_t p = text.find(from); p != std::string::npos; p = text.find(from, p + to.size())) text.replace(p, from.size(), to);
  return text;
}

TEST(FuseMatmul, SiblingsAndSwigluEpilogue) {
  PipelineRun r = RunText(kMlp);
  auto sib = r.Kind("matmul:siblings");
  auto swi = r.Kind("matmul:swiglu");
  ASSERT_EQ(sib.size(), 1u) << r.Dump();
  ASSERT_EQ(swi.size(), 1u) << r.Dump();
  EXPECT_EQ(r.Ops(*sib[0]), "matmul,matmul,matmul");
  EXPECT_EQ(r.Ops(*swi[0]), "matmul,matmul,swiglu");
  EXPECT_TRUE(sib[0]->decision.fuse);
  EXPECT_NE(sib[0]->decision.reason.find("horizontal: 3 matmuls (q, k, v) read x"), std::string::npos)
      << sib[0]->decision.reason;
  EXPECT_NE(swi[0]->decision.reason.find("matmul epilogue: g and u read x"), std::string::npos) << swi[0]->decision.reason;
  EXPECT_EQ(sib[0]->variant, Variant::kLibrary);
  EXPECT_EQ(swi[0]->variant, Variant::kLibrary);
  // The gate/up matmuls are in the swiglu group, not among the siblings.
  EXPECT_EQ(r.GroupOf("g"), swi[0]);
  EXPECT_EQ(r.GroupOf("q"), sib[0]);
}

TEST(FuseMatmul, F16AppliesF32DoesNot) {
  EXPECT_EQ(RunText(Replace(kMlp, "bf16", "f16")).Kind("matmul:siblings").size(), 1u);
  PipelineRun f32 = RunText(Replace(kMlp, "bf16", "f32"));
  EXPECT_TRUE(f32.Kind("matmul:siblings").empty()) << f32.Dump();
  EXPECT_TRUE(f32.Kind("matmul:swiglu").empty()) << f32.Dump();
  EXPECT_EQ(f32.Kind("pattern:swiglu").size(), 1u) << f32.Dump();
}

TEST(FuseMatmul, KillSwitchAndNeverFuse) {
  PipelineRun off = RunText(kMlp, Disabled({"fuse_matmul"}));
  EXPECT_TRUE(off.Kind("matmul:siblings").empty());
  EXPECT_TRUE(off.Kind("matmul:swiglu").empty());
  EXPECT_EQ(off.Kind("pattern:swiglu").size(), 1u) << off.Dump();
  FusionConfig never;
  never.enable_fusion = false;
  PipelineRun n = RunText(kMlp, never);
  EXPECT_TRUE(n.Kind("matmul:siblings").empty());
  EXPECT_TRUE(n.Kind("matmul:swiglu").empty());
}

TEST(FuseMatmul, GateUsedOutsideBlocksTheEpilogueWithANote) {
  std::string text = Replace(kMlp, "output q, k, v, act\n", "output q, k, v, act, g\n");
  PipelineRun r = RunText(text);
  EXPECT_TRUE(r.Kind("matmul:swiglu").empty()) << r.Dump();
  EXPECT_TRUE(r.HasNote("gate or up is also used outside the swiglu")) << r.Notes();
  // g and u then join q, k, v as siblings of x: at most 4 per launch, the rest noted.
  ASSERT_EQ(r.Kind("matmul:siblings").size(), 1u) << r.Dump();
  EXPECT_EQ(r.Ops(*r.Kind("matmul:siblings")[0]), "matmul,matmul,matmul,matmul");
  EXPECT_TRUE(r.HasNote("5 sibling matmuls")) << r.Notes();
}

TEST(FuseMatmul, DifferentInputsOrComputedWeightsStayApart) {
  constexpr const char* kText = R"(graph two
input x: bf16[T, 64]
input y: bf16[T, 64]
param w1: bf16[32, 64]
param w2: bf16[32, 64]
w3 = mul(w1, w2)
a = matmul(x, w1) {transpose_b=1}
b = matmul(y, w2) {transpose_b=1}
c = matmul(y, w3) {transpose_b=1}
output a, b, c
)";
  PipelineRun r = RunText(kText);
  EXPECT_TRUE(r.Kind("matmul:siblings").empty()) << r.Dump();  // c's weight is computed: not a GEMV weight
}

// A decoder-ish block: rms_norm -> q/k, add_rms_norm -> gate/up + swiglu, a final rms_norm -> head.
const std::string kNormed = testing_graphs::NormedBlock("bf16", 256, 512, false);

TEST(FuseMatmul, NormPrologueJoinsTheGroups) {
  PipelineRun r = RunText(kNormed);
  auto sib = r.Kind("matmul:norm_siblings");
  auto swi = r.Kind("matmul:norm_swiglu");
  ASSERT_EQ(sib.size(), 1u) << r.Dump();
  ASSERT_EQ(swi.size(), 1u) << r.Dump();
  EXPECT_EQ(r.Ops(*sib[0]), "rms_norm,matmul,matmul");
  EXPECT_EQ(r.Ops(*swi[0]), "add_rms_norm,matmul,matmul,swiglu");
  EXPECT_NE(swi[0]->decision.reason.find("prologue: add_rms_norm"), std::string::npos) << swi[0]->decision.reason;
  // The LM head is one matmul: it takes its norm as "matmul:norm".
  auto head = r.Kind("matmul:norm");
  ASSERT_EQ(head.size(), 1u) << r.Dump();
  EXPECT_EQ(r.Ops(*head[0]), "rms_norm,matmul");
  EXPECT_TRUE(r.Kind("pattern:rms_norm").empty()) << r.Dump();
  EXPECT_TRUE(r.Kind("pattern:add_rms_norm").empty()) << r.Dump();
  // A norm output used outside the matmuls stays its own group, with a note.
  PipelineRun out = RunText(Replace(kNormed, "output q, k, act, logits, s1\n", "output q, k, act, logits, s1, h\n"));
  EXPECT_TRUE(out.Kind("matmul:norm_siblings").empty()) << out.Dump();
  EXPECT_EQ(out.Kind("matmul:siblings").size(), 1u) << out.Dump();
  EXPECT_TRUE(out.HasNote("norm prologue not fused: its output is used outside the matmuls")) << out.Notes();
  // The kill switch.
  PipelineRun off = RunText(kNormed, Disabled({"matmul_norm"}));
  EXPECT_TRUE(off.Kind("matmul:norm_siblings").empty() && off.Kind("matmul:norm").empty()) << off.Dump();
  EXPECT_EQ(off.Kind("matmul:siblings").size(), 1u) << off.Dump();
}

// The typed plan the executor consumes: norm, matmuls in GEMV segment order (gate before up even
// when up is written first), the swiglu epilogue; no ropes here.
TEST(FuseMatmul, GroupsCarryTheirPlan) {
  for (bool up_first : {false, true}) {
    PipelineRun r = RunText(testing_graphs::NormedBlock("bf16", 256, 512, false, up_first));
    auto swi = r.Kind("matmul:norm_swiglu");
    ASSERT_EQ(swi.size(), 1u) << r.Dump();
    ASSERT_TRUE(swi[0]->matmul.has_value());
    const MatmulGroupPlan& p = *swi[0]->matmul;
    ASSERT_EQ(p.matmuls.size(), 2u);
    auto out_name = [&](int n) { return r.g.values[r.g.nodes[n].outputs[0]].name; };
    EXPECT_EQ(out_name(p.matmuls[0]), "g") << "up_first=" << up_first;
    EXPECT_EQ(out_name(p.matmuls[1]), "u") << "up_first=" << up_first;
    ASSERT_GE(p.swiglu, 0);
    EXPECT_EQ(r.g.nodes[p.swiglu].op, OpKind::kSwiglu);
    ASSERT_GE(p.norm, 0);
    EXPECT_EQ(r.g.nodes[p.norm].op, OpKind::kAddRmsNorm);
    EXPECT_EQ(p.ropes, (std::vector<int>{-1, -1}));
    auto head = r.Kind("matmul:norm");
    ASSERT_EQ(head.size(), 1u) << r.Dump();
    ASSERT_TRUE(head[0]->matmul.has_value());
    EXPECT_EQ(head[0]->matmul->matmuls.size(), 1u);
    EXPECT_EQ(r.g.nodes[head[0]->matmul->norm].op, OpKind::kRmsNorm);
    for (const auto& grp : r.g.groups)
      EXPECT_EQ(grp.matmul.has_value(), grp.kind.rfind("matmul:", 0) == 0) << grp.kind;
  }
}

TEST(FuseMatmul, FusedGroupsComputeTheSameOnTheCpu) {
  for (const std::string& text : {std::string(kMlp), kNormed}) {
  PipelineRun r = RunText(text);
  for (int64_t t : {1, 3, 12}) {
    const Bindings b{{"T", t}};
    auto inputs = RandomInputs(r.original, b, 11 + t);
    for (auto& [name, h] : inputs)  // weights ~ 1/sqrt(K): activations stay O(1)
      if (name[0] == 'w')
        for (int64_t i = 0; i < h.numel(); ++i) h.set(i, h.get(i) / 16.0);
    auto want = RunGraphCpu(r.original, inputs, {b, false});
    auto got = RunGraphCpu(r.g, inputs, {b, /*fuse_groups=*/true});
    ASSERT_TRUE(want.ok() && got.ok());
    for (const auto& [name, w] : *want) {
      const HostTensor& u = got->at(name);
      double num = 0, den = 0;
      for (int64_t i = 0; i < w.numel(); ++i) {
        num += (w.get(i) - u.get(i)) * (w.get(i) - u.get(i));
        den += w.get(i) * w.get(i);
      }
      ASSERT_GT(den, 0) << name;
      EXPECT_LT(std::sqrt(num / den), 1e-2) << name << " T=" << t;  // bf16: gate/up rounding only
    }
  }
  }
}

}  // namespace
}  // namespace opfuse::testing
