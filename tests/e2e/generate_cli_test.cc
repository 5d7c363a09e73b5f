// `opfuse generate` as a user runs it on the CPU with the built-in `tiny` model: tokens and a
// timing line for every strategy (same greedy tokens, fewer kernels per step when fused), seeded
// sampling reproducible, --dump-logits JSON complete, batches of prompts, a model directory from
// init-weights giving the same tokens as the built-in config with the same seed.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out, err;
};

std::string Slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

fs::path TempDir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("opfuse_gen_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

Result RunCli(const std::string& args, const fs::path& dir) {
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string cmd = std::string("'") + OPFUSE_CLI_PATH + "' " + args + " >'" + out.string() + "' 2>'" + err.string() + "' </dev/null";
  int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

std::string Tokens(const std::string& out, int seq = 0) {
  std::smatch m;
  const std::regex re("\\[" + std::to_string(seq) + "\\] prompt \\d+ tokens -> ([0-9,]+)");
  return std::regex_search(out, m, re) ? m[1].str() : "";
}

int KernelsPerStep(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex("(\\d+) kernels/step")) ? std::stoi(m[1]) : -1;
}

TEST(GenerateCli, StrategiesSameTokensDifferentKernels) {
  const fs::path dir = TempDir("strat");
  std::map<std::string, std::string> tokens;
  std::map<std::string, int> kernels;
  for (const char* s : {"never", "always", "smart"}) {
    Result r = RunCli(std::string("generate --ids 1,17,42,99 --max-new-tokens 6 --strategy ") + s, dir);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(r.err.empty()) << r.err;
    tokens[s] = Tokens(r.out);
    kernels[s] = KernelsPerStep(r.out);
    EXPECT_EQ(std::count(tokens[s].begin(), tokens[s].end(), ','), 5) << r.out;
    EXPECT_NE(r.out.find("ms/token"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("compile"), std::string::npos) << r.out;
  }
  EXPECT_EQ(tokens["never"], tokens["always"]);
  EXPECT_EQ(tokens["smart"], tokens["always"]);
  EXPECT_GT(kernels["never"], kernels["always"]);
  fs::remove_all(dir);
}

// --tensor-parallel 2 and 4 on the CPU (one thread per rank): the same greedy tokens as one rank,
// a line naming the ranks and their collectives; --tensor-parallel 3 (4 heads) and on cuda exit 2.
TEST(GenerateCli, TensorParallelGivesOneRanksTokens) {
  const fs::path dir = TempDir("tp");
  Result one = RunCli("generate --ids 1,17,42,99 --max-new-tokens 6 --batch 2", dir);
  ASSERT_EQ(one.code, 0) << one.err;
  for (const char* tp : {"2", "4"}) {
    Result r = RunCli(std::string("generate --ids 1,17,42,99 --max-new-tokens 6 --batch 2 --tensor-parallel ") + tp, dir);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(Tokens(r.out, 0), Tokens(one.out, 0)) << r.out;
    EXPECT_EQ(Tokens(r.out, 1), Tokens(one.out, 1)) << r.out;
    EXPECT_FALSE(Tokens(r.out, 1).empty());
    EXPECT_NE(r.out.find(std::string("tensor parallel ") + tp + ": "), std::string::npos) << r.out;
  }
  Result bad = RunCli("generate --ids 1,2 --tensor-parallel 3", dir);
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_EQ(bad.err, "opfuse generate: --tensor-parallel 3: num_attention_heads 4 is not a multiple of 3\n");
  bad = RunCli("generate --ids 1,2 --tensor-parallel 0", dir);
  EXPECT_EQ(bad.code, 2) << bad.err;
  fs::remove_all(dir);
}

TEST(GenerateCli, SeededSamplingReproducible) {
  const fs::path dir = TempDir("seed");
  const std::string base = "generate --ids 1,2,3 --max-new-tokens 10 --temperature 1.2 --top-k 40 --top-p 0.9 --seed ";
  Result a = RunCli(base + "5", dir), b = RunCli(base + "5", dir), c = RunCli(base + "6", dir);
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(Tokens(a.out), Tokens(b.out));
  EXPECT_NE(Tokens(a.out), Tokens(c.out));
  EXPECT_FALSE(Tokens(a.out).empty());
  fs::remove_all(dir);
}

TEST(GenerateCli, BatchAndDumpLogits) {
  const fs::path dir = TempDir("batch");
  const fs::path dump = dir / "logits.json";
  Result r = RunCli("generate --ids 1,17,42,99 --ids 1,5 --batch 3 --max-new-tokens 4 --dump-logits '" + dump.string() + "'", dir);
  ASSERT_EQ(r.code, 0) << r.err;
  // Sequence 2 repeats sequence 0's prompt, so it must get the same tokens.
  EXPECT_EQ(Tokens(r.out, 2), Tokens(r.out, 0));
  EXPECT_FALSE(Tokens(r.out, 1).empty());
  std::ifstream f(dump);
  ASSERT_TRUE(f);
  auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["strategy"], "always_fuse");
  ASSERT_EQ(j["logits"].size(), 3u);
  ASSERT_EQ(j["logits"][1].size(), 4u);       // prefill + 3 decode steps
  EXPECT_EQ(j["logits"][1][0].size(), 256u);  // tiny vocab
  EXPECT_EQ(j["prompts"][1], nlohmann::json::array({1, 5}));
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  fs::remove_all(dir);
}

TEST(GenerateCli, ModelDirMatchesBuiltin) {
  const fs::path dir = TempDir("dir");
  Result w = RunCli("init-weights --config tiny --seed 3 --out '" + (dir / "m").string() + "'", dir);
  ASSERT_EQ(w.code, 0) << w.err;
  Result a = RunCli("generate --model '" + (dir / "m").string() + "' --ids 1,9,8,7 --max-new-tokens 5", dir);
  Result b = RunCli("generate --config tiny --weight-seed 3 --ids 1,9,8,7 --max-new-tokens 5", dir);
  Result c = RunCli("generate --config tiny --weight-seed 4 --ids 1,9,8,7 --max-new-tokens 5", dir);
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(Tokens(a.out), Tokens(b.out));
  EXPECT_NE(Tokens(a.out), Tokens(c.out));  // other weights, other tokens (5 draws over 256 ids)
  fs::remove_all(dir);
}

TEST(GenerateCli, HelpExplains) {
  const fs::path dir = TempDir("help");
  Result r = RunCli("generate --help", dir);
  EXPECT_EQ(r.code, 0);
  for (const char* w : {"--strategy", "never", "smart", "--temperature", "--dump-logits", "kernels per decode step"})
    EXPECT_NE(r.out.find(w), std::string::npos) << w;
  fs::remove_all(dir);
}

}  // namespace
