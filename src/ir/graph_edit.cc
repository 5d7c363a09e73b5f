// Graph surgery shared by the fusion rewrites and the passes (see graph_edit.h for the naming rule).
#include "ir/graph_edit.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace opfuse {

void ReplaceValue(Graph& g, int from, int to) {
  if (from == to) return;
  g.ReplaceAllUses(from, to);
  std::string name = g.values[from].name;
  g.RenameValue(from, g.FreshName(name + ".replaced"));
  g.RenameValue(to, name);
}

Status CompactKeepGroups(Graph& g) {
  std::vector<std::vector<std::string>> keys;
  for (const auto& grp : g.groups) {
    std::vector<std::string> k;
    for (int n : grp.nodes)
      if (n >= 0 && n < static_cast<int>(g.nodes.size()) && !g.nodes[n].dead) k.push_back(g.values[g.nodes[n].outputs[0]].name);
    keys.push_back(std::move(k));
  }
  std::vector<FusionGroup> groups = std::move(g.groups);
  OPFUSE_RETURN_IF_ERROR(g.Compact());
  std::map<std::string, int> node_of;
  for (size_t i = 0; i < g.nodes.size(); ++i) node_of[g.values[g.nodes[i].outputs[0]].name] = static_cast<int>(i);
  g.groups.clear();
  for (size_t i = 0; i < groups.size(); ++i) {
    FusionGroup grp = std::move(groups[i]);
    grp.nodes.clear();
    for (const auto& k : keys[i])
      if (auto it = node_of.find(k); it != node_of.end()) grp.nodes.push_back(it->second);
    std::sort(grp.nodes.begin(), grp.nodes.end());
    if (!grp.nodes.empty()) g.groups.push_back(std::move(grp));
  }
  return Status::Ok();
}

bool UnshareConstants(Graph& g) {
  // The uses (node, input slot) of every live constant, in node order: one walk over the graph,
  // so the pass is linear in its size.
  const int nn = static_cast<int>(g.nodes.size());
  std::vector<int> const_node(g.values.size(), -1);
  for (int n = 0; n < nn; ++n)
    if (!g.nodes[n].dead && g.nodes[n].op == OpKind::kConstant) const_node[g.nodes[n].outputs[0]] = n;
  std::vector<std::vector<std::pair<int, int>>> uses(nn);
  for (int u = 0; u < nn; ++u) {
    if (g.nodes[u].dead) continue;
    for (size_t k = 0; k < g.nodes[u].inputs.size(); ++k)
      if (const int c = const_node[g.nodes[u].inputs[k]]; c >= 0) uses[c].emplace_back(u, static_cast<int>(k));
  }
  std::vector<char> is_output(g.values.size(), 0);
  for (int v : g.outputs) is_output[v] = 1;
  bool changed = false;
  for (int n = 0; n < nn; ++n) {
    if (uses[n].empty()) continue;
    const int v = g.nodes[n].outputs[0];
    bool first_use = !is_output[v];  // a graph output keeps the original for itself
    for (const auto& [u, k] : uses[n]) {
      if (first_use) {
        first_use = false;
        continue;
      }
      const Node src = g.nodes[n];
      int c = g.AddNode(OpKind::kConstant, {}, {g.values[v].type}, src.attrs, {g.FreshName(g.values[v].name)});
      g.nodes[c].line = src.line;
      g.nodes[u].inputs[k] = g.nodes[c].outputs[0];
      changed = true;
    }
  }
  return changed;
}

int RemoveOrphanConstants(Graph& g) {
  auto users = g.Users();
  std::vector<char> is_output(g.values.size(), 0);
  for (int v : g.outputs) is_output[v] = 1;
  int removed = 0;
  for (auto& n : g.nodes) {
    if (n.dead || n.op != OpKind::kConstant) continue;
    if (users[n.outputs[0]].empty() && !is_output[n.outputs[0]]) {
      n.dead = true;
      ++removed;
    }
  }
  return removed;
}

Status CheckGroupPartition(const Graph& g) {
  std::vector<int> owner(g.nodes.size(), -1);
  for (size_t i = 0; i < g.groups.size(); ++i) {
    const auto& grp = g.groups[i];
    if (grp.nodes.empty()) return Internal(fmt::format("group {} is empty", i));
    for (size_t k = 0; k < grp.nodes.size(); ++k) {
      int n = grp.nodes[k];
      if (n < 0 || n >= static_cast<int>(g.nodes.size()) || g.nodes[n].dead)
        return Internal(fmt::format("group {} refers to a missing node {}", i, n));
      if (owner[n] >= 0) return Internal(fmt::format("node {} is in groups {} and {}", NodeDescr(g, n), owner[n], i));
      if (k && grp.nodes[k - 1] >= n) return Internal(fmt::format("group {} is not in topological order", i));
      owner[n] = static_cast<int>(i);
    }
  }
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (!g.nodes[n].dead && owner[n] < 0) return Internal(fmt::format("node {} is in no group", NodeDescr(g, static_cast<int>(n))));
  return Status::Ok();
}

std::string NodeDescr(const Graph& g, int node) {
  const Node& n = g.nodes[node];
  std::string s = fmt::format("'{}' ({}", g.values[n.outputs[0]].name, OpName(n.op));
  if (n.line > 0) s += fmt::format(", line {}", n.line);
  return s + ")";
}

std::string ValueLabel(const Graph& g, int value) {
  const Value& v = g.values[value];
  if (v.kind != ValueKind::kNode || v.producer < 0) return fmt::format("'{}'", v.name);
  return NodeDescr(g, v.producer);
}

}  // namespace opfuse
