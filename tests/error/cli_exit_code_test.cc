// The `opfuse` binary's contract for bad input (DESIGN.md "Errors"): a malformed .ofg gets exit
// code 2 and exactly one line on stderr naming the line and the problem; --help exits 0; an
// unknown subcommand or option is a usage error (2). Runs the built binary (OPFUSE_CLI_PATH) on
// files written to a fresh temp dir. Both subcommands that read a graph file (explain, run) are
// tried; each must exist (its --help exits 0), so a broken --help fails these tests, never skips them.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out, err;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("opfuse_cli_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  fs::path Write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  static std::string Slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  // Runs `opfuse ARGS` (ARGS already shell-quoted where needed) with stdout/stderr captured.
  Result Run(const std::string& args) {
    const fs::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string cmd = std::string("'") + OPFUSE_CLI_PATH + "' " + args + " >'" + out.string() + "' 2>'" +
                            err.string() + "' </dev/null";
    int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    r.out = Slurp(out);
    r.err = Slurp(err);
    return r;
  }
  bool HasSubcommand(const std::string& sub) { return Run(sub + " --help").code == 0; }
  std::vector<std::string> GraphSubcommands() {
    std::vector<std::string> subs;
    for (const char* s : {"explain", "run"}) {
      EXPECT_TRUE(HasSubcommand(s)) << "`opfuse " << s << " --help` does not exit 0";
      subs.push_back(s);
    }
    return subs;
  }

  static void ExpectOneLine(const std::string& err) {
    ASSERT_FALSE(err.empty());
    EXPECT_EQ(err.back(), '\n') << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "stderr is not one line:\n" << err;
  }

  fs::path dir_;
};

TEST_F(CliTest, HelpExitsZero) {
  Result r = Run("--help");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("opfuse"), std::string::npos) << r.out;
}

TEST_F(CliTest, UnknownSubcommandIsUsageError) {
  Result r = Run("no-such-subcommand");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  ExpectOneLine(r.err);
}

TEST_F(CliTest, MalformedGraphExitsTwoWithLineAndProblem) {
  auto subs = GraphSubcommands();
  const fs::path bad = Write("bad.ofg",
                             "# a comment on line 1\n"
                             "graph bad\n"
                             "input x: f32[T, 4]\n"
                             "y = frobnicate(x)\n"
                             "output y\n");
  for (const auto& sub : subs) {
    SCOPED_TRACE(sub);
    Result r = Run(sub + " '" + bad.string() + "'");
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    ExpectOneLine(r.err);
    EXPECT_NE(r.err.find("line 4"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("unknown op 'frobnicate'"), std::string::npos) << r.err;
  }
}

TEST_F(CliTest, VerifierErrorExitsTwoWithLine) {
  auto subs = GraphSubcommands();
  const fs::path bad = Write("shape.ofg",
                             "graph shape\n"
                             "input x: f32[T, 64]\n"
                             "input y: f32[T, 32]\n"
                             "z = add(x, y)\n"
                             "output z\n");
  for (const auto& sub : subs) {
    SCOPED_TRACE(sub);
    Result r = Run(sub + " '" + bad.string() + "'");
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    ExpectOneLine(r.err);
    EXPECT_NE(r.err.find("line 4"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("shape mismatch"), std::string::npos) << r.err;
  }
}

TEST_F(CliTest, MissingFileExitsTwo) {
  auto subs = GraphSubcommands();
  for (const auto& sub : subs) {
    SCOPED_TRACE(sub);
    Result r = Run(sub + " '" + (dir_ / "missing.ofg").string() + "'");
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    ExpectOneLine(r.err);
    EXPECT_NE(r.err.find("missing.ofg"), std::string::npos) << r.err;
  }
}

TEST_F(CliTest, SubcommandHelpExitsZero) {
  auto subs = GraphSubcommands();
  for (const auto& sub : subs) {
    Result r = Run(sub + " --help");
    EXPECT_EQ(r.code, 0) << sub << ": " << r.err;
    EXPECT_NE(r.out.find(sub), std::string::npos) << r.out;
  }
}

TEST_F(CliTest, ExampleGraphExplainsCleanly) {
  ASSERT_TRUE(HasSubcommand("explain")) << "`opfuse explain --help` does not exit 0";
  Result r = Run(std::string("explain '") + OPFUSE_SOURCE_DIR + "/examples/graphs/swiglu.ofg'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
}

}  // namespace
