// `opfuse bench e2e` on the CPU backend with the built-in tiny model: DESIGN.md's JSON (every
// strategy and case, measured figures, kernels per decode step), the strategies launching different
// kernels, and bad input exiting 2 without writing the output.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

using opfuse::testing::CliResult;
CliResult RunCli(const std::string& args) { return opfuse::testing::RunOpfuseCli(args, "bench_e2e"); }

TEST(BenchE2eCli, CpuTinyAllStrategies) {
  const std::string out = ::testing::TempDir() + "opfuse_e2e.json";
  std::remove(out.c_str());
  CliResult c = RunCli("bench e2e --backend cpu --runs 2 --cases '[prefill=6, decode=3]' '[prefill=4, decode=2, batch=2]' --output " + out);
  ASSERT_EQ(c.code, 0) << c.err;
  auto j = nlohmann::json::parse(opfuse::testing::ReadTextFile(out));
  EXPECT_EQ(j["config"]["runs"], 2);
  EXPECT_EQ(j["config"]["order"], "interleaved");
  EXPECT_EQ(j["config"]["dtype"], "f32");
  EXPECT_NE(j["config"]["model"].get<std::string>().find("tiny"), std::string::npos);
  for (const char* s : {"never_fuse", "always_fuse", "smart_schedule"})
    for (const char* k : {"[prefill=6, decode=3]", "[prefill=4, decode=2, batch=2]"}) {
      SCOPED_TRACE(std::string(s) + " " + k);
      ASSERT_TRUE(j["results"][s].contains(k)) << j["results"].dump(1);
      const auto& r = j["results"][s][k];
      EXPECT_GT(r["prefill_ms"].get<double>(), 0);
      EXPECT_GT(r["decode_ms_per_token"].get<double>(), 0);
      EXPECT_GE(r["total_ms"].get<double>(), r["prefill_ms"].get<double>());
      EXPECT_GT(r["kernels_per_decode_step"].get<int>(), 0);
      EXPECT_GE(r["compile_ms"].get<double>(), 0);
      EXPECT_EQ(j["details"][s][k]["prefill_runs_ms"].size(), 2u);
    }
  // never_fuse runs every primitive alone: more kernels per step than always_fuse.
  const auto& k = "[prefill=6, decode=3]";
  EXPECT_GT(j["results"]["never_fuse"][k]["kernels_per_decode_step"].get<int>(),
            j["results"]["always_fuse"][k]["kernels_per_decode_step"].get<int>());
  EXPECT_TRUE(j["details"]["never_fuse"][k]["decode_groups"].empty()) << j["details"]["never_fuse"][k].dump();
  EXPECT_FALSE(j["details"]["always_fuse"][k]["decode_groups"].empty());
  EXPECT_NE(c.out.find("| always_fuse | [prefill=6, decode=3] |"), std::string::npos) << c.out;
}

// --order sequential (one engine at a time) reports the same cases and runs; an unknown order is exit 2
// before any engine is built, and no output is written.
TEST(BenchE2eCli, SequentialOrderAndBadOrder) {
  const std::string out = ::testing::TempDir() + "opfuse_e2e_seq.json";
  std::remove(out.c_str());
  CliResult c = RunCli("bench e2e --backend cpu --runs 3 --order sequential --strategies never,always --cases "
                       "'[prefill=5, decode=2]' --output " + out);
  ASSERT_EQ(c.code, 0) << c.err;
  auto j = nlohmann::json::parse(opfuse::testing::ReadTextFile(out));
  EXPECT_EQ(j["config"]["order"], "sequential");
  for (const char* s : {"never_fuse", "always_fuse"}) {
    EXPECT_EQ(j["details"][s]["[prefill=5, decode=2]"]["prefill_runs_ms"].size(), 3u) << s;
    EXPECT_EQ(j["details"][s]["[prefill=5, decode=2]"]["decode_ms_per_token_runs"].size(), 3u) << s;
  }
  std::remove(out.c_str());
  CliResult bad = RunCli("bench e2e --backend cpu --order random --cases '[prefill=5, decode=2]' --output " + out);
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--order"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::ifstream(out).good());
}

// With every fusion pass switched off, always_fuse runs never_fuse's plan: the benchmark must fail
// (exit 1, naming the case) rather than report two strategies that made no difference.
TEST(BenchE2eCli, FailsWhenStrategiesRanTheSamePlan) {
  const std::string out = ::testing::TempDir() + "opfuse_e2e_same.json";
  std::remove(out.c_str());
  CliResult c = opfuse::testing::RunOpfuseCli(
      "bench e2e --backend cpu --runs 1 --strategies never,always --cases '[prefill=4, decode=2]' --output " + out,
      "bench_e2e_same", "OPFUSE_DISABLE=fuse_patterns,fuse_generic,fuse_matmul");
  EXPECT_EQ(c.code, 1) << c.err;
  EXPECT_NE(c.err.find("[prefill=4, decode=2]: never_fuse and always_fuse launched the same number of kernels"),
            std::string::npos)
      << c.err;
  EXPECT_NE(c.err.find("the strategies made no difference"), std::string::npos) << c.err;
  // And with the passes on, the same command succeeds (the test can tell the two apart).
  CliResult ok = RunCli("bench e2e --backend cpu --runs 1 --strategies never,always --cases '[prefill=4, decode=2]'");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

// smart_schedule with a profile (hand-written numbers) where the tiny model's SwiGLU is faster op by op
// at decode (1 row) and at 128 rows (so at the prefill plans' lengths): smart runs it unfused, always fused, the JSON
// lists each strategy's groups, and the run confirms that smart ran its profile's choice
// (bench/plan_check.h; the failing side is PlanCheck.SmartThatIgnoresItsProfileIsReported).
TEST(BenchE2eCli, SmartRunsItsProfilesChoiceAndSaysSo) {
  const std::string prof = ::testing::TempDir() + "opfuse_e2e_profile.json";
  std::ofstream(prof) << R"({"schema": 1, "device": {"name": "Test GPU", "sm": "9.0", "driver": "hand-written",
    "copy_gbps": 3000, "launch_us": 2}, "entries": [
    {"pattern": "swiglu", "dtype": "f32", "shape": {"rows": 1, "cols": 128}, "variants_us": {"unfused": 1.0, "library": 5.0, "jit": 5.0}, "samples": 10},
    {"pattern": "swiglu", "dtype": "f32", "shape": {"rows": 128, "cols": 128}, "variants_us": {"unfused": 1.0, "library": 5.0, "jit": 5.0}, "samples": 10}]})";
  const std::string out = ::testing::TempDir() + "opfuse_e2e_smart.json";
  std::remove(out.c_str());
  CliResult c = RunCli("bench e2e --backend cpu --runs 1 --strategies always,smart --cases '[prefill=4, decode=2]' --profile " +
                       prof + " --output " + out);
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("smart_schedule ran its profile's choice for every group"), std::string::npos) << c.out;
  auto j = nlohmann::json::parse(opfuse::testing::ReadTextFile(out));
  const auto& always = j["details"]["always_fuse"]["[prefill=4, decode=2]"];
  const auto& smart = j["details"]["smart_schedule"]["[prefill=4, decode=2]"];
  for (const char* phase : {"decode_groups", "prefill_groups"}) {
    SCOPED_TRACE(phase);
    EXPECT_TRUE(always[phase].contains("pattern:swiglu (fused library)")) << always[phase].dump();
    EXPECT_FALSE(smart[phase].contains("pattern:swiglu (fused library)")) << smart[phase].dump();
    EXPECT_FALSE(smart[phase].contains("pattern:swiglu (fused jit)")) << smart[phase].dump();
  }
  // the 4-token prompts ran smart's plan for the shortest length of its ladder (engine.h); always
  // has one plan, scheduled at no length
  EXPECT_EQ(smart["prefill_plan_length"], 32) << smart.dump();
  EXPECT_GE(smart["prefill_plans"].get<int>(), 1);
  EXPECT_EQ(always["prefill_plan_length"], 0);
  EXPECT_EQ(always["prefill_plans"], 1);
}

TEST(BenchE2eCli, BadInputExits2) {
  const std::string out = ::testing::TempDir() + "opfuse_e2e_bad.json";
  std::remove(out.c_str());
  EXPECT_EQ(RunCli("bench e2e --backend cpu --cases 'decode=3' --output " + out).code, 2);
  EXPECT_EQ(RunCli("bench e2e --backend cpu --cases '[prefill=0, decode=3]' --output " + out).code, 2);
  EXPECT_EQ(RunCli("bench e2e --backend cpu --cases '[prefill=4, tokens=3]' --output " + out).code, 2);
  EXPECT_EQ(RunCli("bench e2e --backend cpu --strategies never,sometimes --output " + out).code, 2);
  EXPECT_EQ(RunCli("bench e2e --backend cpu --runs 0 --output " + out).code, 2);
  EXPECT_EQ(RunCli("bench e2e --backend cpu --model /nonexistent/model --output " + out).code, 2);
  // A value beyond int64 is a one-line error, not an uncaught std::out_of_range.
  CliResult huge = RunCli("bench e2e --backend cpu --cases '[prefill=99999999999999999999, decode=1]' --output " + out);
  EXPECT_EQ(huge.code, 2);
  EXPECT_NE(huge.err.find("prefill=99999999999999999999 is out of range"), std::string::npos) << huge.err;
  EXPECT_EQ(std::count(huge.err.begin(), huge.err.end(), '\n'), 1) << huge.err;
  CliResult big = RunCli("bench e2e --backend cpu --cases '[prefill=100000, decode=1]' --output " + out);
  EXPECT_EQ(big.code, 2);
  EXPECT_NE(big.err.find("context"), std::string::npos) << big.err;
  std::ifstream f(out);
  EXPECT_FALSE(f.good());  // nothing written
}

}  // namespace

namespace {

// --tensor-parallel on the CPU: the JSON records N and rank 0's collectives per generation (two
// all_reduce a layer and one all_gather, for the prefill and every decode step); a config that
// does not split exits 2 naming the quantity, without writing the output.
TEST(BenchE2eCli, TensorParallelRecordsRanksAndCollectives) {
  const std::string out = ::testing::TempDir() + "opfuse_e2e_tp.json";
  std::remove(out.c_str());
  CliResult c = RunCli("bench e2e --backend cpu --runs 1 --strategies never,always --tensor-parallel 2 "
                       "--cases '[prefill=5, decode=3]' --output " + out);
  ASSERT_EQ(c.code, 0) << c.err;
  auto j = nlohmann::json::parse(opfuse::testing::ReadTextFile(out));
  EXPECT_EQ(j["config"]["tensor_parallel"], 2);
  EXPECT_NE(j["config"]["device"].get<std::string>().find("tensor parallel 2"), std::string::npos) << j["config"].dump();
  for (const char* s : {"never_fuse", "always_fuse"}) {
    const auto& r = j["results"][s]["[prefill=5, decode=3]"];
    EXPECT_EQ(r["tensor_parallel"], 2);
    EXPECT_EQ(r["collectives_per_run"], 3 * (2 * 2 + 1)) << r.dump();  // tiny: 2 layers; prefill + 2 decode steps
    EXPECT_GE(r["collective_ms_per_run"].get<double>(), 0);
  }
  std::remove(out.c_str());
  c = RunCli("bench e2e --backend cpu --runs 1 --tensor-parallel 3 --output " + out);
  EXPECT_EQ(c.code, 2) << c.err;
  EXPECT_NE(c.err.find("--tensor-parallel 3: num_attention_heads 4 is not a multiple of 3"), std::string::npos) << c.err;
  EXPECT_FALSE(std::ifstream(out).good());
}

}  // namespace
