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
void RegisterBench(CLI::App& app);  // the `bench` group: ops, report (e2e later)
void RegisterInitWeights(CLI::App& app);
void RegisterGenerate(CLI::App& app);

void SetExitCode(int code);
int ExitCode();
// Prints "opfuse <cmd>: <message>" and sets the exit code from the status (2 for invalid
// argument / not found, 1 otherwise). Returns the exit code.
int Fail(const char* cmd, const Status& s);
// Parses --shape SYM=VAL options into bindings.
StatusOr<Bindings> ParseShapeBindings(const std::vector<std::string>& specs);

}  // namespace opfuse::cli
