// Describing fusion groups (see group_info.h): op lists, sizes, kernel names, single-op reasons.
#include "fusion/group_info.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace opfuse::fusion {

std::vector<int> ComputeNodes(const Graph& g, const std::vector<int>& nodes) {
  std::vector<int> out;
  for (int n : nodes)
    if (g.nodes[n].op != OpKind::kConstant) out.push_back(n);
  return out;
}

namespace {
std::vector<int> ListedNodes(const Graph& g, const std::vector<int>& nodes) {
  auto c = ComputeNodes(g, nodes);
  return c.empty() ? nodes : c;
}
}  // namespace

std::vector<std::string> GroupOpNames(const Graph& g, const std::vector<int>& nodes) {
  std::vector<std::string> out;
  for (int n : ListedNodes(g, nodes)) out.push_back(OpName(g.nodes[n].op));
  return out;
}

std::vector<std::string> GroupValueNames(const Graph& g, const std::vector<int>& nodes) {
  std::vector<std::string> out;
  for (int n : ListedNodes(g, nodes)) out.push_back(g.values[g.nodes[n].outputs[0]].name);
  return out;
}

GroupSize MeasureGroup(const Graph& g, const std::vector<int>& nodes, const Bindings& bindings) {
  std::set<int> values;
  for (int n : nodes) {
    for (int v : g.nodes[n].inputs) values.insert(v);
    for (int v : g.nodes[n].outputs) values.insert(v);
  }
  GroupSize out;
  std::set<std::string> unbound;
  for (int v : values) {
    const Shape& s = g.values[v].type.shape;
    if (s.empty()) continue;
    auto n = NumElements(s, bindings);
    if (!n) {
      for (const auto& d : s)
        if (!d.is_static() && !bindings.count(d.sym)) unbound.insert(d.sym);
      continue;
    }
    if (!out.largest_known || *n > *out.largest_known) {
      out.largest_known = n;
      std::set<std::string> syms;
      for (const auto& d : s)
        if (!d.is_static()) syms.insert(d.sym);
      std::string at;
      for (const auto& sym : syms) at += fmt::format("{}{}={}", at.empty() ? "" : ", ", sym, bindings.at(sym));
      out.largest_known_at = at;
    }
  }
  out.unbound.assign(unbound.begin(), unbound.end());
  return out;
}

namespace {

// The group's widest produced value: largest static last dim, later values winning ties.
int WidestOutput(const Graph& g, const std::vector<int>& nodes) {
  int best = -1;
  int64_t best_w = -1;
  for (int n : ListedNodes(g, nodes)) {
    for (int v : g.nodes[n].outputs) {
      const Shape& s = g.values[v].type.shape;
      int64_t w = s.empty() ? 0 : (s.back().is_static() ? s.back().value : (int64_t{1} << 40));
      if (w >= best_w) {
        best_w = w;
        best = v;
      }
    }
  }
  return best;
}

std::string WidthTag(const Graph& g, int v) {
  const Shape& s = g.values[v].type.shape;
  return s.empty() ? "1" : s.back().ToString();
}

}  // namespace

std::string KernelName(const Graph& g, const FusionGroup& group) {
  if (group.nodes.empty()) return "";
  const int v = WidestOutput(g, group.nodes);
  const std::string dtype = DTypeName(g.values[v].type.dtype);
  if (group.kind.rfind("pattern:", 0) == 0)
    return fmt::format("fz_{}_{}_h{}", group.kind.substr(8), dtype, WidthTag(g, v));
  if (group.kind.rfind("matmul:", 0) == 0)  // fuse_matmul: the decode GEMV
    return fmt::format("gemv_{}_{}_w{}", group.kind.substr(7), dtype, WidthTag(g, v));
  if (IsCollectiveGroup(group))  // fuse_collective
    return fmt::format("comm_{}_{}_h{}", group.kind.substr(11), dtype, WidthTag(g, v));
  auto ops = GroupOpNames(g, group.nodes);
  if (group.kind == "generic") {
    std::string body;
    const size_t shown = std::min<size_t>(ops.size(), 6);
    for (size_t i = 0; i < shown; ++i) body += (i ? "_" : "") + ops[i];
    if (ops.size() > shown) body += fmt::format("_n{}", ops.size());
    return fmt::format("fz_{}_{}_w{}", body, dtype, WidthTag(g, v));
  }
  return fmt::format("{}_{}_w{}", ops.front(), dtype, WidthTag(g, v));
}

std::string SingleReason(const Graph& g, int node, const FusionConfig& config, const std::string& detail) {
  const OpKind op = g.nodes[node].op;
  const std::string name = OpName(op);
  std::string r;
  switch (GetOpInfo(op).kind) {
    case FusionKind::kLibrary:
      if (op == OpKind::kMatmul) r = "matmul is a library op (cuBLASLt)";
      else if (op == OpKind::kEmbedding) r = "embedding is a library op (gather kernel)";
      else if (op == OpKind::kKvAttention) r = "kv_attention is a library op that writes its k_cache/v_cache inputs in place";
      else if (op == OpKind::kAllReduce || op == OpKind::kAllGather) r = name + " is a collective: it runs through the communicator of the rank's group";
      else r = name + " is a library op";
      break;
    case FusionKind::kView:
      r = op == OpKind::kReshape ? "view op (reshape) moves no data" : fmt::format("view op ({}) copies", name);
      break;
    case FusionKind::kSource:
      r = "constant with no fusible user (a scalar, no kernel)";
      break;
    case FusionKind::kComposite:
      r = fmt::format("composite op {} runs as its own fused kernel", name);
      break;
    case FusionKind::kReduction:
      r = IsGenericFusible(op) ? fmt::format("single reduction op ({}): nothing to fuse with (min_nodes_for_fusion={})", name,
                                             config.min_nodes_for_fusion)
                               : fmt::format("{} is not fusible (integer index result)", name);
      break;
    case FusionKind::kElementwise:
    case FusionKind::kBroadcast:
      r = fmt::format("single elementwise op: nothing to fuse with (min_nodes_for_fusion={})", config.min_nodes_for_fusion);
      break;
  }
  if (detail.empty()) return r;
  if (IsGenericFusible(op))  // it had neighbours but could not join them
    return fmt::format("single {} op: not merged with its neighbours: {}",
                       GetOpInfo(op).kind == FusionKind::kReduction ? "reduction" : "elementwise", detail);
  return r + "; " + detail;
}

FusionGroup SingleGroup(int node, FusionDecision why) {
  FusionGroup grp;
  grp.nodes = {node};
  grp.kind = "single";
  grp.decision = std::move(why);
  return grp;
}

bool HasFusedLibraryKernel(const Graph& g, const FusionGroup& grp) {
  if (grp.matmul || IsCollectiveGroup(grp)) return true;
  return grp.nodes.size() == 1 && GetOpInfo(g.nodes[grp.nodes[0]].op).kind == FusionKind::kComposite;
}

bool IsGenericFusible(OpKind op) {
  const OpInfo& info = GetOpInfo(op);
  if (info.kind == FusionKind::kElementwise || info.kind == FusionKind::kBroadcast) return true;
  return info.kind == FusionKind::kReduction && !(info.flags & kIntOut);
}

}  // namespace opfuse::fusion
