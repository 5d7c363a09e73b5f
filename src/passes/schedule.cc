// Pass `schedule`: the verdict for each group, and how it will run.
//
// For now this applies the config part of should_fuse (DESIGN.md "Scheduler"), in order:
// enable_fusion, group size (min_nodes_for_fusion / max_group_size, for generic groups — a pattern
// group is one composite op standing for several primitives), then min_tensor_elements on the
// largest tensor the group touches, using the --shape bindings; with a symbol unbound the size is
// unknown, the group stays fusable and the reason says "size depends on T". The profile database
// and cost model come later and slot in after these rules. Variants: "jit" for fused generic
// groups, "library" for fused pattern groups, library ops and composites that cannot be split,
// "unfused" (op by op) for everything else. Ops left without a group (fuse_generic switched off)
// get single groups here, so the partition invariant holds after every pipeline.
#include <algorithm>

#include <fmt/format.h>

#include "fusion/group_info.h"
#include "ops/op_def.h"
#include "passes/pass.h"
#include "passes/pass_util.h"

namespace opfuse {

namespace {

// A composite op that can only run as itself (no primitive form, e.g. causal softmax).
bool Indivisible(const Graph& g, int n) {
  const Node& node = g.nodes[n];
  if (GetOpInfo(node.op).kind != FusionKind::kComposite) return false;
  const OpDef& def = GetOpDef(node.op);
  if (!def.decompose) return true;
  Graph scratch = g;
  return !def.decompose(scratch, node).ok();
}

FusionDecision ApplyConfig(const Graph& g, const FusionGroup& grp, const PassContext& ctx) {
  const FusionConfig& c = ctx.config;
  if (!c.enable_fusion) return FusionDecision::No("fusion disabled (enable_fusion=false)");
  const bool pattern = grp.kind.rfind("pattern:", 0) == 0;
  const int ops = static_cast<int>(fusion::ComputeNodes(g, grp.nodes).size());
  if (!pattern && ops > c.max_group_size)
    return FusionDecision::No(fmt::format("group of {} ops > max_group_size {}", ops, c.max_group_size));
  if (!pattern && ops < c.min_nodes_for_fusion)
    return FusionDecision::No(fmt::format("group of {} ops < min_nodes_for_fusion {}", ops, c.min_nodes_for_fusion));
  const auto size = fusion::MeasureGroup(g, grp.nodes, ctx.bindings);
  if (size.largest_known && *size.largest_known >= c.min_tensor_elements) return grp.decision;
  if (!size.unbound.empty()) {
    std::string syms;
    for (const auto& s : size.unbound) syms += (syms.empty() ? "" : ", ") + s;
    return FusionDecision::Yes(grp.decision.reason + "; size depends on " + syms);
  }
  if (size.largest_known)
    return FusionDecision::No(fmt::format("tensor has {} elements < min_tensor_elements {}{}", *size.largest_known,
                                          c.min_tensor_elements,
                                          size.largest_known_at.empty() ? "" : " (at " + size.largest_known_at + ")"));
  return grp.decision;
}

}  // namespace

Status Schedule(Graph& g, const PassContext& ctx) {
  // Ops no earlier pass grouped (fuse_generic switched off).
  std::vector<char> grouped(g.nodes.size(), 0);
  for (const auto& grp : g.groups)
    for (int n : grp.nodes) grouped[n] = 1;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (g.nodes[n].dead || grouped[n]) continue;
    const int id = static_cast<int>(n);
    std::string reason = fusion::IsGenericFusible(g.nodes[n].op) || g.nodes[n].op == OpKind::kConstant
                             ? "fuse_generic disabled by OPFUSE_DISABLE"
                             : fusion::SingleReason(g, id, ctx.config);
    g.groups.push_back({{id}, "single", FusionDecision::No(reason), "", ""});
  }
  std::sort(g.groups.begin(), g.groups.end(),
            [](const FusionGroup& a, const FusionGroup& b) { return a.nodes.front() < b.nodes.front(); });

  for (auto& grp : g.groups) {
    if (grp.decision.fuse) grp.decision = ApplyConfig(g, grp, ctx);
    bool library = false;
    for (int n : grp.nodes)
      library |= GetOpInfo(g.nodes[n].op).kind == FusionKind::kLibrary || Indivisible(g, n);
    const bool pattern = grp.kind.rfind("pattern:", 0) == 0;
    if (grp.decision.fuse) grp.variant = pattern ? "library" : "jit";
    else grp.variant = library ? "library" : "unfused";
    if (grp.name.empty()) grp.name = fusion::KernelName(g, grp);
  }
  return CheckGroupPartition(g);
}

}  // namespace opfuse
