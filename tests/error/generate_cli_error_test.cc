// `opfuse generate` on bad input: exit 2 and one line on stderr naming the problem.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;

struct Case {
  const char* args;
  const char* message;  // a substring stderr must hold
};

class GenerateErrors : public ::testing::TestWithParam<Case> {};

TEST_P(GenerateErrors, ExitTwoWithReason) {
  const fs::path dir = fs::temp_directory_path() / ("opfuse_generr_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path err = dir / "stderr.txt";
  const std::string cmd = std::string("'") + OPFUSE_CLI_PATH + "' generate " + GetParam().args + " >/dev/null 2>'" + err.string() + "' </dev/null";
  const int status = std::system(cmd.c_str());
  std::ifstream f(err);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string e = ss.str();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2) << e;
  EXPECT_NE(e.find(GetParam().message), std::string::npos) << e;
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << e;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Cli, GenerateErrors,
    ::testing::Values(Case{"--strategy sometimes", "unknown strategy 'sometimes'"},
                      Case{"--backend tpu", "unknown backend 'tpu'"},
                      Case{"--ids 1,2,999", "999"},
                      Case{"--ids 1,x", "--ids"},
                      Case{"--max-context 4 --ids 1,2,3,4,5", "longer than the context of 4 tokens"},
                      Case{"--max-context 4 --ids 1,2 --max-new-tokens 4", "exceeds the context"},
                      Case{"--ids 1,2 --max-new-tokens 9223372036854775807", "exceeds the context"},
                      Case{"--max-context 100000", "exceeds the model's max_position_embeddings"},
                      Case{"--temperature -1", "temperature"},
                      Case{"--temperature 1 --top-p 0", "top-p"},
                      Case{"--prompt hello", "needs a tokenizer"},
                      Case{"--config huge", "unknown built-in config 'huge'"},
                      Case{"--model /nonexistent/dir", "/nonexistent/dir"},
                      Case{"--ids 1,2 --ids 3 --batch 1", "--batch 1 is smaller than the 2 prompts"},
                      Case{"--strategy always --profile p.json", "only applies to the smart strategy"}));

#ifndef OPFUSE_WITH_CUDA
INSTANTIATE_TEST_SUITE_P(CpuBuild, GenerateErrors,
                         ::testing::Values(Case{"--backend cuda --config tiny", "built without the CUDA backend"}));
#endif

}  // namespace
