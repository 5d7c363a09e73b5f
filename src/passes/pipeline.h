// THE pass pipeline (DESIGN.md "Pipeline"): the ordered list of named passes and the runner.
//
// pipeline.cc holds the list; RunPipeline walks it, skipping passes switched off in the config
// (only those marked `can_disable`), and calls `after_each` after every pass that ran — that hook
// is how `opfuse explain --dump-after-each` prints the graph step by step. With
// config.fallback_on_error an optional pass that fails is rolled back (the graph is restored to
// what it was before the pass) and noted, so a fusion bug costs speed, not a wrong answer or a
// crash. The required passes (verify, infer_shapes, schedule) always fail loudly.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "passes/pass.h"

namespace opfuse {

struct PassEntry {
  const char* name;   // snake_case, also the kill-switch name
  PassFn fn;
  bool can_disable;   // may be switched off by OPFUSE_DISABLE / config.disabled
  const char* what;   // one line for --help and explain
};

const std::vector<PassEntry>& Pipeline();

using AfterPassFn = std::function<void(const std::string& pass, const Graph& g)>;

// Runs every pass in order. Skipped passes are noted in ctx.notes ("skipped: disabled by ...").
Status RunPipeline(Graph& g, const PassContext& ctx, const AfterPassFn& after_each = nullptr);

// Names of the passes RunPipeline would run under `config`, in order (for explain).
std::vector<std::string> PassesToRun(const FusionConfig& config);

}  // namespace opfuse
