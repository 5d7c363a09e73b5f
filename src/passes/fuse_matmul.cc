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
// The rewrites apply to bf16/f16 matmuls (the GEMV's types). When the bound row count is above
// kDecodeGemvMaxRows (opfuse/config.h; prefill) the executor runs the group's matmuls through cuBLASLt one by
// one (and the swiglu kernel after them): the group then only names what the decode step does.
// Off with OPFUSE_DISABLE=fuse_matmul (or enable_fusion=false).
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "passes/pass.h"
#include "passes/pass_util.h"

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
    std::vector<int> nodes = {gate, up, grp.nodes[0]};
    std::sort(nodes.begin(), nodes.end());
    grp.nodes = nodes;
    grp.kind = "matmul:swiglu";
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
    added.push_back({nodes, "matmul:siblings", FusionDecision::Yes(reason), "", ""});
  }

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
