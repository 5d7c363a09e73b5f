// `opfuse bench e2e`'s check that smart_schedule ran what its profile picks (issue 31).
//
// smart_schedule and always_fuse compile the same model graph through the same passes; they may
// differ only in the schedule pass's verdicts. Where the profile picks another plan for a group than
// always_fuse ran, smart must have run that other plan: an engine that compiled smart without
// consulting the profile (a lost profile pointer, bindings that never reach the scheduler) would run
// always's plan and report the same numbers with a smart label. IgnoredProfileChoices asks
// should_fuse, with the profile, about each group of always's compiled graph and lists the groups
// where the answer differs from always's plan while smart's compiled graph kept always's plan.
// Host-only (tests/passes/plan_check_test.cc).
#pragma once
#include <string>
#include <vector>

#include "opfuse/config.h"
#include "opfuse/graph.h"
#include "scheduler/profile_db.h"

namespace opfuse::bench {

// How a compiled group runs: "fused library", "fused jit", "ops one by one (library)", "unfused",
// with " gemv<=N" for fuse_matmul's groups.
std::string GroupPlanName(const FusionGroup& grp);

// One line per group of `always` (matched to `smart`'s by its nodes) where should_fuse with `profile`
// (at `bindings`, under smart's `config`) picks a plan other than always's and smart ran always's.
std::vector<std::string> IgnoredProfileChoices(const Graph& always, const Graph& smart, const scheduler::ProfileDb& profile,
                                               const Bindings& bindings, const FusionConfig& config);

}  // namespace opfuse::bench
