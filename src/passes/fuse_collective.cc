// Pass `fuse_collective`: an all_reduce whose only use is the add_rms_norm after it becomes one
// group with it, "collective:all_reduce_add_rms_norm" (tensor parallelism, docs/tensor_parallel.md).
//
// A row-parallel layer's partial output is summed over the ranks, added to the residual stream and
// normalised: three steps that each read and write the whole row. On the CUDA backend the group runs
// as one launch where the rank's communicator takes it (DeviceCommunicator::AllReduceAddRmsNorm:
// the one-shot all-reduce kernel, at the sizes the transport measurement gave it), else as the
// all-reduce followed by the add_rms_norm kernel — what ran before the group existed. The group
// changes no math: the sum is rounded to the dtype as the all_reduce's output (members round at
// their boundaries, as a matmul group's), so the CPU reference runs its members one by one.
//
// Runs after fuse_matmul: an add_rms_norm that became a decode GEMV's norm prologue stays there (the
// GEMV reads the all-reduce's output; fusing it here would cost the prologue its place), so at decode
// the group forms where the add_rms_norm stands alone — the final norm before the LM head, and every
// layer at row counts where fuse_matmul's groups run their members one by one or were not formed
// (prefill). Conditions: the add_rms_norm is a fused pattern group of its own; one of its two
// addends is the output of an all_reduce (world > 1) used by nothing else and not a graph output,
// with the same type as the sum. Off with OPFUSE_DISABLE=fuse_collective (or enable_fusion=false).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "passes/pass.h"

namespace opfuse {

Status FuseCollective(Graph& g, const PassContext& ctx) {
  if (!ctx.config.enable_fusion) return Status::Ok();
  const auto users = g.Users();
  std::map<int, int> group_of;
  for (size_t gi = 0; gi < g.groups.size(); ++gi)
    for (int n : g.groups[gi].nodes) group_of[n] = static_cast<int>(gi);
  std::vector<char> drop(g.groups.size(), 0);
  for (size_t gi = 0; gi < g.groups.size(); ++gi) {
    FusionGroup& grp = g.groups[gi];
    if (grp.kind != "pattern:add_rms_norm" || !grp.decision.fuse || grp.nodes.size() != 1) continue;
    const Node& norm = g.nodes[grp.nodes[0]];
    if (norm.dead || norm.op != OpKind::kAddRmsNorm) continue;
    for (int slot : {0, 1}) {
      const int v = norm.inputs[slot];
      const int ar = g.values[v].producer;
      if (ar < 0 || g.nodes[ar].dead || g.nodes[ar].op != OpKind::kAllReduce) continue;
      if (AttrInt(g.nodes[ar].attrs, "world", 1) < 2) continue;
      const std::string subject = fmt::format("all_reduce '{}' -> add_rms_norm '{}'", g.values[v].name,
                                              g.values[norm.outputs[0]].name);
      auto skip = [&](std::string why) { ctx.Note("fuse_collective", subject, FusionDecision::No(std::move(why))); };
      if (users[v].size() != 1 || g.IsGraphOutput(v) || norm.inputs[0] == norm.inputs[1]) {
        skip("the all-reduced value has other uses");
        continue;
      }
      if (!(g.values[v].type == g.values[norm.outputs[1]].type)) {
        skip("the all-reduced value and the sum differ in type");
        continue;
      }
      auto single = group_of.find(ar);
      if (single != group_of.end() && g.groups[single->second].kind != "single") {
        skip(fmt::format("the all_reduce is already in a {} group", g.groups[single->second].kind));
        continue;
      }
      if (single != group_of.end()) drop[single->second] = 1;
      grp.nodes = {ar, grp.nodes[0]};
      grp.kind = "collective:all_reduce_add_rms_norm";
      grp.decision = FusionDecision::Yes(fmt::format(
          "{}: one launch on the rank's communicator where its one-shot transport takes the message "
          "(sum over the ranks, residual add, RMSNorm), else the all-reduce then the add_rms_norm kernel",
          subject));
      grp.name.clear();
      break;
    }
  }
  std::vector<FusionGroup> kept;
  for (size_t gi = 0; gi < g.groups.size(); ++gi)
    if (!drop[gi]) kept.push_back(std::move(g.groups[gi]));
  std::sort(kept.begin(), kept.end(), [](const FusionGroup& a, const FusionGroup& b) { return a.nodes.front() < b.nodes.front(); });
  g.groups = std::move(kept);
  return Status::Ok();
}

}  // namespace opfuse
