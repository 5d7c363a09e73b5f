// Pass fuse_collective: an all_reduce used only by the add_rms_norm after it joins that group as
// "collective:all_reduce_add_rms_norm"; every condition that keeps them apart, with its note.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace opfuse::testing {
namespace {

// A row-parallel output summed over 2 ranks, added to the residual and normalised ({{EXTRA}}: more).
std::string Layer(const std::string& extra = "", int world = 2, const std::string& outputs = "y, h") {
  return R"(graph tp
input part: bf16[T, 2048]
input residual: bf16[T, 2048]
param weight: bf16[2048]
eps = constant() {value=1e-05}
s = all_reduce(part) {world=)" + std::to_string(world) + R"(}
h = add(residual, s)
h2 = mul(h, h)
ms = mean(h2)
ms_eps = add(ms, eps)
inv = rsqrt(ms_eps)
hn = mul(h, inv)
y = mul(hn, weight)
)" + extra + "output " + outputs + "\n";
}

const FusionGroup* Find(const Graph& g, const std::string& kind) {
  for (const auto& grp : g.groups)
    if (grp.kind == kind) return &grp;
  return nullptr;
}

bool Noted(const PipelineRun& r, const std::string& text) {
  for (const auto& n : r.ctx.notes)
    if (n.pass == "fuse_collective" && n.ToString().find(text) != std::string::npos) return true;
  return false;
}

TEST(FuseCollective, AllReduceJoinsTheAddRmsNormAfterIt) {
  PipelineRun r = RunText(Layer(), {}, {{"T", 8}});
  const FusionGroup* grp = Find(r.g, "collective:all_reduce_add_rms_norm");
  ASSERT_NE(grp, nullptr) << r.Dump();
  EXPECT_EQ(r.Ops(*grp), "all_reduce,add_rms_norm");
  EXPECT_TRUE(grp->decision.fuse);
  EXPECT_NE(grp->decision.reason.find("all_reduce 's' -> add_rms_norm 'y'"), std::string::npos) << grp->decision.reason;
  EXPECT_EQ(grp->variant, Variant::kLibrary);  // no JIT form; no group is left for the all_reduce alone
  EXPECT_EQ(grp->name, "comm_all_reduce_add_rms_norm_bf16_h2048");
  EXPECT_EQ(Find(r.g, "pattern:add_rms_norm"), nullptr);
  for (const auto& g : r.g.groups) EXPECT_NE(r.Ops(g), "all_reduce") << r.Dump();
  // A JIT request is substituted, never run.
  PipelineRun jit = RunText(Layer(), {}, {{"T", 8}}, Variant::kJit);
  const FusionGroup* j = Find(jit.g, "collective:all_reduce_add_rms_norm");
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->variant, Variant::kLibrary);
}

TEST(FuseCollective, KeptApartWhereTheSumIsUsedElsewhereOrTheWorldIsOne) {
  // The all-reduced value read by another op: the add_rms_norm stays a pattern group.
  PipelineRun other = RunText(Layer("z = neg(s)\n", 2, "y, h, z"), {}, {{"T", 8}});
  EXPECT_EQ(Find(other.g, "collective:all_reduce_add_rms_norm"), nullptr) << other.Dump();
  EXPECT_NE(Find(other.g, "pattern:add_rms_norm"), nullptr);
  EXPECT_TRUE(Noted(other, "the all-reduced value has other uses"));
  // ... or a graph output.
  PipelineRun out = RunText(Layer("", 2, "y, h, s"), {}, {{"T", 8}});
  EXPECT_EQ(Find(out.g, "collective:all_reduce_add_rms_norm"), nullptr);
  // world = 1 is the identity: nothing to fuse.
  PipelineRun one = RunText(Layer("", 1), {}, {{"T", 8}});
  EXPECT_EQ(Find(one.g, "collective:all_reduce_add_rms_norm"), nullptr);
  // Switched off, and with fusion off.
  FusionConfig off;
  off.disabled.insert("fuse_collective");
  EXPECT_EQ(Find(RunText(Layer(), off, {{"T", 8}}).g, "collective:all_reduce_add_rms_norm"), nullptr);
  FusionConfig never;
  never.enable_fusion = false;
  EXPECT_EQ(Find(RunText(Layer(), never, {{"T", 8}}).g, "collective:all_reduce_add_rms_norm"), nullptr);
}

}  // namespace
}  // namespace opfuse::testing
