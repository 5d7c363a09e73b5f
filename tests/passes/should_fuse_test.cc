// should_fuse (src/scheduler/should_fuse.h) and the schedule pass with a profile: recorded profiles
// (tests/data/profiles/) drive the decisions — exact hit, log(rows) interpolation, nearest point
// within 2x, the 3% margin, missing data -> cost model (exact bytes and times), no profile -> the
// config rules as before — and compile cost: an uncached JIT kernel runs the fallback while the
// BackgroundCompiler compiles it (NVRTC, sm_90, no GPU needed), then is swapped in.
#include <filesystem>
#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "jit/jit_compiler.h"
#include "jit/nvrtc_compiler.h"
#include "pass_test_util.h"
#include "jit/background_compiler.h"
#include "../matmul_graphs.h"
#include "scheduler/should_fuse.h"

namespace opfuse::testing {
namespace {

using scheduler::DecisionSource;
using scheduler::FusionChoice;
using scheduler::ProfileDb;
using scheduler::Variant;

const ProfileDb& Profile() {
  static const ProfileDb db = [] {
    auto p = ProfileDb::Load(std::string(OPFUSE_SOURCE_DIR) + "/tests/data/profiles/h200_tinyllama_bf16.json");
    if (!p.ok()) throw StatusError(p.status());
    return *p;
  }();
  return db;
}

const char* kMulExp = "graph mul_exp\ninput x: f32[T, C]\ninput y: f32[T, C]\na = mul(x, y)\nb = exp(a)\noutput b\n";
std::string MulExp(int cols) {
  std::string s = kMulExp;
  for (size_t at; (at = s.find("C]")) != std::string::npos;) s.replace(at, 1, std::to_string(cols));
  return s;
}

// Runs the pipeline (no profile) and asks should_fuse about the first group of `kind`.
struct Asked {
  PipelineRun run;
  FusionChoice choice;
};
Asked Ask(const std::string& text, const std::string& kind, int64_t T, scheduler::ShouldFuseOptions opts = {}) {
  Asked a;
  a.run = RunText(text, {}, {{"T", T}});
  auto groups = a.run.Kind(kind);
  EXPECT_EQ(groups.size(), 1u) << a.run.Dump();
  if (groups.empty()) {
    a.choice.evidence = "no group of kind " + kind;  // the EXPECTs above already failed
    return a;
  }
  if (!opts.profile) opts.profile = &Profile();
  // The schedule pass already replaced the passes' verdict; should_fuse starts from the fusion
  // passes' "fuse", so hand it the group as fuse_patterns / fuse_generic left it.
  FusionGroup grp = *groups[0];
  grp.decision = FusionDecision::Yes("matched");
  a.choice = scheduler::ShouldFuse(a.run.g, grp, a.run.ctx.bindings, a.run.ctx.config, opts);
  return a;
}

TEST(ShouldFuse, ExactProfileHit) {
  auto a = Ask(Example("add_rms_norm.ofg"), "pattern:add_rms_norm", 32);
  EXPECT_TRUE(a.choice.decision.fuse) << a.choice.decision.reason;
  EXPECT_EQ(a.choice.variant, Variant::kLibrary);
  EXPECT_EQ(a.choice.source, DecisionSource::kProfile);
  EXPECT_NEAR(a.choice.expected_us_saved, 6.1 - 2.0, 1e-9);
  EXPECT_NE(a.choice.evidence.find("profile point add_rms_norm bf16 cols=2048 rows=32"), std::string::npos)
      << a.choice.evidence;
}

TEST(ShouldFuse, InterpolatesInLogRows) {
  // rows=64 lies halfway (in log2) between 32 and 128: unfused 7.1, library 2.5, jit 2.4 -> jit.
  auto a = Ask(Example("add_rms_norm.ofg"), "pattern:add_rms_norm", 64);
  EXPECT_EQ(a.choice.variant, Variant::kJit) << a.choice.decision.reason;
  EXPECT_EQ(a.choice.source, DecisionSource::kProfile);
  EXPECT_NEAR(a.choice.expected_us_saved, 7.1 - 2.4, 1e-9);
  EXPECT_NE(a.choice.evidence.find("interpolated in log(rows) between add_rms_norm bf16 cols=2048 rows=32 and rows=128 (t=0.50)"),
            std::string::npos)
      << a.choice.evidence;
  // rows=8: t = log(8/1)/log(32/1) = 0.6 between rows 1 and 32.
  auto b = Ask(Example("add_rms_norm.ofg"), "pattern:add_rms_norm", 8);
  EXPECT_EQ(b.choice.variant, Variant::kLibrary);
  EXPECT_NEAR(b.choice.expected_us_saved, 6.0 + 0.6 * 0.1 - 2.0, 1e-9);
}

TEST(ShouldFuse, NearestPointWithinFactorTwoScaledAboveCostModelBelow) {
  auto near = Ask(Example("add_rms_norm.ofg"), "pattern:add_rms_norm", 256);  // 2 x 128: nearest point
  EXPECT_EQ(near.choice.source, DecisionSource::kProfile);
  EXPECT_NE(near.choice.evidence.find("nearest profile point add_rms_norm bf16 cols=2048 rows=128 (asked rows=256"),
            std::string::npos);
  EXPECT_NEAR(near.choice.expected_us_saved, 8.1 - 2.6, 1e-9);
  // Above the range: the largest point's times scaled by rows, so its ranking (and variant) holds.
  auto far = Ask(Example("add_rms_norm.ofg"), "pattern:add_rms_norm", 1024);
  EXPECT_EQ(far.choice.source, DecisionSource::kProfile);
  EXPECT_EQ(far.choice.variant, near.choice.variant);
  EXPECT_NE(far.choice.evidence.find("profile point add_rms_norm bf16 cols=2048 rows=128 scaled by rows to rows=1024"),
            std::string::npos)
      << far.choice.evidence;
  EXPECT_NEAR(far.choice.expected_us_saved, (8.1 - 2.6) * 1024 / 128, 1e-9);
  auto below = Ask(Example("swiglu.ofg"), "pattern:swiglu", 2);  // smallest measured rows=4 = 2 x 2
  EXPECT_EQ(below.choice.source, DecisionSource::kProfile);
  auto too_far_below = Ask(Example("swiglu.ofg"), "pattern:swiglu", 1);
  EXPECT_EQ(too_far_below.choice.source, DecisionSource::kCostModel);
  EXPECT_NE(too_far_below.choice.evidence.find("below the profiled range"), std::string::npos);
}

TEST(ShouldFuse, MarginKeepsUnfusedWhenFusedIsOnlyTwoPercentBetter) {
  // swiglu rows=4: unfused 5.0, library 4.9 (2% better) -> unfused under the default 3% margin.
  auto a = Ask(Example("swiglu.ofg"), "pattern:swiglu", 4);
  EXPECT_FALSE(a.choice.decision.fuse);
  EXPECT_EQ(a.choice.variant, Variant::kUnfused);
  EXPECT_EQ(a.choice.source, DecisionSource::kProfile);
  EXPECT_EQ(a.choice.expected_us_saved, 0);
  EXPECT_NE(a.choice.decision.reason.find("best fused (library) saves 0.10 us (2.0%), not more than margin 3%"),
            std::string::npos)
      << a.choice.decision.reason;
  scheduler::ShouldFuseOptions loose;
  loose.margin = 0.01;
  auto b = Ask(Example("swiglu.ofg"), "pattern:swiglu", 4, loose);
  EXPECT_TRUE(b.choice.decision.fuse);
  EXPECT_EQ(b.choice.variant, Variant::kLibrary);
  EXPECT_NEAR(b.choice.expected_us_saved, 0.1, 1e-9);
}

TEST(ShouldFuse, MissingProfileDataFallsToTheCostModel) {
  // mul -> exp over f32[64, 512]: not in the profile (it has cols=1024). N = 32768 elements.
  // Unfused: mul reads 2 and writes 1 tensor, exp reads 1 and writes 1: 5 N x 4 B, 2 launches;
  // fused: x, y in and b out: 3 N x 4 B, 1 launch. Constants from the profile: 4000 GB/s, 2.5 us.
  auto a = Ask(MulExp(512), "generic", 64);
  EXPECT_EQ(a.choice.source, DecisionSource::kCostModel) << a.choice.decision.reason;
  const double n = 64 * 512, bpus = 4000 * 1e3;
  const double unfused = 5 * n * 4 / bpus + 2 * 2.5, fused = 3 * n * 4 / bpus + 2.5;
  EXPECT_EQ(a.choice.variant, Variant::kJit);
  EXPECT_NEAR(a.choice.expected_us_saved, unfused - fused, 1e-9);
  EXPECT_NE(a.choice.evidence.find("profile has no entry for generic:mul_exp f32 cols=512"), std::string::npos)
      << a.choice.evidence;
  EXPECT_NE(a.choice.evidence.find("4000 GB/s measured, 2.5 us/launch measured"), std::string::npos);

  auto est = scheduler::EstimateCost(a.run.g, *a.run.Kind("generic")[0], a.run.ctx.bindings,
                                     scheduler::DeviceConstants::FromDevice(Profile().device));
  ASSERT_TRUE(est.has_value());
  EXPECT_EQ(est->unfused_bytes, int64_t(5 * n * 4));
  EXPECT_EQ(est->fused_bytes, int64_t(3 * n * 4));
  EXPECT_EQ(est->unfused_launches, 2);

  // A profile without measured constants: the reason says the defaults were used.
  ProfileDb bare;
  bare.device = {"NVIDIA H200", "9.0", "", 0, 0};
  scheduler::ShouldFuseOptions opts;
  opts.profile = &bare;
  auto b = Ask(MulExp(512), "generic", 64, opts);
  EXPECT_EQ(b.choice.source, DecisionSource::kCostModel);
  EXPECT_NE(b.choice.evidence.find("default (not measured)"), std::string::npos) << b.choice.evidence;

  // A pattern group is costed as its decomposition: bf16 add_rms_norm writes out to 9 launches (add,
  // cast up, mul, mean, add eps, rsqrt, mul, cast down, mul by the weight). (A profile without the
  // series: above a series' range its largest point scales instead, NearestPointWithin...)
  auto c = Ask(Example("add_rms_norm.ofg"), "pattern:add_rms_norm", 4096, opts);
  EXPECT_EQ(c.choice.source, DecisionSource::kCostModel);
  EXPECT_NE(c.choice.decision.reason.find("9 launches"), std::string::npos) << c.choice.decision.reason;
  EXPECT_EQ(c.choice.variant, Variant::kLibrary);
}

TEST(ShouldFuse, CostModelCanSayNo) {
  // A tiny launch cost and a slow copy: the fused kernel still moves fewer bytes, so make the
  // group one whose fused form moves as much as unfused — a generic group whose intermediate
  // escapes (a is also a graph output): fused bytes 4 N, unfused 5 N, launches cost nothing.
  const char* text = "graph g\ninput x: f32[T, 512]\ninput y: f32[T, 512]\na = mul(x, y)\nb = exp(a)\noutput a, b\n";
  scheduler::ShouldFuseOptions opts;
  opts.constants = scheduler::DeviceConstants{1000, 0.0, "test constants"};
  opts.margin = 0.5;  // fused must save more than half: 4N vs 5N saves 20%
  auto a = Ask(text, "generic", 64, opts);
  EXPECT_EQ(a.choice.source, DecisionSource::kCostModel);
  EXPECT_FALSE(a.choice.decision.fuse) << a.choice.decision.reason;
  EXPECT_EQ(a.choice.variant, Variant::kUnfused);
  EXPECT_NE(a.choice.decision.reason.find("not more than margin 50%"), std::string::npos) << a.choice.decision.reason;
}

TEST(ShouldFuse, ConfigRulesComeFirstAndUnboundRowsSkipTheProfile) {
  FusionConfig off;
  off.enable_fusion = false;
  auto r = RunText(Example("add_rms_norm.ofg"), {}, {{"T", 32}});  // grouped with fusion on, then asked with it off
  ASSERT_EQ(r.Kind("pattern:add_rms_norm").size(), 1u);
  FusionGroup grp = *r.Kind("pattern:add_rms_norm")[0];
  grp.decision = FusionDecision::Yes("matched");
  scheduler::ShouldFuseOptions opts;
  opts.profile = &Profile();
  auto c = scheduler::ShouldFuse(r.g, grp, r.ctx.bindings, off, opts);
  EXPECT_EQ(c.source, DecisionSource::kConfig);
  EXPECT_FALSE(c.decision.fuse);
  EXPECT_EQ(c.decision.reason, "fusion disabled (enable_fusion=false)");

  auto u = RunText(Example("add_rms_norm.ofg"));  // T unbound
  ASSERT_EQ(u.Kind("pattern:add_rms_norm").size(), 1u);
  FusionGroup ug = *u.Kind("pattern:add_rms_norm")[0];
  ug.decision = FusionDecision::Yes("matched");
  auto uc = scheduler::ShouldFuse(u.g, ug, u.ctx.bindings, u.ctx.config, opts);
  EXPECT_EQ(uc.source, DecisionSource::kConfig);
  EXPECT_TRUE(uc.decision.fuse);
  EXPECT_NE(uc.decision.reason.find("profile not consulted: rows unknown"), std::string::npos) << uc.decision.reason;
}

// Without a profile a row-pattern group runs its library kernel, except where its rows are off the
// 16-byte grid (columns x element size not a multiple of 16) within the register path's width: there
// the JIT (should_fuse.cc, PatternOnTheJit). The grid depends on the dtype (4996 columns: bf16 off,
// f32 on); a mask tensor, a wider row (for the softmax: past 2048 columns), a symbolic width or
// another pattern keeps the library — but geglu's erf form, which takes the JIT at every shape.
TEST(ShouldFuse, OffGridRowPatternsAndGegluRunTheJitWithoutAProfile) {
  struct Case {
    const char* name;
    std::string text;
    std::string kind;
    Variant want;
  };
  auto norm = [](const std::string& dt, const std::string& cols) {
    return "graph g\ninput x: " + dt + "[T, " + cols + "]\nparam w: " + dt + "[" + cols + "]\ny = rms_norm(x, w) {eps=1e-5}\noutput y\n";
  };
  const std::vector<Case> cases = {
      {"rms_norm bf16 4999", norm("bf16", "4999"), "pattern:rms_norm", Variant::kJit},
      {"rms_norm bf16 4996", norm("bf16", "4996"), "pattern:rms_norm", Variant::kJit},
      {"rms_norm f32 4996 (on the grid)", norm("f32", "4996"), "pattern:rms_norm", Variant::kLibrary},
      {"rms_norm bf16 4096", norm("bf16", "4096"), "pattern:rms_norm", Variant::kLibrary},
      {"rms_norm bf16 16383", norm("bf16", "16383"), "pattern:rms_norm", Variant::kJit},
      {"rms_norm bf16 16385 (wider than the register path)", norm("bf16", "16385"), "pattern:rms_norm", Variant::kLibrary},
      {"add_rms_norm f16 839",
       "graph g\ninput x: f16[T, 839]\ninput r: f16[T, 839]\nparam w: f16[839]\ny, h = add_rms_norm(x, r, w)\noutput y, h\n",
       "pattern:add_rms_norm", Variant::kJit},
      {"layer_norm bf16 1535",
       "graph g\ninput x: bf16[T, 1535]\nparam w: bf16[1535]\nparam b: bf16[1535]\ny = layer_norm(x, w, b) {eps=1e-5}\noutput y\n",
       "pattern:layer_norm", Variant::kJit},
      {"softmax f32 999", "graph g\ninput x: f32[T, 999]\ny = softmax(x) {scale=0.5}\noutput y\n", "pattern:softmax",
       Variant::kJit},
      {"softmax bf16 4999 (wider than the softmax's JIT rule)",
       "graph g\ninput x: bf16[T, 4999]\ny = softmax(x) {scale=0.5}\noutput y\n", "pattern:softmax", Variant::kLibrary},
      {"causal softmax bf16 1001", "graph g\ninput x: bf16[T, 1001]\ny = softmax(x) {causal=1}\noutput y\n",
       "pattern:softmax", Variant::kJit},
      {"softmax f32 999 with a mask",
       "graph g\ninput x: f32[T, 999]\ninput m: f32[T, 999]\ny = softmax(x, m)\noutput y\n", "pattern:softmax",
       Variant::kLibrary},
      {"rms_norm bf16 C (symbolic width)", norm("bf16", "C"), "pattern:rms_norm", Variant::kLibrary},
      {"geglu bf16 4096 (erf form: the JIT at every shape)",
       "graph g\ninput a: bf16[T, 4096]\ninput b: bf16[T, 4096]\ny = geglu(a, b)\noutput y\n", "pattern:geglu", Variant::kJit},
      {"geglu bf16 4096 (tanh form)",
       "graph g\ninput a: bf16[T, 4096]\ninput b: bf16[T, 4096]\ny = geglu(a, b) {approximate=\"tanh\"}\noutput y\n",
       "pattern:geglu", Variant::kLibrary},
      {"swiglu bf16 4999 (not a row pattern)",
       "graph g\ninput a: bf16[T, 4999]\ninput b: bf16[T, 4999]\ns = silu(a)\ny = mul(s, b)\noutput y\n", "pattern:swiglu",
       Variant::kLibrary},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Bindings bind = {{"T", 4096}};
    if (c.text.find("[C]") != std::string::npos) bind["C"] = 4999;
    auto r = RunText(c.text, {}, bind);
    auto groups = r.Kind(c.kind);
    ASSERT_EQ(groups.size(), 1u) << r.Dump();
    EXPECT_TRUE(groups[0]->decision.fuse) << groups[0]->decision.reason;
    EXPECT_EQ(groups[0]->variant, c.want) << groups[0]->decision.reason;
    const bool says = groups[0]->decision.reason.find("off the 16-byte grid") != std::string::npos ||
                      groups[0]->decision.reason.find("geglu: the JIT kernel") != std::string::npos;
    EXPECT_EQ(says, c.want == Variant::kJit) << groups[0]->decision.reason;
  }
  // With a profile that has no series for the group, the cost model's fused candidate is the JIT too.
  ProfileDb bare;
  bare.device = {"NVIDIA H200", "9.0", "", 0, 0};
  scheduler::ShouldFuseOptions opts;
  opts.profile = &bare;
  auto a = Ask(norm("bf16", "4999"), "pattern:rms_norm", 4096, opts);
  EXPECT_EQ(a.choice.source, DecisionSource::kCostModel);
  EXPECT_EQ(a.choice.variant, Variant::kJit) << a.choice.decision.reason;
  EXPECT_NE(a.choice.decision.reason.find("off the 16-byte grid"), std::string::npos) << a.choice.decision.reason;
  // ... and while that JIT kernel is not cached, the library kernel runs.
  opts.jit_cached = false;
  auto b = Ask(norm("bf16", "4999"), "pattern:rms_norm", 4096, opts);
  EXPECT_TRUE(b.choice.compile_in_background);
  EXPECT_EQ(b.choice.run_now, Variant::kLibrary);
}

TEST(SchedulePass, UsesTheProfileWhenGivenAndNothingElseChangesWithout) {
  auto text = Example("llama_decoder_layer.ofg");
  // fuse_matmul off: it would take the swiglu into a matmul group, which the profile does not judge.
  auto plain = RunText(text, Disabled({"fuse_matmul"}), {{"T", 4}});
  // With a profile: the swiglu group at rows=4 is the 2% case -> unfused; add_rms_norm is fused.
  PipelineRun with;
  auto parsed = ParseGraph(text);
  ASSERT_TRUE(parsed.ok());
  with.g = *parsed;
  with.ctx.config = Disabled({"fuse_matmul"});
  with.ctx.bindings = {{"T", 4}};
  with.ctx.profile = &Profile();
  ASSERT_TRUE(RunPipeline(with.g, with.ctx).ok());
  ASSERT_EQ(with.ctx.choices.size(), with.g.groups.size());
  ASSERT_EQ(plain.g.groups.size(), with.g.groups.size());
  auto swiglu = with.Kind("pattern:swiglu");
  ASSERT_EQ(swiglu.size(), 1u);
  EXPECT_FALSE(swiglu[0]->decision.fuse) << swiglu[0]->decision.reason;
  EXPECT_EQ(swiglu[0]->variant, Variant::kUnfused);
  EXPECT_TRUE(plain.Kind("pattern:swiglu")[0]->decision.fuse);
  EXPECT_EQ(plain.Kind("pattern:swiglu")[0]->variant, Variant::kLibrary);
  for (size_t i = 0; i < plain.g.groups.size(); ++i) {
    EXPECT_EQ(plain.ctx.choices[i].source, DecisionSource::kConfig);  // no profile: config rules only
    if (with.ctx.choices[i].source == DecisionSource::kConfig) {
      EXPECT_EQ(with.g.groups[i].variant, plain.g.groups[i].variant) << i;
      EXPECT_EQ(with.g.groups[i].decision.reason, plain.g.groups[i].decision.reason) << i;
    }
  }
  auto add = with.Kind("pattern:add_rms_norm");
  ASSERT_EQ(add.size(), 1u);
  EXPECT_TRUE(add[0]->decision.fuse);
  EXPECT_NE(add[0]->decision.reason.find("interpolated in log(rows)"), std::string::npos) << add[0]->decision.reason;
}

// fuse_matmul's groups are the scheduler's choice too (issue 31): with a profile point for the group
// (its kind is the pattern; cols its widest output), the fused group runs where it beats its ops one
// by one by more than the margin, else the ops run one by one on their own library kernels (the group
// not fused, variant library: the executor's library nodes); without a profile, or where it has no
// point for the group, the fused group. So smart (a profile) and always (none) run different plans
// exactly where the profile says, per row count.
TEST(SchedulePass, MatmulGroupsFollowTheProfile) {
  const std::string text = testing_graphs::NormedBlock("bf16", 256, 512, false);  // gate/up [M, 704]: key cols 1408
  auto prof = ProfileDb::Parse(R"({"schema": 1,
    "device": {"name": "NVIDIA H200", "sm": "9.0", "driver": "test fixture", "copy_gbps": 4000, "launch_us": 2.5},
    "entries": [
      {"pattern": "matmul:norm_swiglu:k256", "dtype": "bf16", "shape": {"rows": 1, "cols": 1408},
       "variants_us": {"unfused": 12.0, "library": 6.0}, "samples": 10},
      {"pattern": "matmul:norm_swiglu:k256", "dtype": "bf16", "shape": {"rows": 8, "cols": 1408},
       "variants_us": {"unfused": 9.0, "library": 12.0}, "samples": 10},
      {"pattern": "matmul:norm:k256", "dtype": "bf16", "shape": {"rows": 8, "cols": 512},
       "variants_us": {"unfused": 10.0, "library": 9.9}, "samples": 10}]})");
  ASSERT_TRUE(prof.ok()) << prof.status().message();
  for (int64_t m : {1, 8}) {
    SCOPED_TRACE(fmt::format("M = {}", m));
    PipelineRun always = RunText(text, {}, {{"M", m}});
    PipelineRun smart;
    auto parsed = ParseGraph(text);
    ASSERT_TRUE(parsed.ok());
    smart.g = *parsed;
    smart.ctx.bindings = {{"M", m}};
    smart.ctx.profile = &*prof;
    ASSERT_TRUE(RunPipeline(smart.g, smart.ctx).ok());
    ASSERT_EQ(smart.g.groups.size(), always.g.groups.size());
    for (const char* kind : {"matmul:norm_swiglu", "matmul:norm_siblings", "matmul:norm"}) {
      SCOPED_TRACE(kind);
      ASSERT_EQ(always.Kind(kind).size(), 1u) << always.Dump();
      ASSERT_EQ(smart.Kind(kind).size(), 1u) << smart.Dump();
      const FusionGroup& a = *always.Kind(kind)[0];
      const FusionGroup& s = *smart.Kind(kind)[0];
      EXPECT_TRUE(a.decision.fuse) << a.decision.reason;  // always: the fused group
      EXPECT_EQ(a.variant, Variant::kLibrary);
      EXPECT_EQ(s.variant, Variant::kLibrary);  // fused group, or its ops' library kernels
      // M = 8: norm_swiglu's ops one by one are faster by 25 %; norm's by 1 %, inside the margin:
      // the fused group stays (it is declined only for more than the margin)
      const bool ops_one_by_one = m == 8 && std::string(kind) == "matmul:norm_swiglu";
      EXPECT_EQ(s.decision.fuse, !ops_one_by_one) << s.decision.reason;
      // the GEMV's rows: the default for always; the GEMV's capacity where the profile kept the group
      ASSERT_TRUE(a.matmul.has_value());
      ASSERT_TRUE(s.matmul.has_value());
      EXPECT_EQ(a.matmul->gemv_max_rows, kDecodeGemvMaxRows);
      const bool measured_fused = std::string(kind) == "matmul:norm_swiglu" ? m == 1 : std::string(kind) == "matmul:norm" && m == 8;
      EXPECT_EQ(s.matmul->gemv_max_rows, measured_fused ? kGemvCapacityRows : kDecodeGemvMaxRows) << s.decision.reason;
      if (std::string(kind) == "matmul:norm_swiglu") {
        EXPECT_NE(s.decision.reason.find(m == 8 ? "ops one by one 9.00 us, fused group 12.00 us" : "ops one by one 12.00 us, fused group 6.00 us"),
                  std::string::npos) << s.decision.reason;
        EXPECT_NE(s.decision.reason.find(fmt::format("profile point matmul:norm_swiglu:k256 bf16 cols=1408 rows={}", m)), std::string::npos)
            << s.decision.reason;
      } else if (std::string(kind) == "matmul:norm" && m == 8) {
        // measured, but 1 % is inside the margin: the fused group
        EXPECT_NE(s.decision.reason.find("the fused group (its ops one by one save no more than margin 3%)"), std::string::npos)
            << s.decision.reason;
      } else {
        EXPECT_NE(s.decision.reason.find("no cost model for matmul groups: the fused group"), std::string::npos) << s.decision.reason;
      }
    }
  }
}

// The third form of a matmul group (issue 31): its matmuls on cuBLASLt with the norm and SwiGLU
// kernels around them, measured where the others run the GEMV (up to kDecodeGemvMaxRows rows). Where it
// beats the fused group by more than the margin and is faster than the ops one by one, the group is
// kept with gemv_max_rows 0 (the executor's member-by-member path, matmuls on cuBLASLt); where the ops
// one by one are faster still, they win; above kDecodeGemvMaxRows rows a cublaslt time is not used
// (the ops one by one are that form there); within the margin the fused group stays.
TEST(SchedulePass, MatmulGroupsTakeTheirCublasltFormWhereMeasuredFaster) {
  const std::string text = testing_graphs::NormedBlock("bf16", 256, 512, false);  // gate/up: key cols 1408
  auto prof = ProfileDb::Parse(R"({"schema": 1,
    "device": {"name": "NVIDIA H200", "sm": "9.0", "driver": "test fixture"},
    "entries": [
      {"pattern": "matmul:norm_swiglu:k256", "dtype": "bf16", "shape": {"rows": 1, "cols": 1408},
       "variants_us": {"unfused": 12.0, "library": 10.0, "cublaslt": 8.0}, "samples": 10},
      {"pattern": "matmul:norm_swiglu:k256", "dtype": "bf16", "shape": {"rows": 2, "cols": 1408},
       "variants_us": {"unfused": 7.0, "library": 10.0, "cublaslt": 8.0}, "samples": 10},
      {"pattern": "matmul:norm_swiglu:k256", "dtype": "bf16", "shape": {"rows": 4, "cols": 1408},
       "variants_us": {"unfused": 12.0, "library": 10.0, "cublaslt": 1.0}, "samples": 10},
      {"pattern": "matmul:norm:k256", "dtype": "bf16", "shape": {"rows": 1, "cols": 512},
       "variants_us": {"unfused": 12.0, "library": 10.0, "cublaslt": 9.9}, "samples": 10}]})");
  ASSERT_TRUE(prof.ok()) << prof.status().message();
  struct Want { int64_t m; const char* kind; bool fuse; int64_t gemv_rows; const char* says; };
  for (const Want& w : std::vector<Want>{
           {1, "matmul:norm_swiglu", true, 0, "its matmuls on cuBLASLt save 2.00 us (20.0%) > margin 3%"},
           {2, "matmul:norm_swiglu", false, kDecodeGemvMaxRows, "its ops one by one save 3.00 us (30.0%)"},
           {4, "matmul:norm_swiglu", true, kGemvCapacityRows, "the fused group (its ops one by one save no more"},
           {1, "matmul:norm", true, kGemvCapacityRows, "the fused group (its ops one by one and its matmuls on cuBLASLt save no more"}}) {
    SCOPED_TRACE(fmt::format("M = {} {}", w.m, w.kind));
    PipelineRun smart;
    auto parsed = ParseGraph(text);
    ASSERT_TRUE(parsed.ok());
    smart.g = *parsed;
    smart.ctx.bindings = {{"M", w.m}};
    smart.ctx.profile = &*prof;
    ASSERT_TRUE(RunPipeline(smart.g, smart.ctx).ok());
    ASSERT_EQ(smart.Kind(w.kind).size(), 1u) << smart.Dump();
    const FusionGroup& s = *smart.Kind(w.kind)[0];
    EXPECT_EQ(s.decision.fuse, w.fuse) << s.decision.reason;
    EXPECT_EQ(s.variant, Variant::kLibrary);
    ASSERT_TRUE(s.matmul.has_value());
    EXPECT_EQ(s.matmul->gemv_max_rows, w.gemv_rows) << s.decision.reason;
    EXPECT_NE(s.decision.reason.find(w.says), std::string::npos) << s.decision.reason;
    if (w.m <= kDecodeGemvMaxRows)
      EXPECT_NE(s.decision.reason.find("matmuls on cuBLASLt "), std::string::npos) << s.decision.reason;
    else  // above the GEMV's rows the cublaslt time is not a term
      EXPECT_EQ(s.decision.reason.find("matmuls on cuBLASLt"), std::string::npos) << s.decision.reason;
  }
  // A cuBLASLt form is a fuse_matmul group's only: on a pattern entry it is an error naming the key.
  auto bad = ProfileDb::Parse(R"({"schema": 1, "device": {"name": "X", "sm": "9.0"}, "entries": [
    {"pattern": "swiglu", "dtype": "bf16", "shape": {"rows": 1, "cols": 64}, "variants_us": {"cublaslt": 1.0}}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("entries[0].variants_us.cublaslt"), std::string::npos) << bad.status().message();
  // and it round-trips through the writer
  auto again = ProfileDb::Parse(prof->ToJson());
  ASSERT_TRUE(again.ok()) << again.status().message();
  ASSERT_EQ(again->entries.size(), 4u);
  ASSERT_TRUE(again->entries[0].cublaslt_us.has_value());
  EXPECT_EQ(*again->entries[0].cublaslt_us, 8.0);
  EXPECT_FALSE(again->entries[0].jit_us.has_value());
}

// ---------------------------------------------------------------- compile cost

TEST(BackgroundCompiler, SwapsInWhenTheJobFinishes) {
  scheduler::BackgroundCompiler bc;
  auto slot = std::make_shared<scheduler::KernelSlot>();
  std::promise<void> release;
  auto gate = release.get_future().share();
  std::promise<std::string> done_name;
  ASSERT_TRUE(bc.Submit(
      "k1",
      [gate]() -> StatusOr<jit::JitKernel> {
        gate.wait();
        jit::JitKernel k;
        k.key.source = "fake";
        return k;
      },
      slot, [&](const std::string& name, const Status& s) { done_name.set_value(s.ok() ? name : "failed"); }));
  EXPECT_FALSE(bc.Submit("k1", [] { return StatusOr<jit::JitKernel>(Internal("never run")); }, slot));  // dedup
  EXPECT_FALSE(slot->ready());  // the fallback runs while it compiles
  release.set_value();
  bc.WaitIdle();
  ASSERT_TRUE(slot->ready());
  EXPECT_EQ(slot->Get()->key.source, "fake");
  EXPECT_EQ(done_name.get_future().get(), "k1");
  EXPECT_EQ(bc.completed(), 1);

  auto bad = std::make_shared<scheduler::KernelSlot>();
  ASSERT_TRUE(bc.Submit("k2", [] { return StatusOr<jit::JitKernel>(InvalidArgument("nvrtc: syntax error")); }, bad));
  bc.WaitIdle();
  EXPECT_FALSE(bad->ready());
  EXPECT_EQ(bad->error().message(), "nvrtc: syntax error");
}

TEST(BackgroundCompiler, CancelPendingFailsTheQueuedSlots) {
  scheduler::BackgroundCompiler bc;
  std::promise<void> release, started;
  auto gate = release.get_future().share();
  auto running = std::make_shared<scheduler::KernelSlot>(), queued = std::make_shared<scheduler::KernelSlot>();
  ASSERT_TRUE(bc.Submit("running", [&, gate]() -> StatusOr<jit::JitKernel> {
    started.set_value();
    gate.wait();
    return jit::JitKernel{};
  }, running));
  started.get_future().wait();  // the first job is on the worker; the second stays queued
  Status queued_done = Status::Ok();
  ASSERT_TRUE(bc.Submit("queued", [] { return StatusOr<jit::JitKernel>(Internal("must not run")); }, queued,
                        [&](const std::string&, const Status& s) { queued_done = s; }));
  EXPECT_EQ(bc.CancelPending(), 1);
  EXPECT_FALSE(queued->ready());
  EXPECT_EQ(queued->error().code(), StatusCode::kUnavailable);
  EXPECT_NE(queued->error().message().find("cancelled"), std::string::npos) << queued->error().message();
  EXPECT_EQ(queued_done.code(), StatusCode::kUnavailable);
  release.set_value();
  bc.WaitIdle();
  EXPECT_TRUE(running->ready());  // a running job finishes
  EXPECT_EQ(bc.completed(), 2);
}

// The executor's view (ExecutorOptions::background_compile): one slot per distinct kernel, the
// generation bumped by every finished compile (ok or failed), failures kept.
TEST(BackgroundSwaps, GenerationCountsFinishedCompilesAndNamesShareASlot) {
  scheduler::BackgroundSwaps sw;
  EXPECT_EQ(sw.generation(), 0u);
  std::promise<void> release;
  auto gate = release.get_future().share();
  const int a = sw.Add("kernel_a", [gate]() -> StatusOr<jit::JitKernel> {
    gate.wait();
    jit::JitKernel k;
    k.key.source = "a";
    return k;
  });
  const int bad = sw.Add("kernel_bad", [gate]() -> StatusOr<jit::JitKernel> {
    gate.wait();
    return InvalidArgument("nvrtc: syntax error");
  });
  EXPECT_EQ(sw.Add("kernel_a", [] { return StatusOr<jit::JitKernel>(Internal("never run")); }), a);  // same kernel, same slot
  EXPECT_EQ(sw.size(), 2);
  EXPECT_TRUE(sw.pending(a));
  EXPECT_TRUE(sw.pending(bad));
  EXPECT_EQ(sw.pending_count(), 2);
  EXPECT_EQ(sw.generation(), 0u);  // nothing finished: plans built now stay valid
  release.set_value();
  sw.WaitIdle();
  EXPECT_EQ(sw.generation(), 2u);
  EXPECT_TRUE(sw.ready(a));
  EXPECT_EQ(sw.slot(a).Get()->key.source, "a");
  EXPECT_FALSE(sw.ready(bad));
  EXPECT_FALSE(sw.pending(bad));
  EXPECT_EQ(sw.slot(bad).error().message(), "nvrtc: syntax error");
  EXPECT_EQ(sw.pending_count(), 0);
  EXPECT_EQ(sw.name(bad), "kernel_bad");
}

TEST(BackgroundSwaps, DestructorCancelsWhatHasNotStarted) {
  std::promise<void> release, started;
  auto gate = release.get_future().share();
  std::atomic<int> ran{0};
  std::thread releaser;
  {
    scheduler::BackgroundSwaps sw;
    sw.Add("first", [&, gate]() -> StatusOr<jit::JitKernel> {
      started.set_value();
      gate.wait();
      ++ran;
      return jit::JitKernel{};
    });
    for (int i = 0; i < 5; ++i)
      sw.Add("queued" + std::to_string(i), [&]() -> StatusOr<jit::JitKernel> {
        ++ran;
        return jit::JitKernel{};
      });
    started.get_future().wait();
    // Opens the gate once ~BackgroundSwaps has cancelled the five queued jobs (each cancelled job's
    // done callback moves the generation), so the running job finishes while the destructor waits
    // for it. Opening it earlier let the worker start the next queued job before the cancel on a
    // loaded machine. Should the cancel never come, the gate opens after 10 s and the count fails.
    releaser = std::thread([&] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (sw.generation() < 5 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      release.set_value();
    });
  }
  releaser.join();
  EXPECT_EQ(ran.load(), 1);  // the queued jobs were dropped, not run
}

// A JIT compiler over an empty kernel cache in a fresh temporary directory, removed again on exit.
struct FreshJit {
  explicit FreshJit(const std::string& name) : dir(Fresh(name)), cache({dir.string(), true, true, 64 << 20}), jit(cache, {"sm_90", true, 1}) {}
  ~FreshJit() { std::filesystem::remove_all(dir); }
  static std::filesystem::path Fresh(const std::string& name) {
    const auto d = std::filesystem::path(::testing::TempDir()) / name;
    std::filesystem::remove_all(d);
    return d;
  }
  std::filesystem::path dir;
  jit::KernelCache cache;
  jit::JitCompiler jit;
};

TEST(JitCompiler, KeyForKernelIsTheKeyCompileKernelUses) {
  if (!jit::NvrtcAvailable()) GTEST_SKIP() << "built without NVRTC";
  FreshJit fresh("opfuse_key_for_kernel_cache");
  jit::KernelCache& cache = fresh.cache;
  jit::JitCompiler& jit = fresh.jit;
  auto run = RunText(MulExp(1024), {}, {{"T", 64}});
  auto groups = run.Kind("generic");
  ASSERT_EQ(groups.size(), 1u);
  auto k = codegen::BuildKernel(run.g, *groups[0]);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  auto key = jit.KeyForKernel(*k, true);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  auto unaligned = jit.KeyForKernel(*k, false);
  ASSERT_TRUE(unaligned.ok());
  EXPECT_NE(key->Digest(), unaligned->Digest());
  EXPECT_EQ(key->Digest(), jit.KeyForGroup(run.g, *groups[0], true)->Digest());
  EXPECT_FALSE(cache.Contains(*key));
  auto compiled = jit.CompileKernel(*k, true);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  EXPECT_EQ(compiled->key.Digest(), key->Digest());
  EXPECT_TRUE(cache.Contains(*key));
}

TEST(ShouldFuse, UncachedJitKernelRunsFallbackThenSwapsIn) {
  if (!jit::NvrtcAvailable()) GTEST_SKIP() << "built without NVRTC";
  FreshJit fresh("opfuse_should_fuse_cache");
  jit::KernelCache& cache = fresh.cache;
  jit::JitCompiler& jit = fresh.jit;

  auto run = RunText(MulExp(1024), {}, {{"T", 64}});
  auto groups = run.Kind("generic");
  ASSERT_EQ(groups.size(), 1u);
  const int index = static_cast<int>(groups[0] - run.g.groups.data());
  auto key = jit.KeyForGroup(run.g, *groups[0], true);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_FALSE(cache.Contains(*key));

  scheduler::ShouldFuseOptions opts;
  opts.profile = &Profile();
  opts.jit_cached = cache.Contains(*key);
  auto before = scheduler::ShouldFuse(run.g, *groups[0], run.ctx.bindings, run.ctx.config, opts);
  EXPECT_EQ(before.variant, Variant::kJit) << before.decision.reason;  // profile: jit 5 us vs unfused 10 us
  EXPECT_TRUE(before.compile_in_background);
  EXPECT_EQ(before.run_now, Variant::kUnfused);
  EXPECT_NE(before.decision.reason.find("running unfused now, compiling in the background"), std::string::npos);

  scheduler::BackgroundCompiler bc;
  auto slot = std::make_shared<scheduler::KernelSlot>();
  Status done_status = Internal("callback not called");
  ASSERT_TRUE(bc.SubmitGroup(jit, run.g, index, slot, [&](const std::string&, const Status& s) { done_status = s; }));
  bc.WaitIdle();
  ASSERT_TRUE(done_status.ok()) << done_status.ToString();
  ASSERT_TRUE(slot->ready());
  EXPECT_FALSE(slot->Get()->binary->binary.empty());  // a CUBIN
  EXPECT_EQ(slot->Get()->key.Digest(), key->Digest());
  EXPECT_TRUE(cache.Contains(*key));

  opts.jit_cached = cache.Contains(*key);
  auto after = scheduler::ShouldFuse(run.g, *groups[0], run.ctx.bindings, run.ctx.config, opts);
  EXPECT_EQ(after.variant, Variant::kJit);
  EXPECT_FALSE(after.compile_in_background);
  EXPECT_EQ(after.run_now, Variant::kJit);
}

}  // namespace
}  // namespace opfuse::testing
