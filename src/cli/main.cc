// `opfuse` — the command-line entry point. Each subcommand lives in its own cli_<name>.cc and
// registers itself through cli.h; main only sets up CLI11 and maps errors to exit codes:
// 0 ok, 2 bad input or usage (one-line reason on stderr), 1 internal failure.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "cli/cli.h"

int main(int argc, char** argv) {
  CLI::App app{"opfuse: operator-fusion compiler and runtime for LLM inference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "opfuse 0.1.0");
  opfuse::cli::RegisterAll(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "opfuse: " << e.what() << " (see --help)\n";
    return 2;
  }
  return opfuse::cli::ExitCode();
}
