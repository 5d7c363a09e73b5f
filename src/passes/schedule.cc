// Pass `schedule`: the verdict for each group, and how it will run.
//
// Each group's verdict, variant and reason come from scheduler::ShouldFuse (src/scheduler/
// should_fuse.h): the config rules (enable_fusion, group size, min_tensor_elements on the largest
// tensor with the --shape bindings; an unbound symbol keeps the group fusable, "size depends on
// T"), then — only when PassContext::profile is set — the measured profile and the cost model.
// Without a profile: "jit" for fused generic groups (and the pattern groups whose JIT kernel measured
// faster: row patterns off the 16-byte grid, geglu; should_fuse.cc, PatternOnTheJit), "library" for
// other fused pattern groups, library
// ops and composites that cannot be split, "unfused" (op by op) for everything else. The full
// answers (source, expected us saved, evidence) are left in PassContext::choices for `explain`.
// Ops left without a group (fuse_generic switched off) get single groups here, so the partition
// invariant holds after every pipeline.
#include <algorithm>

#include <fmt/format.h>

#include "fusion/group_info.h"
#include "passes/pass.h"
#include "ir/graph_edit.h"

namespace opfuse {

namespace {

// The variant the group runs: should_fuse's pick, or the requested one where the group has it.
Variant Resolve(const Graph& g, const FusionGroup& grp, scheduler::FusionChoice& choice, const PassContext& ctx) {
  const Variant want = ctx.variant;
  if (want == Variant::kAuto) return choice.variant;
  if (!grp.decision.fuse) {
    const bool one_op = grp.nodes.size() == 1 && g.nodes[grp.nodes[0]].op != OpKind::kConstant;
    return want == Variant::kJit && ctx.jit_single_ops && one_op ? Variant::kJit : choice.variant;
  }
  auto substitute = [&](Variant runs, const std::string& why) {
    choice.substitution = fmt::format("{} -> {}: {}", VariantName(want), VariantName(runs), why);
    return runs;
  };
  if (grp.matmul) return want == Variant::kLibrary ? want : substitute(Variant::kLibrary, "a matmul group runs the GEMV library kernel (no JIT form)");
  if (fusion::IsCollectiveGroup(grp))
    return want == Variant::kLibrary ? want : substitute(Variant::kLibrary, "a collective group runs on the communicator (no JIT form)");
  if (want == Variant::kLibrary && !fusion::HasFusedLibraryKernel(g, grp))
    return substitute(Variant::kJit, grp.nodes.size() == 1 ? "no library kernel for this op" : "no library kernel for a generic group");
  return want;
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
    g.groups.push_back(fusion::SingleGroup(id, FusionDecision::No(reason)));
  }
  std::sort(g.groups.begin(), g.groups.end(),
            [](const FusionGroup& a, const FusionGroup& b) { return a.nodes.front() < b.nodes.front(); });

  scheduler::ShouldFuseOptions opts;
  opts.profile = ctx.profile;
  ctx.choices.clear();
  for (auto& grp : g.groups) {
    scheduler::FusionChoice choice = scheduler::ShouldFuse(g, grp, ctx.bindings, ctx.config, opts);
    grp.decision = choice.decision;
    grp.variant = Resolve(g, grp, choice, ctx);
    if (grp.matmul) grp.matmul->gemv_max_rows = choice.gemv_max_rows;
    if (grp.name.empty()) grp.name = fusion::KernelName(g, grp);
    ctx.choices.push_back(std::move(choice));
  }
  return CheckGroupPartition(g);
}

}  // namespace opfuse
