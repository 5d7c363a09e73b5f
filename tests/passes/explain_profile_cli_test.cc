// `opfuse explain --profile` end to end: decisions from a recorded profile in text and JSON, a
// profile from another device ignored with a warning (exit 0), malformed or missing -> exit 2.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "pass_test_util.h"

namespace opfuse::testing {
namespace {

using Cli = CliResult;
Cli RunExplain(const std::string& args) { return RunOpfuseCli(args, "explain_profile"); }

std::string GraphPath(const char* name) { return std::string(OPFUSE_SOURCE_DIR) + "/examples/graphs/" + name; }
std::string Prof(const char* name) { return std::string(OPFUSE_SOURCE_DIR) + "/tests/data/profiles/" + name; }

const nlohmann::json* FindGroup(const nlohmann::json& j, const std::string& kind) {
  for (const auto& g : j["groups"])
    if (g["kind"] == kind) return &g;
  return nullptr;
}

TEST(ExplainProfileCli, JsonShowsProfileDecisions) {
  Cli c = RunExplain("explain --json " + GraphPath("add_rms_norm.ofg") + " --profile " + Prof("h200_tinyllama_bf16.json") +
              " --device 'NVIDIA H200' --shape T=64");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(c.err, "");  // the device matched: no warning
  auto j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j["profile"]["used"], true);
  EXPECT_EQ(j["profile"]["device"], "NVIDIA H200");
  const auto* g = FindGroup(j, "pattern:add_rms_norm");
  ASSERT_NE(g, nullptr) << c.out;
  EXPECT_EQ((*g)["source"], "profile");
  EXPECT_EQ((*g)["variant"], "jit");
  EXPECT_NEAR((*g)["expected_us_saved"].get<double>(), 4.7, 1e-9);
  EXPECT_NE((*g)["evidence"].get<std::string>().find("interpolated in log(rows)"), std::string::npos);
}

TEST(ExplainProfileCli, TextShowsSourceAndSaving) {
  Cli c = RunExplain("explain " + GraphPath("swiglu.ofg") + " --profile " + Prof("h200_tinyllama_bf16.json") +
              " --device 'NVIDIA H200' --shape T=4");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("not more than margin 3%"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("variant: unfused"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("source: profile  expected saved: 0.00 us"), std::string::npos) << c.out;
}

TEST(ExplainProfileCli, OtherDeviceIsIgnoredWithAWarning) {
  Cli c = RunExplain("explain --json " + GraphPath("swiglu.ofg") + " --profile " + Prof("h100_tinyllama_bf16.json") +
              " --device 'NVIDIA H200' --shape T=4");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.err.find("warning:"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("profile measured on 'NVIDIA H100 80GB HBM3', this device is 'NVIDIA H200'; profile ignored"),
            std::string::npos)
      << c.err;
  auto j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j["profile"]["used"], false);
  const auto* g = FindGroup(j, "pattern:swiglu");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ((*g)["source"], "config");   // as without a profile
  EXPECT_EQ((*g)["decision"], "fuse");
  EXPECT_EQ((*g)["variant"], "library");
}

TEST(ExplainProfileCli, MalformedOrMissingProfileIsExit2) {
  for (const char* f : {"bad_schema.json", "bad_variant.json", "truncated.json", "no_such_profile.json"}) {
    Cli c = RunExplain("explain " + GraphPath("swiglu.ofg") + " --profile " + Prof(f));
    EXPECT_EQ(c.code, 2) << f << ": " << c.err;
    EXPECT_EQ(c.out, "") << f;
    EXPECT_EQ(std::count(c.err.begin(), c.err.end(), '\n'), 1) << f << ": " << c.err;  // one line
    EXPECT_NE(c.err.find(f), std::string::npos) << c.err;                               // names the file
  }
  Cli c = RunExplain("explain " + GraphPath("swiglu.ofg") + " --profile " + Prof("bad_variant.json"));
  EXPECT_NE(c.err.find("entries[0].variants_us.jit: must be a number"), std::string::npos) << c.err;
}

}  // namespace
}  // namespace opfuse::testing
