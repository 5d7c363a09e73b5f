// Pass `fuse_generic`: everything the patterns left gets a group. Elementwise chains and
// elementwise -> reduction -> elementwise row groups come from fusion::GroupGeneric (rules in
// src/fusion/generic.h); every other op becomes a "single" group whose reason says why it runs
// alone (library op, view, nothing to fuse with, a refused merge). Constants are unshared and fold
// into their consumer's group as scalars. With enable_fusion=false every op is a single group.
// Decisions here are structural; schedule then applies the size limits of the config.
#include <algorithm>

#include <fmt/format.h>

#include "fusion/generic.h"
#include "fusion/group_info.h"
#include "passes/pass.h"
#include "ir/graph_edit.h"

namespace opfuse {

namespace {

std::string GenericReason(const Graph& g, const std::vector<int>& nodes) {
  const auto ops = fusion::GroupOpNames(g, nodes);
  std::string list, reductions;
  for (size_t i = 0; i < ops.size(); ++i) list += (i ? ", " : "") + ops[i];
  for (int n : fusion::ComputeNodes(g, nodes))
    if (GetOpInfo(g.nodes[n].op).kind == FusionKind::kReduction)
      reductions += (reductions.empty() ? "" : ", ") + std::string(OpName(g.nodes[n].op));
  if (reductions.empty()) return fmt::format("elementwise chain of {} ops: {}", ops.size(), list);
  return fmt::format("row group of {} ops, elementwise -> {} -> elementwise over the last axis: {}", ops.size(), reductions,
                     list);
}

}  // namespace

Status FuseGeneric(Graph& g, const PassContext& ctx) {
  if (ctx.config.enable_fusion && UnshareConstants(g)) OPFUSE_RETURN_IF_ERROR(CompactKeepGroups(g));
  const int nn = static_cast<int>(g.nodes.size());
  std::vector<int> group_of(nn, -1);
  auto index = [&] {
    std::fill(group_of.begin(), group_of.end(), -1);
    for (size_t i = 0; i < g.groups.size(); ++i)
      for (int n : g.groups[i].nodes) group_of[n] = static_cast<int>(i);
  };
  index();

  if (!ctx.config.enable_fusion) {
    for (int n = 0; n < nn; ++n)
      if (!g.nodes[n].dead && group_of[n] < 0)
        g.groups.push_back(fusion::SingleGroup(n, FusionDecision::No("fusion disabled (enable_fusion=false)")));
  } else {
    const auto found = fusion::GroupGeneric(g, group_of, ctx.config);
    for (const auto& nodes : found.groups) {
      FusionGroup grp;
      grp.nodes = nodes;
      if (nodes.size() >= 2) {
        grp.kind = "generic";
        grp.decision = FusionDecision::Yes(GenericReason(g, nodes));
      } else {
        grp.kind = "single";
        grp.decision = FusionDecision::No(fusion::SingleReason(g, nodes[0], ctx.config, found.refused[nodes[0]]));
      }
      g.groups.push_back(std::move(grp));
    }
    index();
    // Constants fold into their (single, after unsharing) consumer's group.
    const auto users = g.Users();
    std::vector<char> is_output(g.values.size(), 0);
    for (int v : g.outputs) is_output[v] = 1;
    for (int n = 0; n < nn; ++n) {
      if (g.nodes[n].dead || group_of[n] >= 0 || g.nodes[n].op != OpKind::kConstant) continue;
      const auto& u = users[g.nodes[n].outputs[0]];
      if (u.size() == 1 && group_of[u[0]] >= 0 && !is_output[g.nodes[n].outputs[0]]) {
        auto& nodes = g.groups[group_of[u[0]]].nodes;
        nodes.insert(std::upper_bound(nodes.begin(), nodes.end(), n), n);
        group_of[n] = group_of[u[0]];
      }
    }
    // The rest (library, view, leftover composite, lone constants) run alone.
    for (int n = 0; n < nn; ++n)
      if (!g.nodes[n].dead && group_of[n] < 0)
        g.groups.push_back(fusion::SingleGroup(n, FusionDecision::No(fusion::SingleReason(g, n, ctx.config))));
  }
  std::sort(g.groups.begin(), g.groups.end(),
            [](const FusionGroup& a, const FusionGroup& b) { return a.nodes.front() < b.nodes.front(); });
  for (auto& grp : g.groups)
    if (grp.name.empty()) grp.name = fusion::KernelName(g, grp);
  return CheckGroupPartition(g);
}

}  // namespace opfuse
