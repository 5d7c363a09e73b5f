// Pass `fuse_patterns`: rewrites the primitive subgraphs of known patterns into composite ops and
// gives every composite op a `pattern:<name>` group.
//
// Patterns are tried one after another in registry order (src/fusion/patterns.h), each over the
// nodes from last to first, so a pattern's largest form is seen at its root before a smaller form
// could match inside it. Enabled patterns rewrite (ApplyRewrite); a disabled pattern still
// matches, and its nodes become a `pattern:<name>` group with decision no ("pattern swiglu disabled
// by OPFUSE_DISABLE") that later patterns and the generic fuser leave alone — the kill switch takes
// that fusion out entirely, it does not hand the ops to another kernel (except for a pattern that
// only extends another, PatternDef::claim_when_disabled: with add_rms_norm off, the add stays and
// the RMSNorm is still fused). A structural match blocked
// by an escaping interior value is noted with the reason; its ops stay for generic grouping.
// Constants are unshared first so each scalar (eps, scale) belongs to exactly one match; the ones
// a rewrite absorbed as attributes are dropped.
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "fusion/group_info.h"
#include "fusion/patterns.h"
#include "ops/op_def.h"
#include "passes/pass.h"
#include "ir/graph_edit.h"

namespace opfuse {

namespace {

constexpr const char* kPass = "fuse_patterns";

// Reason for a composite op that arrived in the input (not produced by a rewrite here).
FusionDecision InputCompositeDecision(const Graph& g, int n, const fusion::PatternDef* p, const PassContext& ctx) {
  const std::string name = p ? p->name : OpName(g.nodes[n].op);
  if (ctx.config.PatternEnabled(name))
    return FusionDecision::Yes(fmt::format("composite op {} given in the input", OpName(g.nodes[n].op)));
  // decompose left it: either that pass is off or the op has no primitive form.
  std::string why = ctx.config.IsDisabled("decompose") ? "decompose is disabled"
                    : g.nodes[n].op == OpKind::kSoftmax && AttrInt(g.nodes[n].attrs, "causal", 0) != 0
                        ? "causal softmax has no primitive form"
                        : "it has no primitive decomposition";
  return FusionDecision::No(fmt::format("pattern {} disabled by OPFUSE_DISABLE, but {}, so it runs as one op", name, why));
}

}  // namespace

Status FusePatterns(Graph& g, const PassContext& ctx) {
  if (!ctx.config.enable_fusion) return Status::Ok();  // fuse_generic gives every op its own group
  if (UnshareConstants(g)) OPFUSE_RETURN_IF_ERROR(CompactKeepGroups(g));

  std::set<int> claimed;  // nodes of groups made here (disabled patterns)
  for (const auto& grp : g.groups) claimed.insert(grp.nodes.begin(), grp.nodes.end());
  std::map<std::string, std::string> matched;  // composite's first output name -> reason
  for (const auto& pattern : fusion::AllPatterns()) {
    const bool enabled = ctx.config.PatternEnabled(pattern.name);
    auto users = g.Users();
    for (int i = static_cast<int>(g.nodes.size()) - 1; i >= 0; --i) {
      if (g.nodes[i].dead || claimed.count(i)) continue;
      auto outcome = fusion::MatchAt(g, users, pattern, i, &claimed);
      const std::string root_name = g.values[g.nodes[i].outputs[0]].name;
      if (!outcome.match) {
        if (!outcome.blocked.empty())
          ctx.Note(kPass, fmt::format("{} at '{}'", pattern.name, root_name), FusionDecision::No(outcome.blocked));
        continue;
      }
      const auto& m = *outcome.match;
      if (enabled) {
        const int id = fusion::ApplyRewrite(g, m);
        matched[g.values[g.nodes[id].outputs[0]].name] = "matched " + m.rewrite.what;
        users = g.Users();
        continue;
      }
      // Disabled: keep the primitives, unfused, as one visible group — unless the match reaches
      // into another pattern's composite op (Add+RMSNorm over an rms_norm op), which keeps its own,
      // or the pattern only extends another one (claim_when_disabled=false).
      bool has_composite = false;
      for (int n : m.binding.nodes) has_composite |= GetOpInfo(g.nodes[n].op).kind == FusionKind::kComposite;
      const std::string reason = fmt::format("pattern {} disabled by OPFUSE_DISABLE", pattern.name);
      if (has_composite || !pattern.claim_when_disabled) {
        ctx.Note(kPass, fmt::format("{} at '{}'", pattern.name, root_name), FusionDecision::No(reason));
        continue;
      }
      FusionGroup grp;
      grp.nodes = m.binding.nodes;
      grp.nodes.insert(grp.nodes.end(), m.binding.constants.begin(), m.binding.constants.end());
      std::sort(grp.nodes.begin(), grp.nodes.end());
      grp.kind = "pattern:" + pattern.name;
      grp.decision = FusionDecision::No(reason + " (would have matched " + m.rewrite.what + ")");
      claimed.insert(grp.nodes.begin(), grp.nodes.end());
      g.groups.push_back(std::move(grp));
    }
  }
  RemoveOrphanConstants(g);
  OPFUSE_RETURN_IF_ERROR(CompactKeepGroups(g));

  // Every composite op (rewritten here or given in the input) is a pattern group.
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (GetOpInfo(g.nodes[n].op).kind != FusionKind::kComposite) continue;
    const fusion::PatternDef* p = fusion::PatternForOp(g.nodes[n].op);
    FusionGroup grp;
    grp.nodes = {static_cast<int>(n)};
    grp.kind = "pattern:" + (p ? p->name : std::string(OpName(g.nodes[n].op)));
    auto it = matched.find(g.values[g.nodes[n].outputs[0]].name);
    grp.decision = it != matched.end() ? FusionDecision::Yes(it->second)
                                       : InputCompositeDecision(g, static_cast<int>(n), p, ctx);
    g.groups.push_back(std::move(grp));
  }
  std::sort(g.groups.begin(), g.groups.end(),
            [](const FusionGroup& a, const FusionGroup& b) { return a.nodes.front() < b.nodes.front(); });
  for (auto& grp : g.groups)
    if (grp.name.empty()) grp.name = fusion::KernelName(g, grp);
  return VerifyAndInfer(g);
}

}  // namespace opfuse
