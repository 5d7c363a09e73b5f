// `opfuse run` (filled in with the CPU executor).
#include "cli/cli.h"
namespace opfuse::cli {
void RegisterRun(CLI::App& app) { (void)app; }
}  // namespace opfuse::cli
