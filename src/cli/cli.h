// Subcommand registration for the `opfuse` CLI. Each cli_<name>.cc defines Register<Name>(app);
// a subcommand's callback stores its exit code with SetExitCode and reports Status failures with
// Fail (one line on stderr: exit 2 for bad input, 1 for internal errors).
#pragma once
#include <CLI/CLI.hpp>

#include "opfuse/graph.h"

namespace opfuse::cli {

void RegisterAll(CLI::App& app);
void RegisterExplain(CLI::App& app);
void RegisterRun(CLI::App& app);
void RegisterCompile(CLI::App& app);
void RegisterBench(CLI::App& app);  // the `bench` group: ops, report, e2e
void RegisterBenchE2e(CLI::App& bench);  // cli_bench_e2e.cc
void RegisterInitWeights(CLI::App& app);
void RegisterGenerate(CLI::App& app);
void RegisterProfile(CLI::App& app);
void RegisterEval(CLI::App& app);  // cli_eval.cc: eval list / baseline / run
void RegisterTokenize(CLI::App& app);  // cli_tokenize.cc: text <-> ids with a model directory's tokenizer

void SetExitCode(int code);
int ExitCode();
// Prints "opfuse <cmd>: <message>" and sets the exit code from the status (2 for invalid
// argument / not found, 1 otherwise). Returns the exit code.
int Fail(const char* cmd, const Status& s);
// The command line as typed (from /proc/self/cmdline, shell-quoted), for reports; `fallback` if unreadable.
std::string CommandLine(const std::string& fallback);
// "42s" / "3m07s"; "?" for a negative or absurd value.
std::string Duration(double seconds);
// A progress line on stderr for long GPU work: "[####....] 3/65 <label> ETA 1m10s", redrawn in
// place on a terminal, one line per step otherwise (logs). Start(i, n, label) before step i.
class Progress {
 public:
  Progress();
  void Start(int i, int n, const std::string& label);
  void Clear();  // erases the line on a terminal
 private:
  bool tty_;
  double t0_;
};
// "a,b,,c" -> {"a", "b", "", "c"} (empty items kept: callers reject them with their own message).
std::vector<std::string> SplitCommaList(const std::string& text);
// CLI11 check for a seed or count that must be a non-negative integer: digits only, at most 20
// (CLI11 alone would wrap -1 into a uint64_t). "" when valid, else the reason.
std::string NonNegativeInteger(const std::string& v);
// Parses --shape SYM=VAL options into bindings.
StatusOr<Bindings> ParseShapeBindings(const std::vector<std::string>& specs);

}  // namespace opfuse::cli
