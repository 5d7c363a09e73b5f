// Runs the `opfuse` binary under test (OPFUSE_CLI_PATH) the way a user's shell does: `args` is
// shell text (quotes work), `env` an optional "VAR=value ..." prefix. stdout is captured through
// a pipe, stderr through a file under the test temp dir (named by `tag`, so tests running at the
// same time in different binaries do not share it; the process id keeps concurrent tests of one
// binary apart). One copy for every CLI test.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace opfuse::testing {

struct CliResult {
  int code = -1;    // exit code; -1 when the process did not exit normally
  std::string out;  // stdout
  std::string err;  // stderr
};

// The whole file ("" when it cannot be read).
inline std::string ReadTextFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline CliResult RunOpfuseCli(const std::string& args, const std::string& tag, const std::string& env = "") {
  // The process id in the name: ctest -j runs tests of one binary as separate processes at once, and
  // two of them with the same tag (ProfileCli.*) must not share (and truncate) one stderr file.
  const std::string err_path =
      ::testing::TempDir() + "opfuse_" + tag + "_" + std::to_string(static_cast<long>(getpid())) + "_stderr.txt";
  const std::string cmd = env + " " + OPFUSE_CLI_PATH + " " + args + " 2>" + err_path;
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = ReadTextFile(err_path);
  return r;
}

}  // namespace opfuse::testing
