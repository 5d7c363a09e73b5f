// See plan_check.h.
#include "bench/plan_check.h"

#include <map>
#include <optional>

#include <fmt/format.h>

#include "scheduler/should_fuse.h"

namespace opfuse::bench {

namespace {

// `rows`: the group's rows where known — a fuse_matmul group then says whether its one GEMV launch
// applies (the GEMV rows only matter above kDecodeGemvMaxRows); else its GEMV rows.
std::string PlanName(const FusionGroup& grp, const FusionDecision& d, Variant v, int64_t gemv_rows,
                     std::optional<int64_t> rows = std::nullopt) {
  std::string s = d.fuse ? fmt::format("fused {}", VariantName(v))
                  : v == Variant::kLibrary ? std::string("ops one by one (library)")
                                           : std::string(VariantName(v));
  if (grp.matmul && d.fuse)
    s += rows ? (*rows <= gemv_rows ? " as one GEMV launch" : " with its matmuls on cuBLASLt")
         : gemv_rows == 0 ? std::string(" with its matmuls on cuBLASLt")
                          : fmt::format(" gemv<={}", gemv_rows);
  return s;
}

// The GEMV rows of a compiled group (only fuse_matmul's groups have them).
int64_t GemvRows(const FusionGroup& grp) { return grp.matmul ? grp.matmul->gemv_max_rows : kDecodeGemvMaxRows; }

}  // namespace

std::string GroupPlanName(const FusionGroup& grp) { return PlanName(grp, grp.decision, grp.variant, GemvRows(grp)); }

std::vector<std::string> IgnoredProfileChoices(const Graph& always, const Graph& smart, const scheduler::ProfileDb& profile,
                                               const Bindings& bindings, const FusionConfig& config) {
  std::map<std::vector<int>, const FusionGroup*> smart_groups;
  for (const auto& grp : smart.groups) smart_groups[grp.nodes] = &grp;
  scheduler::ShouldFuseOptions opts;
  opts.profile = &profile;
  std::vector<std::string> out;
  for (size_t gi = 0; gi < always.groups.size(); ++gi) {
    const FusionGroup& a = always.groups[gi];
    const auto it = smart_groups.find(a.nodes);
    if (it == smart_groups.end()) continue;  // a partition of its own: smart's plan differs anyway
    const scheduler::FusionChoice c = scheduler::ShouldFuse(always, a, bindings, config, opts);
    const std::optional<int64_t> rows = scheduler::DescribeGroup(always, a, bindings).rows;
    const FusionGroup& s = *it->second;
    const std::string picked = PlanName(a, c.decision, c.variant, c.gemv_max_rows, rows);
    const std::string ran_always = PlanName(a, a.decision, a.variant, GemvRows(a), rows);
    const std::string ran_smart = PlanName(s, s.decision, s.variant, GemvRows(s), rows);
    if (picked != ran_always && ran_smart == ran_always)
      out.push_back(fmt::format("group {} {} ({}): the profile picks {}, smart_schedule ran always_fuse's {} ({})", gi,
                                a.name.empty() ? a.kind : a.name, a.kind, picked, ran_smart, c.decision.reason));
  }
  return out;
}

}  // namespace opfuse::bench
