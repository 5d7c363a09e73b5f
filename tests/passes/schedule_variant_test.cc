// The schedule pass resolves the requested variant (PassContext::variant, the executor's option)
// per group: applied where the group has it, substituted with a reason where not — the executor
// runs FusionGroup::variant and never re-picks.
#include "pass_test_util.h"

namespace opfuse::testing {
namespace {

// A generic group (exp, mul), a pattern group (rms_norm: its output is also a graph output, so it
// stays outside the GEMV group), a GEMV group (two sibling matmuls).
constexpr const char* kMixed = R"(graph mixed
input x: bf16[T, 256]
param w: bf16[256]
param wa: bf16[128, 256]
param wb: bf16[64, 256]
a = exp(x)
c = mul(a, a)
h = rms_norm(x, w) {eps=1e-05}
p = matmul(h, wa) {transpose_b=1}
q = matmul(h, wb) {transpose_b=1}
output p, q, c, h
)";

const FusionGroup* Find(const PipelineRun& r, const std::string& prefix) {
  for (const auto& grp : r.g.groups)
    if (grp.kind.rfind(prefix, 0) == 0) return &grp;
  return nullptr;
}
const scheduler::FusionChoice& ChoiceOf(const PipelineRun& r, const FusionGroup* grp) {
  return r.ctx.choices.at(static_cast<size_t>(grp - r.g.groups.data()));
}

TEST(ScheduleVariant, AutoKeepsTheSchedulersPick) {
  PipelineRun r = RunText(kMixed, {}, {{"T", 64}});
  const FusionGroup* gen = Find(r, "generic");
  const FusionGroup* pat = Find(r, "pattern:rms_norm");
  const FusionGroup* mm = Find(r, "matmul:");
  ASSERT_TRUE(gen && pat && mm) << r.Dump();
  EXPECT_EQ(gen->variant, Variant::kJit);
  EXPECT_EQ(pat->variant, Variant::kLibrary);
  EXPECT_EQ(mm->variant, Variant::kLibrary);
  for (const auto& c : r.ctx.choices) EXPECT_TRUE(c.substitution.empty()) << c.substitution;
}

TEST(ScheduleVariant, LibraryRequestedOnAGenericGroupRunsJit) {
  PipelineRun r = RunText(kMixed, {}, {{"T", 64}}, Variant::kLibrary);
  const FusionGroup* gen = Find(r, "generic");
  const FusionGroup* pat = Find(r, "pattern:rms_norm");
  ASSERT_TRUE(gen && pat) << r.Dump();
  EXPECT_EQ(gen->variant, Variant::kJit);
  EXPECT_EQ(ChoiceOf(r, gen).substitution, "library -> jit: no library kernel for a generic group");
  EXPECT_EQ(pat->variant, Variant::kLibrary);
  EXPECT_TRUE(ChoiceOf(r, pat).substitution.empty());
}

TEST(ScheduleVariant, JitRequestedOnAMatmulGroupRunsTheGemv) {
  PipelineRun r = RunText(kMixed, {}, {{"T", 64}}, Variant::kJit);
  const FusionGroup* mm = Find(r, "matmul:");
  const FusionGroup* pat = Find(r, "pattern:rms_norm");
  ASSERT_TRUE(mm && pat) << r.Dump();
  EXPECT_EQ(mm->variant, Variant::kLibrary);
  EXPECT_EQ(ChoiceOf(r, mm).substitution, "jit -> library: a matmul group runs the GEMV library kernel (no JIT form)");
  EXPECT_EQ(pat->variant, Variant::kJit);
  EXPECT_TRUE(ChoiceOf(r, pat).substitution.empty());
}

TEST(ScheduleVariant, JitSingleOpsOnlyWhenAsked) {
  constexpr const char* kOne = "graph one\ninput x: f32[T, 300]\ny = exp(x)\noutput y\n";
  PipelineRun plain = RunText(kOne, {}, {{"T", 4}}, Variant::kJit);
  ASSERT_EQ(plain.g.groups.size(), 1u) << plain.Dump();
  EXPECT_FALSE(plain.g.groups[0].decision.fuse);
  EXPECT_NE(plain.g.groups[0].variant, Variant::kJit);
  PipelineRun single = RunText(kOne, {}, {{"T", 4}}, Variant::kJit, /*jit_single_ops=*/true);
  ASSERT_EQ(single.g.groups.size(), 1u);
  EXPECT_EQ(single.g.groups[0].variant, Variant::kJit);
  EXPECT_TRUE(single.ctx.choices[0].substitution.empty());
}

}  // namespace
}  // namespace opfuse::testing
