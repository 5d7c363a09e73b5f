// Pass `fuse_matmul`: horizontal and epilogue fusion of matmuls for the decode GEMV
// (src/kernels/gemv.h).
//
// At decode a Linear layer is a weight stream: one launch per matmul costs more than its math, and
// a transformer layer has several matmuls reading the same activations. Two rewrites of groups
// (no op changes: the graph is the same, only the partition is):
//   1. "matmul:swiglu" — silu(x·Wgᵀ) * (x·Wuᵀ): a fused swiglu pattern group whose gate and up
//      are each made by a matmul used only there, both reading the same x with weights [N, K]
//      (transpose_b) that are graph inputs/params, same dtype, bias on both or neither. One GEMV
//      pass dots gate row j and up row j and writes silu(g)*u; gate and up are never stored (the
//      CPU reference keeps them in f32, as inside any fused group).
//   2. "matmul:siblings" — two to four matmuls that read the same x with such weights (the q, k, v
//      projections): one GEMV launch over the concatenated columns.
//   3. Norm prologue — "matmul:norm_swiglu", "matmul:norm_siblings", "matmul:norm" (one matmul, e.g.
//      the LM head): the group's x is the first output of a fused rms_norm / add_rms_norm group used
//      by nothing but these matmuls; the norm joins the group and each GEMV block normalises the
//      row itself (add_rms_norm's sum, used later by the residual, is still written).
//   4. RoPE epilogue — "..._rope": a sibling's output only reshaped to [..., H, D] and rotated by a
//      fused rope group (q and k before attention) joins the group: the GEMV rotates each head's
//      column pairs in its epilogue. OPFUSE_DISABLE=matmul_norm / matmul_rope turn 3 / 4 off.
// The rewrites apply to bf16/f16 matmuls (the GEMV's types). When the bound row count is above the
// group's GEMV rows (MatmulGroupPlan::gemv_max_rows: kDecodeGemvMaxRows, opfuse/config.h, or up to
// kGemvCapacityRows where the schedule pass's profile measured the fused group there) the executor runs
// the group's matmuls through cuBLASLt one by one (and the swiglu kernel after them): the group then
// only names what the decode step does. Whether the group runs fused at all is the schedule pass's
// choice (scheduler/should_fuse.h: the fused group, or its ops one by one).
// Each group carries its MatmulGroupPlan (opfuse/graph.h): norm prologue, the matmuls in segment
// order (gate before up), the rope of each, the swiglu epilogue — the executor builds the GEMV's
// arguments from it and never re-derives the group's structure.
// Off with OPFUSE_DISABLE=fuse_matmul (or enable_fusion=false).
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "passes/pass.h"
#include "ir/graph_edit.h"

namespace opfuse {

namespace {

constexpr const char* kPass = "fuse_matmul";
constexpr size_t kMaxSiblings = 4;  // kernels::kGemvMaxSegments

bool IsWeightMatmul(const Graph& g, int n) {
  const Node& node = g.nodes[n];
  if (node.dead || node.op != OpKind::kMatmul || AttrInt(node.attrs, "transpose_b", 0) == 0) return false;
  const Value& a = g.values[node.inputs[0]];
  const Value& w = g.values[node.inputs[1]];
  if (a.type.dtype != DType::kBF16 && a.type.dtype != DType::kF16) return false;
  if (w.type.dtype != a.type.dtype || w.producer >= 0 || w.type.shape.size() != 2) return false;
  return w.type.shape[0].is_static() && w.type.shape[1].is_static();
}

// A matmul group with an empty plan (filled by the caller).
FusionGroup NewGroup(std::vector<int> nodes, std::string kind, FusionDecision decision) {
  FusionGroup grp;
  grp.nodes = std::move(nodes);
  grp.kind = std::move(kind);
  grp.decision = std::move(decision);
  grp.matmul.emplace();
  return grp;
}

std::string Names(const Graph& g, const std::vector<int>& nodes) {
  std::string s;
  for (int n : nodes) s += (s.empty() ? "" : ", ") + g.values[g.nodes[n].outputs[0]].name;
  return s;
}

}  // namespace

Status FuseMatmul(Graph& g, const PassContext& ctx) {
  if (!ctx.config.enable_fusion) return Status::Ok();
  const auto users = g.Users();
  // Which group each node is in now (matmuls sit in "single" groups from fuse_generic).
  std::map<int, int> group_of;
  for (size_t gi = 0; gi < g.groups.size(); ++gi)
    for (int n : g.groups[gi].nodes) group_of[n] = static_cast<int>(gi);
  auto free_matmul = [&](int n) {
    if (!IsWeightMatmul(g, n)) return false;
    auto it = group_of.find(n);
    return it == group_of.end() || g.groups[it->second].kind == "single";
  };
  std::set<int> taken;  // matmul nodes claimed here
  std::vector<char> drop(g.groups.size(), 0);

  // 1. SwiGLU epilogue.
  for (size_t gi = 0; gi < g.groups.size(); ++gi) {
    FusionGroup& grp = g.groups[gi];
    if (grp.kind != "pattern:swiglu" || !grp.decision.fuse || grp.nodes.size() != 1) continue;
    const Node& sw = g.nodes[grp.nodes[0]];
    if (sw.op != OpKind::kSwiglu) continue;
    const int gate = g.values[sw.inputs[0]].producer, up = g.values[sw.inputs[1]].producer;
    if (gate < 0 || up < 0 || gate == up || !free_matmul(gate) || !free_matmul(up)) continue;
    const Node &mg = g.nodes[gate], &mu = g.nodes[up];
    std::string why;
    if (mg.inputs[0] != mu.inputs[0]) why = "gate and up read different activations";
    else if (mg.inputs.size() != mu.inputs.size()) why = "bias on one of gate/up only";
    else if (users[mg.outputs[0]].size() != 1 || users[mu.outputs[0]].size() != 1 || g.IsGraphOutput(mg.outputs[0]) ||
             g.IsGraphOutput(mu.outputs[0]))
      why = "gate or up is also used outside the swiglu";
    if (!why.empty()) {
      ctx.Note(kPass, fmt::format("swiglu '{}'", g.values[sw.outputs[0]].name), FusionDecision::No("matmul epilogue not fused: " + why));
      continue;
    }
    const std::string reason = fmt::format(
        "matmul epilogue: {} and {} read {} with [{}, {}] weights; one GEMV pass computes both rows and writes "
        "silu(gate)*up when rows <= {} (decode); cuBLASLt + the swiglu kernel above",
        g.values[mg.outputs[0]].name, g.values[mu.outputs[0]].name, g.values[mg.inputs[0]].name,
        g.values[mg.inputs[1]].type.shape[0].ToString(), g.values[mg.inputs[1]].type.shape[1].ToString(),
        kDecodeGemvMaxRows);
    for (int n : {gate, up}) {
      if (auto it = group_of.find(n); it != group_of.end()) drop[it->second] = 1;
      taken.insert(n);
    }
    const int sw_id = grp.nodes[0];
    std::vector<int> nodes = {gate, up, sw_id};
    std::sort(nodes.begin(), nodes.end());
    grp.nodes = nodes;
    grp.kind = "matmul:swiglu";
    // The GEMV's swiglu epilogue reads segment 0 as gate and 1 as up, whatever their graph order.
    grp.matmul.emplace();
    grp.matmul->matmuls = {gate, up};
    grp.matmul->ropes = {-1, -1};
    grp.matmul->swiglu = sw_id;
    grp.decision = FusionDecision::Yes(reason);
    grp.name.clear();
  }

  // 2. Siblings: weight matmuls that share their activations.
  std::map<std::pair<int, size_t>, std::vector<int>> by_input;  // (x, operand count) -> matmuls
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const int id = static_cast<int>(n);
    if (taken.count(id) || !free_matmul(id)) continue;
    by_input[{g.nodes[n].inputs[0], g.nodes[n].inputs.size()}].push_back(id);
  }
  std::vector<FusionGroup> added;
  for (auto& [key, nodes] : by_input) {
    if (nodes.size() < 2) continue;
    if (nodes.size() > kMaxSiblings) {
      ctx.Note(kPass, fmt::format("matmuls of '{}'", g.values[key.first].name),
               FusionDecision::No(fmt::format("{} sibling matmuls; the GEMV takes at most {} per launch: first {} fused",
                                              nodes.size(), kMaxSiblings, kMaxSiblings)));
      nodes.resize(kMaxSiblings);
    }
    std::sort(nodes.begin(), nodes.end());
    int64_t cols = 0;
    for (int n : nodes) {
      cols += g.values[g.nodes[n].inputs[1]].type.shape[0].value;
      if (auto it = group_of.find(n); it != group_of.end()) drop[it->second] = 1;
      taken.insert(n);
    }
    const std::string reason = fmt::format(
        "horizontal: {} matmuls ({}) read {}; one GEMV launch over {} concatenated columns when rows <= {} "
        "(decode); cuBLASLt per matmul above",
        nodes.size(), Names(g, nodes), g.values[key.first].name, cols, kDecodeGemvMaxRows);
    FusionGroup sg = NewGroup(nodes, "matmul:siblings", FusionDecision::Yes(reason));
    sg.matmul->matmuls = nodes;
    sg.matmul->ropes.assign(nodes.size(), -1);
    added.push_back(std::move(sg));
  }

  // 3. Norm prologue: the activations of a matmul group (or of one free weight matmul, e.g. the LM
  //    head) made by a fused rms_norm / add_rms_norm group and used by nothing else — the GEMV
  //    computes the norm per block instead of reading a stored row.
  const bool norm_on = !ctx.config.IsDisabled("matmul_norm");
  auto absorb_norm = [&](FusionGroup& grp, const std::vector<int>& matmuls) -> bool {
    if (!norm_on) return false;
    const int x = g.nodes[matmuls[0]].inputs[0];
    const int pn = g.values[x].producer;
    if (pn < 0) return false;
    const Node& norm = g.nodes[pn];
    if (norm.op != OpKind::kRmsNorm && norm.op != OpKind::kAddRmsNorm) return false;
    auto it = group_of.find(pn);
    if (it == group_of.end() || drop[it->second]) return false;
    const FusionGroup& ng = g.groups[it->second];
    if (!ng.decision.fuse || ng.nodes.size() != 1 || norm.outputs[0] != x) return false;
    const std::string what = fmt::format("{} '{}'", OpName(norm.op), g.values[x].name);
    if (g.IsGraphOutput(x) || users[x].size() != matmuls.size()) {
      ctx.Note(kPass, what, FusionDecision::No("norm prologue not fused: its output is used outside the matmuls"));
      return false;
    }
    drop[it->second] = 1;
    grp.matmul->norm = pn;
    grp.nodes.push_back(pn);
    std::sort(grp.nodes.begin(), grp.nodes.end());
    grp.kind = grp.kind == "matmul:swiglu" ? "matmul:norm_swiglu" : grp.kind == "matmul:siblings" ? "matmul:norm_siblings" : "matmul:norm";
    grp.decision = FusionDecision::Yes(
        grp.decision.reason + fmt::format("; prologue: {} computed per GEMV block (x staged in shared memory as f32) when "
                                          "rows <= {}, the norm kernel above",
                                          what, kDecodeGemvMaxRows));
    grp.name.clear();
    return true;
  };
  for (size_t gi = 0; gi < g.groups.size(); ++gi) {
    FusionGroup& grp = g.groups[gi];
    if (drop[gi] || grp.kind != "matmul:swiglu") continue;
    std::vector<int> mm;
    for (int n : grp.nodes)
      if (g.nodes[n].op == OpKind::kMatmul) mm.push_back(n);
    absorb_norm(grp, mm);
  }
  for (auto& a : added) absorb_norm(a, std::vector<int>(a.nodes.begin(), a.nodes.end()));
  for (size_t gi = 0; gi < g.groups.size(); ++gi) {
    const FusionGroup& grp = g.groups[gi];
    if (drop[gi] || grp.kind != "single" || grp.nodes.size() != 1) continue;
    const int n = grp.nodes[0];
    if (taken.count(n) || !free_matmul(n)) continue;
    const std::string reason = fmt::format("matmul {} reads [{}, {}] weights", g.values[g.nodes[n].outputs[0]].name,
                                           g.values[g.nodes[n].inputs[1]].type.shape[0].ToString(),
                                           g.values[g.nodes[n].inputs[1]].type.shape[1].ToString());
    FusionGroup mg = NewGroup({n}, "matmul:single", FusionDecision::Yes(reason));
    mg.matmul->matmuls = {n};
    mg.matmul->ropes = {-1};
    if (absorb_norm(mg, {n})) {
      drop[gi] = 1;
      taken.insert(n);
      added.push_back(std::move(mg));
    }
  }

  // 4. RoPE epilogue: a sibling matmul whose output is only reshaped to [..., H, D] and rotated by a
  //    fused rope group (the q and k projections) — the GEMV computes each head's column pairs
  //    (c, c + D/2) in one warp and writes the rotated values; the reshape stays a view.
  const bool rope_on = !ctx.config.IsDisabled("matmul_rope");
  auto single_group_of = [&](int n) -> int {
    auto it = group_of.find(n);
    if (it == group_of.end() || drop[it->second] || g.groups[it->second].nodes.size() != 1) return -1;
    return it->second;
  };
  auto absorb_rope = [&](FusionGroup& grp) {
    if (!rope_on) return;
    std::vector<int> ropes;
    MatmulGroupPlan& plan = *grp.matmul;
    for (size_t i = 0; i < plan.matmuls.size(); ++i) {
      const Node& mm = g.nodes[plan.matmuls[i]];
      const int out = mm.outputs[0];
      if (users[out].size() != 1 || g.IsGraphOutput(out)) continue;
      const int rn = users[out][0];
      if (g.nodes[rn].op != OpKind::kReshape || g.IsGraphOutput(g.nodes[rn].outputs[0])) continue;
      const int rv = g.nodes[rn].outputs[0];
      if (users[rv].size() != 1) continue;
      const int pn = users[rv][0];
      const Node& rope = g.nodes[pn];
      const int rg = single_group_of(rn), pg = single_group_of(pn);
      if (rope.op != OpKind::kRope || rope.inputs[0] != rv || rg < 0 || pg < 0) continue;
      if (g.groups[pg].kind != "pattern:rope" || !g.groups[pg].decision.fuse) continue;
      // [..., H, D] with H * D = n; cos/sin [..., 1, D] over the same leading dims, same dtype.
      const Shape& xs = g.values[rv].type.shape;
      const int64_t n = g.values[mm.inputs[1]].type.shape[0].value;
      const size_t rank = xs.size();
      if (rank < 3 || !xs[rank - 1].is_static() || !xs[rank - 2].is_static() || xs[rank - 1].value % 2 != 0 ||
          xs[rank - 1].value * xs[rank - 2].value != n)
        continue;
      bool tables_ok = true;
      for (int t : {rope.inputs[1], rope.inputs[2]}) {
        const TensorType& tt = g.values[t].type;
        tables_ok &= tt.dtype == g.values[rv].type.dtype && tt.shape.size() == rank && tt.shape[rank - 2] == Dim(1) &&
                     tt.shape[rank - 1] == xs[rank - 1];
        for (size_t d = 0; d + 2 < rank && tables_ok; ++d) tables_ok &= tt.shape[d] == xs[d];
      }
      if (!tables_ok) {
        ctx.Note(kPass, fmt::format("rope '{}'", g.values[rope.outputs[0]].name),
                 FusionDecision::No("rope epilogue not fused: cos/sin are not [..., 1, head_dim] tables over the rows"));
        continue;
      }
      drop[rg] = drop[pg] = 1;
      grp.nodes.push_back(rn);
      grp.nodes.push_back(pn);
      plan.ropes[i] = pn;
      plan.views.push_back(rn);
      ropes.push_back(pn);
    }
    if (ropes.empty()) return;
    std::sort(grp.nodes.begin(), grp.nodes.end());
    grp.kind += "_rope";
    std::string names;
    for (int r : ropes) names += (names.empty() ? "" : ", ") + g.values[g.nodes[r].outputs[0]].name;
    grp.decision = FusionDecision::Yes(grp.decision.reason +
                                       fmt::format("; epilogue: rope ({}) — a warp computes each head's columns c and "
                                                   "c + head_dim/2 and writes them rotated",
                                                   names));
    grp.name.clear();
  };
  for (auto& a : added)
    if (a.kind == "matmul:siblings" || a.kind == "matmul:norm_siblings") absorb_rope(a);

  std::vector<FusionGroup> kept;
  for (size_t gi = 0; gi < g.groups.size(); ++gi)
    if (!drop[gi]) kept.push_back(std::move(g.groups[gi]));
  for (auto& a : added) kept.push_back(std::move(a));
  std::sort(kept.begin(), kept.end(),
            [](const FusionGroup& a, const FusionGroup& b) { return a.nodes.front() < b.nodes.front(); });
  g.groups = std::move(kept);
  return Status::Ok();
}

}  // namespace opfuse
