// should_fuse: how one fusion group runs — unfused (op by op), a fused library kernel, or a JIT
// kernel — and why. DESIGN.md "Scheduler"; docs/scheduler.md has the order and the formulas.
//
// Design note: the decision comes from, in order, (1) config rules (enable_fusion, kill switches
// already applied by the fusion passes, min/max group size, min_tensor_elements) — the rules the
// `schedule` pass applied before this file existed, moved here so there is one copy; (2) the
// measured profile, interpolated linearly in log(rows) between the two nearest measured rows with
// the same pattern, dtype and cols (outside the measured range only the nearest point within a
// factor 2 is used), choosing a fused variant only when it beats unfused by more than the margin;
// (3) a cost model, bytes moved / bandwidth + launches x launch cost, with the constants the
// profile measured or a default set that the reason labels as such. Without a profile only (1)
// runs; the fused variant is then the library kernel for a pattern group and the JIT for a generic
// group, except the pattern groups whose JIT kernel measured faster (row patterns off the 16-byte
// grid, geglu: should_fuse.cc, PatternOnTheJit), which take the JIT. Compile cost: when the chosen
// JIT kernel is not in the kernel cache, the decision says to run the fallback now while it
// compiles in the background (BackgroundCompiler, background_compiler.h) and swap it in when ready.
#pragma once
#include <optional>
#include <string>

#include "opfuse/config.h"
#include "opfuse/graph.h"
#include "scheduler/profile_db.h"

namespace opfuse::scheduler {

using opfuse::Variant;      // graph.h; a choice is never kAuto
using opfuse::VariantName;
enum class DecisionSource { kConfig, kProfile, kCostModel };
const char* SourceName(DecisionSource s);  // "config" | "profile" | "cost_model"

struct DeviceConstants {
  double copy_gbps = 0;  // GB/s (1e9 bytes per second)
  double launch_us = 0;
  std::string label;     // where the numbers came from, quoted in reasons
  // Not measured anywhere: an H100/H200-class guess, labelled "default constants (not measured)".
  static DeviceConstants Defaults();
  // The profile's device block; a field it lacks falls back to the default (and the label says so).
  static DeviceConstants FromDevice(const DeviceInfo& d);
};

struct ShouldFuseOptions {
  const ProfileDb* profile = nullptr;        // null: config rules only (the behaviour without a profile)
  std::optional<DeviceConstants> constants;  // null: profile->device, or Defaults() without a profile
  double margin = 0.03;                      // a fused variant must beat unfused by more than this fraction
  std::optional<bool> jit_cached;            // is the group's JIT kernel in the cache? null: not checked
};

struct FusionChoice {
  Variant variant = Variant::kUnfused;   // how the group runs once everything is compiled
  FusionDecision decision;               // fuse or no, with the reason (what `opfuse explain` prints)
  DecisionSource source = DecisionSource::kConfig;
  double expected_us_saved = 0;          // vs unfused, per run of the group (0 when not known)
  std::string evidence;                  // the profile point / interpolation / cost terms used ("" for config)
  bool compile_in_background = false;    // JIT kernel not cached: run `run_now` while it compiles
  Variant run_now = Variant::kUnfused;   // what runs right now (== variant unless compiling)
  // Set by the schedule pass when a requested variant (PassContext::variant) cannot run this group:
  // "<requested> -> <runs>: <why>"; the group's FusionGroup::variant is the one that runs.
  std::string substitution;
  // fuse_matmul's groups: the most rows the fused group runs as one GEMV launch — the GEMV's capacity
  // where a profile measured the group kept there, else the default (MatmulGroupPlan::gemv_max_rows).
  int64_t gemv_max_rows = kDecodeGemvMaxRows;
};

// The group's profile key: pattern name for pattern groups ("add_rms_norm"), "generic:<op>_<op>..."
// for generic groups, "" for single ops; rows/cols from the group's widest output: cols = its last
// dim, rows = its other dims multiplied (nullopt when a symbol is unbound or a dim is dynamic).
// fuse_matmul's groups: the kind and the matmuls' inner dimension ("matmul:norm_swiglu:k2048"),
// cols = the matmuls' output columns together, rows = the activations' rows.
struct GroupShape {
  std::string pattern, dtype;
  std::optional<int64_t> rows, cols;
};
GroupShape DescribeGroup(const Graph& g, const FusionGroup& grp, const Bindings& bindings);

// The config rules alone (step 1). `grp.decision` is the fusion passes' verdict. `size_gate`:
// apply min_tensor_elements. It is a guess for when nothing is measured (the seed's "small tensors
// do not pay for fusion"): with a profile, ShouldFuse leaves the size question to the profile or
// the cost model (on a GPU a launch costs more than a small tensor's bytes) and says so.
FusionDecision ApplyConfigRules(const Graph& g, const FusionGroup& grp, const FusionConfig& config,
                                const Bindings& bindings, bool size_gate = true);

// The whole decision for one group of a graph that went through the fusion passes.
FusionChoice ShouldFuse(const Graph& g, const FusionGroup& grp, const Bindings& bindings, const FusionConfig& config,
                        const ShouldFuseOptions& opts = {});

// Cost-model estimate of one group (exposed for tests): µs unfused and fused; nullopt when sizes are unknown.
struct CostEstimate {
  double unfused_us = 0, fused_us = 0;
  int64_t unfused_bytes = 0, fused_bytes = 0;
  int unfused_launches = 0;
};
std::optional<CostEstimate> EstimateCost(const Graph& g, const FusionGroup& grp, const Bindings& bindings,
                                         const DeviceConstants& c);

}  // namespace opfuse::scheduler
