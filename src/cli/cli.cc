// Shared CLI plumbing: the subcommand list, exit codes, --shape parsing.
#include "cli/cli.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>

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
  RegisterProfile(app);
  RegisterEval(app);
  RegisterTokenize(app);
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

std::string CommandLine(const std::string& fallback) {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::string out;
  size_t pos = 0;
  while (pos < all.size()) {
    size_t end = all.find('\0', pos);
    if (end == std::string::npos) end = all.size();
    std::string arg = all.substr(pos, end - pos);
    if (arg.empty() || arg.find_first_of(" \t'\"$\\|&;<>()*?") != std::string::npos) {
      std::string q = "'";
      for (char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
      arg = q + "'";
    }
    out += (out.empty() ? "" : " ") + arg;
    pos = end + 1;
  }
  return out.empty() ? fallback : out;
}

std::string NonNegativeInteger(const std::string& v) {
  const bool digits = !v.empty() && v.size() <= 20 && std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  return digits ? "" : "must be a non-negative integer";
}

std::string Duration(double s) {
  if (!(s >= 0) || s > 1e6) return "?";
  const int t = static_cast<int>(s + 0.5);
  return t >= 60 ? fmt::format("{}m{:02d}s", t / 60, t % 60) : fmt::format("{}s", t);
}

namespace {
double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

Progress::Progress() : tty_(::isatty(2)), t0_(Now()) {}

void Progress::Start(int i, int n, const std::string& label) {
  const double el = Now() - t0_;
  const std::string eta = i == 0 ? "?" : Duration(el / i * (n - i));
  const int width = 24, filled = n ? width * i / n : 0;
  const std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
  const std::string line = fmt::format("[{}] {:>4}/{} {} ETA {}", bar, i + 1, n, label, eta);
  if (tty_) std::cerr << "\r\033[K" << line << std::flush;
  else std::cerr << line << "\n";
}

void Progress::Clear() {
  if (tty_) std::cerr << "\r\033[K" << std::flush;
}

std::vector<std::string> SplitCommaList(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    out.push_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
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
