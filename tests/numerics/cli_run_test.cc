// `opfuse run` end to end on the example graphs: exit 0, one statistics line per output with the
// declared type and the bound shape, finite values (nan 0, inf 0), the default-symbol notice on
// stderr, and seeded determinism (same seed, same numbers; another seed, other numbers).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;

struct RunResult {
  int code = -1;
  std::string out, err;
};

std::string Slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

RunResult RunCli(const std::string& args) {
  const fs::path dir = fs::temp_directory_path() / ("opfuse_cli_run_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / "out.txt", err = dir / "err.txt";
  const std::string cmd = std::string("'") + OPFUSE_CLI_PATH + "' " + args + " >'" + out.string() + "' 2>'" +
                          err.string() + "' </dev/null";
  const int st = std::system(cmd.c_str());
  RunResult r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  std::error_code ec;
  fs::remove_all(dir, ec);
  return r;
}

std::string Example(const char* name) { return std::string("'") + OPFUSE_SOURCE_DIR + "/examples/graphs/" + name + "'"; }

// The statistics part of stdout (everything after the header line, which carries a timing).
std::string StatsLines(const std::string& out) { return out.substr(out.find('\n') + 1); }

TEST(CliRun, SwigluDefaultsSymbolAndPrintsStatistics) {
  RunResult r = RunCli("run " + Example("swiglu.ofg"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("symbol T not bound"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("using T=8"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("out: bf16[T, 5632] = [8, 5632]"), std::string::npos) << r.out;
  for (const char* field : {"min ", "max ", "mean ", "l2 ", "nan 0", "inf 0"})
    EXPECT_NE(r.out.find(field), std::string::npos) << field << " missing in:\n" << r.out;
}

TEST(CliRun, SeedIsDeterministic) {
  RunResult a = RunCli("run " + Example("add_rms_norm.ofg") + " --shape T=3 --seed 5");
  RunResult b = RunCli("run " + Example("add_rms_norm.ofg") + " --seed 5 --shape T=3");
  RunResult c = RunCli("run " + Example("add_rms_norm.ofg") + " --shape T=3 --seed 6");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_TRUE(a.err.empty()) << "no notice expected when every symbol is bound: " << a.err;
  EXPECT_NE(a.out.find("y: bf16[T, 2048] = [3, 2048]"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("h: bf16[T, 2048] = [3, 2048]"), std::string::npos) << a.out;
  EXPECT_EQ(StatsLines(a.out), StatsLines(b.out));
  EXPECT_NE(StatsLines(a.out), StatsLines(c.out));
}

TEST(CliRun, DecoderLayerRunsFinite) {
  RunResult r = RunCli("run " + Example("llama_decoder_layer.ofg") + " --shape T=4");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("out: bf16[T, 2048] = [4, 2048]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nan 0  inf 0"), std::string::npos) << r.out;
}

TEST(CliRun, HelpExplainsTheCommand) {
  RunResult r = RunCli("run --help");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* word : {"--backend", "--seed", "--shape", "SYM=VALUE", "default to 8", "NaN"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word << " missing in:\n" << r.out;
}

}  // namespace
