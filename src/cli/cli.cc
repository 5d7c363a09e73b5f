// Shared CLI plumbing: the subcommand list, exit codes, --shape parsing.
#include "cli/cli.h"

#include <cstdlib>
#include <iostream>

#include <fmt/format.h>

#include "opfuse/graph.h"

namespace opfuse::cli {

namespace {
int g_exit_code = 0;
}

void RegisterAll(CLI::App& app) {
  RegisterExplain(app);
  RegisterRun(app);
  RegisterCompile(app);
  RegisterBench(app);
  RegisterInitWeights(app);
  RegisterGenerate(app);
}

void SetExitCode(int code) { g_exit_code = code; }
int ExitCode() { return g_exit_code; }

int Fail(const char* cmd, const Status& s) {
  std::cerr << "opfuse " << cmd << ": " << s.message() << "\n";
  // 2: the input or the environment is wrong (bad file/flag, missing file, no CUDA device);
  // 1: opfuse itself failed.
  int code = (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ||
              s.code() == StatusCode::kUnavailable)
                 ? 2
                 : 1;
  SetExitCode(code);
  return code;
}

StatusOr<Bindings> ParseShapeBindings(const std::vector<std::string>& specs) {
  Bindings b;
  for (const auto& s : specs) {
    auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
      return InvalidArgument(fmt::format("--shape '{}': expected SYM=VALUE, e.g. T=128", s));
    std::string sym = s.substr(0, eq), val = s.substr(eq + 1);
    char* end = nullptr;
    long long v = std::strtoll(val.c_str(), &end, 10);
    if (*end != '\0' || v < 0) return InvalidArgument(fmt::format("--shape '{}': value must be a non-negative integer", s));
    b[sym] = v;
  }
  return b;
}

}  // namespace opfuse::cli
