// Generic grouping (the algorithm and its three refusal rules are described in generic.h).
//
// Groups are "super nodes" of the node graph: existing pattern groups, generic groups being grown,
// and every other op alone. Groups stay acyclic because a merge is only accepted when no path from
// the merged super node leads back into it, checked by a walk over super nodes — a walk over ops
// would miss a cycle between two groups (A's op feeds B, B's op feeds A) that are each convex.
#include "fusion/generic.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "fusion/group_info.h"

namespace opfuse::fusion {

bool SameRowSpace(const Graph& g, const std::vector<int>& nodes, std::string* why) {
  bool set = false;
  Shape rows;
  std::optional<Dim> cols;
  std::string first;  // the value that fixed the row space, for messages
  auto add = [&](int v) {
    const Shape& s = g.values[v].type.shape;
    if (s.empty()) return true;  // scalars broadcast anywhere
    Shape r(s.begin(), s.end() - 1);
    const Dim& c = s.back();
    if (!set) {
      set = true;
      rows = r;
      if (!(c == Dim(1))) cols = c;
      first = g.values[v].name;
      return true;
    }
    bool ok = r == rows && (c == Dim(1) || !cols || *cols == c);
    if (ok && !cols && !(c == Dim(1))) cols = c;
    if (!ok && why)
      *why = fmt::format("shapes differ: '{}' {} and '{}' {} are not one [rows, C] space", g.values[v].name,
                         ShapeToString(s), first, ShapeToString([&] { Shape f = rows; f.push_back(cols.value_or(Dim(1))); return f; }()));
    return ok;
  };
  for (int n : nodes) {
    const Node& node = g.nodes[n];
    if (node.op == OpKind::kConstant) continue;
    for (int v : node.outputs)
      if (!add(v)) return false;
    if (GetOpInfo(node.op).kind == FusionKind::kReduction && !add(node.inputs[0])) return false;
  }
  return true;
}

namespace {

class Grouper {
 public:
  Grouper(const Graph& g, const std::vector<int>& existing, const FusionConfig& config)
      : g_(g), existing_(existing), config_(config), nn_(static_cast<int>(g.nodes.size())) {
    const auto users = g.Users();
    succ_.resize(nn_);
    for (int n = 0; n < nn_; ++n) {
      if (g.nodes[n].dead) continue;
      std::set<int> s;
      for (int v : g.nodes[n].outputs)
        for (int u : users[v]) s.insert(u);
      succ_[n].assign(s.begin(), s.end());
    }
    int num_existing = 0;
    for (int e : existing) num_existing = std::max(num_existing, e + 1);
    members_.resize(num_existing);
    super_.assign(nn_, -1);
    for (int n = 0; n < nn_; ++n) {
      if (g.nodes[n].dead) continue;
      if (existing[n] >= 0) {
        super_[n] = existing[n];
        members_[existing[n]].push_back(n);
      } else {
        super_[n] = static_cast<int>(members_.size());
        members_.push_back({n});
      }
    }
    refused_.assign(nn_, "");
  }

  bool Fusible(int n) const { return n >= 0 && !g_.nodes[n].dead && existing_[n] < 0 && IsGenericFusible(g_.nodes[n].op); }

  GenericGroups Run() {
    for (int n = 0; n < nn_; ++n) {
      if (!Fusible(n)) continue;
      for (int v : g_.nodes[n].inputs) {
        const int p = g_.values[v].kind == ValueKind::kNode ? g_.values[v].producer : -1;
        if (!Fusible(p) || super_[p] == super_[n]) continue;
        std::string why;
        if (TryMerge(super_[p], super_[n], &why)) continue;
        refused_[n] = fmt::format("could not join the group of {}: {}", Descr(p), why);
        if (refused_[p].empty()) refused_[p] = fmt::format("its consumer {} could not join: {}", Descr(n), why);
      }
    }
    GenericGroups out;
    for (const auto& m : members_) {
      if (m.empty() || !Fusible(m.front())) continue;
      std::vector<int> sorted = m;
      std::sort(sorted.begin(), sorted.end());
      out.groups.push_back(std::move(sorted));
    }
    std::sort(out.groups.begin(), out.groups.end());
    out.refused = refused_;
    return out;
  }

 private:
  std::string Descr(int n) const {
    const Node& node = g_.nodes[n];
    std::string s = fmt::format("'{}' ({}", g_.values[node.outputs[0]].name, OpName(node.op));
    if (node.line > 0) s += fmt::format(", line {}", node.line);
    return s + ")";
  }

  // Merges super node b into a when the rules allow it.
  bool TryMerge(int a, int b, std::string* why) {
    std::vector<int> merged = members_[a];
    merged.insert(merged.end(), members_[b].begin(), members_[b].end());
    const int ops = static_cast<int>(ComputeNodes(g_, merged).size());
    if (ops > config_.max_group_size) {
      *why = fmt::format("would exceed max_group_size {} ({} ops)", config_.max_group_size, ops);
      return false;
    }
    if (!SameRowSpace(g_, merged, why)) return false;
    if (int via = CycleVia(a, b); via >= 0) {
      *why = fmt::format("would create a cycle (a value leaves the group and comes back through {})", Descr(via));
      return false;
    }
    for (int n : members_[b]) super_[n] = a;
    members_[a] = std::move(merged);
    members_[b].clear();
    return true;
  }

  // A node outside {a, b} on a path from the merged group back into it, or -1. The super-node graph
  // is acyclic before every merge (the initial groups are, and every merge keeps it so), so the only
  // cycle a merge of b into a can close is a path a -> x -> ... -> b with x outside both: the walk
  // starts at a's successors outside {a, b} and looks for b. A chain (a's only consumer is in b) costs
  // O(|a|), so grouping stays linear in the graph on chains; `seen` is stamped, never reallocated.
  int CycleVia(int a, int b) {
    auto in_s = [&](int sup) { return sup == a || sup == b; };
    if (seen_.size() < members_.size()) seen_.resize(members_.size(), 0);
    ++stamp_;
    queue_.clear();
    for (int u : members_[a])
      for (int w : succ_[u])
        if (!in_s(super_[w]) && seen_[super_[w]] != stamp_) {
          seen_[super_[w]] = stamp_;
          queue_.push_back(super_[w]);
        }
    for (size_t head = 0; head < queue_.size(); ++head) {
      const int x = queue_[head];
      for (int u : members_[x])
        for (int w : succ_[u]) {
          if (super_[w] == b) return u;
          if (super_[w] != a && seen_[super_[w]] != stamp_) {
            seen_[super_[w]] = stamp_;
            queue_.push_back(super_[w]);
          }
        }
    }
    return -1;
  }

  const Graph& g_;
  const std::vector<int>& existing_;
  const FusionConfig& config_;
  const int nn_;
  std::vector<std::vector<int>> succ_;     // node -> consumer nodes
  std::vector<int> super_;                 // node -> super node id
  std::vector<std::vector<int>> members_;  // super node id -> nodes
  std::vector<std::string> refused_;
  std::vector<unsigned> seen_;  // CycleVia: super node -> stamp of the walk that reached it
  unsigned stamp_ = 0;
  std::vector<int> queue_;
};

}  // namespace

GenericGroups GroupGeneric(const Graph& g, const std::vector<int>& existing, const FusionConfig& config) {
  return Grouper(g, existing, config).Run();
}

}  // namespace opfuse::fusion
