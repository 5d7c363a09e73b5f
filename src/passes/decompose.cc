// Pass `decompose`: composite ops whose pattern is switched off (kill switch, fuse_patterns
// disabled, or enable_fusion=false) are replaced by their decomposition into primitives
// (OpDef::decompose, src/ops/composite_decompose.cc), so that "disabled" means the same thing
// whether the graph arrived traced in primitives or already as composite ops. A composite with no
// primitive form (softmax {causal=1}: the op set has no position index) stays one op; that is
// noted, and fuse_patterns gives it a group that says so. Decomposed values keep their names.
#include <fmt/format.h>

#include "fusion/patterns.h"
#include "ops/op_def.h"
#include "passes/pass.h"
#include "ir/graph_edit.h"

namespace opfuse {

namespace {
std::string WhyDisabled(const FusionConfig& c, const std::string& pattern) {
  if (!c.enable_fusion) return "fusion disabled (enable_fusion=false)";
  if (c.IsDisabled("fuse_patterns")) return "fuse_patterns disabled by OPFUSE_DISABLE";
  return fmt::format("pattern {} disabled by OPFUSE_DISABLE", pattern);
}
}  // namespace

Status Decompose(Graph& g, const PassContext& ctx) {
  bool changed = false;
  const int nn = static_cast<int>(g.nodes.size());
  for (int i = 0; i < nn; ++i) {
    if (g.nodes[i].dead || GetOpInfo(g.nodes[i].op).kind != FusionKind::kComposite) continue;
    const Node node = g.nodes[i];  // copy: decompose appends to g.nodes
    const fusion::PatternDef* p = fusion::PatternForOp(node.op);
    const std::string pattern = p ? p->name : OpName(node.op);
    if (ctx.config.PatternEnabled(pattern)) continue;
    const std::string subject = fmt::format("{} '{}'", OpName(node.op), g.values[node.outputs[0]].name);
    const std::string why = WhyDisabled(ctx.config, pattern);
    const OpDef& def = GetOpDef(node.op);
    if (!def.decompose) {
      ctx.Note("decompose", subject, FusionDecision::No(why + "; no decomposition registered, kept as one op"));
      continue;
    }
    const size_t nodes_before = g.nodes.size(), values_before = g.values.size();
    auto outs = def.decompose(g, node);
    if (!outs.ok() || outs->size() != node.outputs.size()) {
      g.nodes.resize(nodes_before);  // roll back whatever was appended
      g.values.resize(values_before);
      ctx.Note("decompose", subject,
               FusionDecision::No(fmt::format("{}; kept as one op: {}", why,
                                              outs.ok() ? "decomposition returned the wrong number of outputs" : outs.status().message())));
      continue;
    }
    for (size_t k = nodes_before; k < g.nodes.size(); ++k) g.nodes[k].line = node.line;
    for (size_t k = 0; k < node.outputs.size(); ++k) ReplaceValue(g, node.outputs[k], (*outs)[k]);
    g.nodes[i].dead = true;
    changed = true;
    ctx.Note("decompose", subject,
             FusionDecision::No(fmt::format("{}; decomposed into {} primitive ops", why, g.nodes.size() - nodes_before)));
  }
  if (!changed) return Status::Ok();
  OPFUSE_RETURN_IF_ERROR(CompactKeepGroups(g));
  return VerifyAndInfer(g);
}

}  // namespace opfuse
