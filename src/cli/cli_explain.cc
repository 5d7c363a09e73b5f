// `opfuse explain` (filled in with the fusion passes).
#include "cli/cli.h"
namespace opfuse::cli {
void RegisterExplain(CLI::App& app) { (void)app; }
}  // namespace opfuse::cli
