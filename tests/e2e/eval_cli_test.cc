// `opfuse eval` as a user runs it, without a GPU: `eval list` shows >= 30 problems (and --json the
// cases eval_peer.py reads); `eval run --backend cpu` checks opfuse's fused graphs with the trial
// protocol and writes the result JSON (all correct, no timing) and the markdown table; bad input
// exits 2 with one line on stderr (unknown problem, --trials < 5, a .cu candidate on the CPU backend,
// --candidate without --problem, a missing --output, a malformed problem directory).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out, err;
};

class EvalCli : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> n{0};
    dir_ = fs::temp_directory_path() / ("opfuse_eval_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static std::string Slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  Result Run(const std::string& args, bool default_dir = true) {
    const fs::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string cmd = std::string("cd '") + dir_.string() + "' && '" + OPFUSE_CLI_PATH + "' " + args +
                            (default_dir ? std::string(" --problems-dir '") + OPFUSE_SOURCE_DIR + "/eval/problems'" : "") + " >'" + out.string() + "' 2>'" +
                            err.string() + "' </dev/null";
    int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    r.out = Slurp(out);
    r.err = Slurp(err);
    return r;
  }
  static void ExpectOneLine(const Result& r) {
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  fs::path dir_;
};

TEST_F(EvalCli, ListShowsTheSuite) {
  Result r = Run("eval list");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("gemv_bf16_m16"), std::string::npos);
  EXPECT_NE(r.out.find("attention_bf16_decode"), std::string::npos);
  r = Run("eval list --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], 1);
  EXPECT_GE(j["problems"].size(), 30u);
  EXPECT_TRUE(j["problems"][0]["case"].contains("graph"));
}

TEST_F(EvalCli, CpuBackendChecksOpfusePlans) {
  Result r = Run("eval run --backend cpu --problems rms_norm_bf16_decode,swiglu_bf16_decode,rope_bf16_decode,"
                 "softmax_masked_f32_decode,logsumexp_f32_decode --output cpu.json --markdown cpu.md");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(Slurp(dir_ / "cpu.json"));
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["trials"], 5);
  ASSERT_EQ(j["results"].size(), 5u);
  for (const auto& x : j["results"]) {
    EXPECT_TRUE(x["compiled"].get<bool>()) << x.dump();
    EXPECT_TRUE(x["correct"].get<bool>()) << x.dump();
    EXPECT_TRUE(x["runtime_us"].is_null());
  }
  EXPECT_NE(Slurp(dir_ / "cpu.md").find("| rope_bf16_decode |"), std::string::npos);
  EXPECT_NE(r.out.find("fast_1"), std::string::npos);
}

// Inputs are a pure function of the seed, so each run draws a fresh one (printed on stderr and
// recorded in the JSON) and --seed reproduces it.
TEST_F(EvalCli, FreshSeedPerRunRecordedAndReproducible) {
  auto seed_of = [&](const std::string& extra) {
    Result r = Run("eval run --backend cpu --problems rope_bf16_decode --output s.json " + extra);
    EXPECT_EQ(r.code, 0) << r.err;
    auto j = nlohmann::json::parse(Slurp(dir_ / "s.json"));
    EXPECT_TRUE(j["seed"].is_number_unsigned()) << j.dump();
    const uint64_t seed = j["seed"].get<uint64_t>();
    if (extra.empty()) EXPECT_NE(r.err.find(fmt::format("seed {} (--seed {} reproduces", seed, seed)), std::string::npos) << r.err;
    else EXPECT_EQ(r.err.find("reproduces"), std::string::npos) << r.err;
    EXPECT_EQ(j["results"][0]["rule"], "");
    return seed;
  };
  const uint64_t a = seed_of(""), b = seed_of("");
  EXPECT_NE(a, b);
  EXPECT_EQ(seed_of("--seed 12345"), 12345u);
}

TEST_F(EvalCli, BadInputExitsTwoWithOneLine) {
  ExpectOneLine(Run("eval run --backend cpu --problems nope --output x.json"));
  ExpectOneLine(Run("eval run --backend cpu --problems rms_norm_bf16_decode --trials 3 --output x.json"));
  ExpectOneLine(Run("eval run --backend cpu --candidate k.cu --problem rms_norm_bf16_decode --output x.json"));
  ExpectOneLine(Run("eval run --candidate k.cu --output x.json"));
  ExpectOneLine(Run("eval run --backend cpu --problem rms_norm_bf16_decode --output x.json"));
  EXPECT_EQ(Run("eval run --backend cpu").code, 2);  // --output is required (CLI11's usage error)
  EXPECT_FALSE(fs::exists(dir_ / "x.json"));
  // A problem file that does not parse names itself.
  fs::create_directories(dir_ / "bad");
  std::ofstream(dir_ / "bad" / "broken.ofg") << "graph b\ninput x: f32[4]\ny = nosuchop(x)\noutput y\n";
  Result r = Run("eval list --problems-dir bad", false);
  ExpectOneLine(r);
  EXPECT_NE(r.err.find("broken"), std::string::npos) << r.err;
}

}  // namespace
