// bench::IgnoredProfileChoices (`opfuse bench e2e`'s check that smart_schedule ran its profile's
// choices): silent where smart followed the profile or the profile agrees with always_fuse, one line
// per group where smart ran always's plan while the profile picks another. Hand-written profiles.
#include "bench/plan_check.h"
#include "matmul_graphs.h"
#include "pass_test_util.h"
#include "scheduler/profile_db.h"

namespace opfuse::testing {
namespace {

using scheduler::ProfileDb;

// NormedBlock(bf16, h 256, head 512): norm_swiglu's key is matmul:norm_swiglu:k256 with cols 1408.
StatusOr<ProfileDb> SwigluProfile(double unfused_us, double library_us) {
  std::string entries;
  for (int m : {1, 2, 4, 8})
    entries += fmt::format(R"({}{{"pattern": "matmul:norm_swiglu:k256", "dtype": "bf16", "shape": {{"rows": {}, "cols": 1408}},
        "variants_us": {{"unfused": {}, "library": {}}}, "samples": 10}})",
                           entries.empty() ? "" : ",", m, unfused_us, library_us);
  return ProfileDb::Parse(fmt::format(R"({{"schema": 1, "device": {{"name": "Test GPU", "sm": "9.0", "driver": "hand-written",
      "copy_gbps": 4000, "launch_us": 2.5}}, "entries": [{}]}})", entries));
}

Graph Compile(const std::string& text, const Bindings& b, const ProfileDb* profile) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  PassContext ctx;
  ctx.bindings = b;
  ctx.profile = profile;
  EXPECT_TRUE(RunPipeline(*g, ctx).ok());
  return *g;
}

TEST(PlanCheck, SmartThatIgnoresItsProfileIsReported) {
  const std::string text = testing_graphs::NormedBlock("bf16", 256, 512, false);
  for (int64_t m : {1, 4, 8}) {
    SCOPED_TRACE(fmt::format("M = {}", m));
    const Bindings b = {{"M", m}};
    const FusionConfig config;
    const Graph always = Compile(text, b, nullptr);
    // The profile declines norm_swiglu (its ops one by one twice as fast): smart follows it.
    auto split = SwigluProfile(5.0, 10.0);
    ASSERT_TRUE(split.ok()) << split.status().message();
    const Graph smart = Compile(text, b, &*split);
    EXPECT_TRUE(bench::IgnoredProfileChoices(always, smart, *split, b, config).empty());
    // An engine that compiled smart without the profile runs always's plan: reported, naming the group.
    const auto ignored = bench::IgnoredProfileChoices(always, always, *split, b, config);
    ASSERT_EQ(ignored.size(), 1u);
    EXPECT_NE(ignored[0].find("matmul:norm_swiglu"), std::string::npos) << ignored[0];
    EXPECT_NE(ignored[0].find("the profile picks ops one by one (library)"), std::string::npos) << ignored[0];
    // The profile keeps the fused group: up to the GEMV's capacity (4 rows) that is one GEMV launch,
    // which always runs only up to kDecodeGemvMaxRows — so at 4 rows always's plan is not the profile's.
    auto fused = SwigluProfile(10.0, 5.0);
    ASSERT_TRUE(fused.ok());
    const Graph smart_fused = Compile(text, b, &*fused);
    EXPECT_TRUE(bench::IgnoredProfileChoices(always, smart_fused, *fused, b, config).empty());
    const auto at_capacity = bench::IgnoredProfileChoices(always, always, *fused, b, config);
    if (m > kDecodeGemvMaxRows && m <= kGemvCapacityRows) {
      ASSERT_EQ(at_capacity.size(), 1u);
      EXPECT_NE(at_capacity[0].find("the profile picks fused library as one GEMV launch"), std::string::npos) << at_capacity[0];
    } else {
      EXPECT_TRUE(at_capacity.empty()) << at_capacity.front();  // the same plan as always's
    }
  }
}

// The cuBLASLt form (gemv_max_rows 0) is a plan of its own: at 1 row the profile picks it, smart
// runs it, and always's plan (one GEMV launch) is reported where smart ran that instead.
TEST(PlanCheck, CublasltFormIsTold) {
  const std::string text = testing_graphs::NormedBlock("bf16", 256, 512, false);
  auto prof = ProfileDb::Parse(R"({"schema": 1, "device": {"name": "Test GPU", "sm": "9.0"}, "entries": [
    {"pattern": "matmul:norm_swiglu:k256", "dtype": "bf16", "shape": {"rows": 1, "cols": 1408},
     "variants_us": {"unfused": 12.0, "library": 10.0, "cublaslt": 6.0}, "samples": 10}]})");
  ASSERT_TRUE(prof.ok()) << prof.status().message();
  const Bindings b = {{"M", 1}};
  const FusionConfig config;
  const Graph always = Compile(text, b, nullptr);
  const Graph smart = Compile(text, b, &*prof);
  EXPECT_TRUE(bench::IgnoredProfileChoices(always, smart, *prof, b, config).empty());
  const auto ignored = bench::IgnoredProfileChoices(always, always, *prof, b, config);
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_NE(ignored[0].find("the profile picks fused library with its matmuls on cuBLASLt"), std::string::npos) << ignored[0];
  int lt = 0;
  for (const auto& grp : smart.groups)
    if (grp.matmul && grp.matmul->gemv_max_rows == 0) {
      ++lt;
      EXPECT_EQ(bench::GroupPlanName(grp), "fused library with its matmuls on cuBLASLt");
    }
  EXPECT_EQ(lt, 1);
}

TEST(PlanCheck, GroupPlanNames) {
  const Graph g = Compile(testing_graphs::NormedBlock("bf16", 256, 512, false), {{"M", 1}}, nullptr);
  int matmul = 0;
  for (const auto& grp : g.groups)
    if (grp.matmul && grp.decision.fuse) {
      ++matmul;
      EXPECT_EQ(bench::GroupPlanName(grp), fmt::format("fused library gemv<={}", kDecodeGemvMaxRows));
    }
  EXPECT_EQ(matmul, 3);
}

}  // namespace
}  // namespace opfuse::testing
