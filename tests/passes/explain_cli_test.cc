// `opfuse explain` end to end: the JSON document for the example graphs, the text report, kill
// switches from --disable and OPFUSE_DISABLE, and exit code 2 with a one-line reason for bad input.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "pass_test_util.h"

namespace opfuse::testing {
namespace {

using Cli = CliResult;
Cli RunCli(const std::string& args, const std::string& env = "") { return RunOpfuseCli(args, "explain", env); }

std::string ExamplePath(const char* name) { return std::string(OPFUSE_SOURCE_DIR) + "/examples/graphs/" + name; }

TEST(ExplainCli, JsonForTheExamples) {
  struct Want {
    const char* file;
    const char* kind;
  };
  for (const Want& w : {Want{"swiglu.ofg", "pattern:swiglu"}, Want{"add_rms_norm.ofg", "pattern:add_rms_norm"},
                        Want{"llama_decoder_layer.ofg", "matmul:norm_swiglu"}}) {
    Cli c = RunCli("explain --json " + ExamplePath(w.file));
    ASSERT_EQ(c.code, 0) << c.err;
    auto j = nlohmann::json::parse(c.out);  // exactly one document
    ASSERT_TRUE(j.contains("groups"));
    bool found = false;
    for (const auto& g : j["groups"]) {
      for (const char* key : {"ops", "kind", "decision", "reason", "variant", "name"}) ASSERT_TRUE(g.contains(key)) << key;
      EXPECT_FALSE(g["reason"].get<std::string>().empty());
      EXPECT_FALSE(g["variant"].get<std::string>().empty());
      if (g["kind"] == w.kind && g["decision"] == "fuse") found = true;
    }
    EXPECT_TRUE(found) << w.file << ": " << c.out;
  }
}

TEST(ExplainCli, JsonSwigluExactly) {
  Cli c = RunCli("explain --json " + ExamplePath("swiglu.ofg"));
  ASSERT_EQ(c.code, 0) << c.err;
  auto j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j["graph"], "swiglu");
  ASSERT_EQ(j["groups"].size(), 1u);
  EXPECT_EQ(j["groups"][0]["ops"], nlohmann::json::array({"swiglu"}));
  EXPECT_EQ(j["groups"][0]["kind"], "pattern:swiglu");
  EXPECT_EQ(j["groups"][0]["decision"], "fuse");
  EXPECT_EQ(j["groups"][0]["variant"], "library");
  EXPECT_EQ(j["groups"][0]["name"], "fz_swiglu_bf16_h5632");
}

TEST(ExplainCli, TextReportAndDumps) {
  Cli c = RunCli("explain --dump-after-each --shape T=4 " + ExamplePath("swiglu.ofg"));
  ASSERT_EQ(c.code, 0) << c.err;
  for (const char* pass : {"verify", "infer_shapes", "decompose", "fuse_patterns", "fuse_generic", "fuse_matmul", "schedule"})
    EXPECT_NE(c.out.find(std::string("=== after ") + pass + " ==="), std::string::npos) << pass;
  EXPECT_NE(c.out.find("passes: verify -> infer_shapes -> decompose -> fuse_patterns -> fuse_generic -> fuse_matmul -> fuse_collective -> schedule"),
            std::string::npos);
  EXPECT_NE(c.out.find("[0] pattern:swiglu"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("shapes: T=4"), std::string::npos) << c.out;
}

TEST(ExplainCli, DisableFromFlagAndEnvironment) {
  Cli flag = RunCli("explain --json --disable swiglu " + ExamplePath("swiglu.ofg"));
  ASSERT_EQ(flag.code, 0) << flag.err;
  auto j = nlohmann::json::parse(flag.out);
  EXPECT_EQ(j["groups"][0]["decision"], "no");
  EXPECT_NE(j["groups"][0]["reason"].get<std::string>().find("pattern swiglu disabled"), std::string::npos);

  Cli env = RunCli("explain --json " + ExamplePath("swiglu.ofg"), "OPFUSE_DISABLE=swiglu");
  ASSERT_EQ(env.code, 0) << env.err;
  EXPECT_EQ(nlohmann::json::parse(env.out)["groups"][0]["decision"], "no");

  Cli bad = RunCli("explain --disable swiglue " + ExamplePath("swiglu.ofg"));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("unknown name 'swiglue'"), std::string::npos) << bad.err;
  Cli bad_env = RunCli("explain " + ExamplePath("swiglu.ofg"), "OPFUSE_DISABLE=nope");
  EXPECT_EQ(bad_env.code, 2);
  EXPECT_NE(bad_env.err.find("OPFUSE_DISABLE: unknown name 'nope' (valid: "), std::string::npos) << bad_env.err;
}

TEST(ExplainCli, BadFileExitsTwoWithOneLine) {
  const std::string path = ::testing::TempDir() + "bad_explain.ofg";
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("graph bad\ninput x: f32[4]\ny = frobnicate(x)\noutput y\n", f);
  fclose(f);
  Cli c = RunCli("explain " + path);
  EXPECT_EQ(c.code, 2);
  EXPECT_TRUE(c.out.empty()) << c.out;
  EXPECT_NE(c.err.find(path + ": line 3: unknown op 'frobnicate'"), std::string::npos) << c.err;
  EXPECT_EQ(std::count(c.err.begin(), c.err.end(), '\n'), 1) << c.err;

  Cli missing = RunCli("explain " + ::testing::TempDir() + "does_not_exist.ofg");
  EXPECT_EQ(missing.code, 2);
  Cli shape = RunCli("explain --shape T=x " + ExamplePath("swiglu.ofg"));
  EXPECT_EQ(shape.code, 2);
}

TEST(ExplainCli, Help) {
  Cli c = RunCli("explain --help");
  EXPECT_EQ(c.code, 0);
  for (const char* opt : {"--json", "--dump-after-each", "--shape", "--disable", "OPFUSE_DISABLE"})
    EXPECT_NE(c.out.find(opt), std::string::npos) << opt;
}

}  // namespace
}  // namespace opfuse::testing
