// The fusible groups of a model graph as benchmark cases (see group_cases.h for the design).
#include "bench/group_cases.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "fusion/group_info.h"
#include "passes/pass.h"
#include "passes/pipeline.h"
#include "scheduler/should_fuse.h"

namespace opfuse::bench {

std::string GroupKey::ToString() const {
  return fmt::format("{} {} rows={} cols={}", pattern, dtype, rows, cols);
}

const std::vector<int64_t>& DefaultProfileRows() {
  static const std::vector<int64_t> k = {1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 256, 512, 1024, 2048, 4096};
  return k;
}

StatusOr<Graph> RetypeGraph(const Graph& model, DType dtype) {
  Graph g = model;
  for (int v : g.inputs)
    if (IsFloat(g.values[v].type.dtype)) g.values[v].type.dtype = dtype;
  // Node values are re-inferred; a value whose type was written in the source would now disagree.
  for (auto& v : g.values)
    if (v.kind == ValueKind::kNode) v.declared = false;
  g.groups.clear();
  OPFUSE_RETURN_IF_ERROR(VerifyAndInfer(g));
  return g;
}

// Fusion passes only: the schedule pass's variant is what the profiler is about to measure.
StatusOr<Graph> RunFusionPasses(const Graph& model, const FusionConfig& config) {
  Graph g = model;
  PassContext ctx;
  ctx.config = config;
  for (const auto& p : Pipeline()) {
    if (std::string(p.name) == "schedule") break;
    if (p.can_disable && config.IsDisabled(p.name)) continue;
    OPFUSE_RETURN_IF_ERROR(p.fn(g, ctx));
  }
  return g;
}

bool NeedsPositive(OpKind op) {
  switch (op) {
    case OpKind::kLog: case OpKind::kLog2: case OpKind::kSqrt: case OpKind::kRsqrt: case OpKind::kRecip:
    case OpKind::kPow: case OpKind::kMod: case OpKind::kDiv:
      return true;
    default:
      return false;
  }
}

namespace {

// A group cut out of `g` as a graph of its own; shapes stay symbolic.
struct CutOut {
  Graph graph;
  std::vector<bool> positive;  // per graph input: feeds an op that wants positive values
};

StatusOr<CutOut> CutGroup(const Graph& g, const FusionGroup& grp) {
  const std::set<int> in_group(grp.nodes.begin(), grp.nodes.end());
  const auto users = g.Users();
  CutOut out;
  Graph& s = out.graph;
  s.name = grp.name.empty() ? "group" : grp.name;
  std::map<int, int> remap;  // value id in g -> value id in s
  auto input_of = [&](int v) {
    auto it = remap.find(v);
    if (it != remap.end()) return it->second;
    const int id = s.AddValue(g.values[v].name, g.values[v].type, ValueKind::kInput);
    s.values[id].declared = true;  // AddValue lists it in s.inputs
    out.positive.push_back(false);
    return remap[v] = id;
  };
  for (int n : grp.nodes) {
    const Node& node = g.nodes[n];
    std::vector<int> ins;
    for (int v : node.inputs) {
      const int pr = g.values[v].producer;
      const bool outside = g.values[v].kind != ValueKind::kNode || !in_group.count(pr);
      if (outside && g.values[v].kind == ValueKind::kNode && g.nodes[pr].op == OpKind::kConstant) {
        // A constant feeding the group travels with it (eps of a norm), as the fusion passes see it.
        if (!remap.count(v)) {
          const Node& cn = g.nodes[pr];
          const int nid = s.AddNode(cn.op, {}, {g.values[v].type}, cn.attrs, {g.values[v].name});
          remap[v] = s.nodes[nid].outputs[0];
        }
        ins.push_back(remap[v]);
        continue;
      }
      ins.push_back(outside ? input_of(v) : remap.at(v));
      if (outside && NeedsPositive(node.op)) out.positive[std::find(s.inputs.begin(), s.inputs.end(), remap[v]) - s.inputs.begin()] = true;
    }
    std::vector<TensorType> types;
    std::vector<std::string> names;
    for (int v : node.outputs) types.push_back(g.values[v].type), names.push_back(g.values[v].name);
    const int nid = s.AddNode(node.op, ins, types, node.attrs, names);
    for (size_t i = 0; i < node.outputs.size(); ++i) remap[node.outputs[i]] = s.nodes[nid].outputs[i];
  }
  for (int n : grp.nodes)
    for (int v : g.nodes[n].outputs) {
      bool escapes = g.IsGraphOutput(v);
      for (int u : users[v]) escapes = escapes || !in_group.count(u);
      if (escapes) s.outputs.push_back(remap.at(v));
    }
  if (s.outputs.empty()) return InvalidArgument("the group hands no value to the rest of the graph");
  return out;
}

Dim BindDim(const Dim& d, const std::string& sym, int64_t value) { return d.sym == sym ? Dim(value) : d; }

// The cut-out with `sym` bound: value types and shape-valued attributes (reshape) made static.
StatusOr<Graph> Bind(const Graph& cut, const std::string& sym, int64_t value) {
  Graph g = cut;
  for (auto& v : g.values)
    for (auto& d : v.type.shape) d = BindDim(d, sym, value);
  for (auto& n : g.nodes)
    for (auto& [k, a] : n.attrs)
      if (auto* dims = std::get_if<DimList>(&a))
        for (auto& d : *dims) d = BindDim(d, sym, value);
  for (const auto& v : g.values)
    for (const auto& d : v.type.shape)
      if (!d.is_static()) return InvalidArgument(fmt::format("value '{}' has symbol '{}' besides '{}'", v.name, d.sym, sym));
  for (auto& v : g.values)
    if (v.kind == ValueKind::kNode) v.declared = false;
  OPFUSE_RETURN_IF_ERROR(VerifyAndInfer(g));
  return g;
}

std::vector<int64_t> Static(const Shape& s) {
  std::vector<int64_t> out;
  for (const auto& d : s) out.push_back(d.value);
  return out;
}

bool LeadingSym(const Shape& s, const std::string& sym) { return !s.empty() && s[0].sym == sym; }

StatusOr<OpCase> MakeCase(const CutOut& cut, const std::string& pattern, const std::string& sym, int64_t value, DType dtype) {
  OPFUSE_ASSIGN_OR_RETURN(Graph g, Bind(cut.graph, sym, value));
  OpCase c;
  c.suite = "profile";
  c.op = pattern;
  c.dtype = dtype;
  c.rows = value;
  c.phase = PhaseOf(value);
  c.rows_independent = true;
  c.unfused_is_library_ops = pattern.rfind("matmul:", 0) == 0;  // a fuse_matmul group's key (DescribeGroup)
  std::set<std::string> seen;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Value& v = g.values[g.inputs[i]];
    TensorSpec t;
    t.name = v.name;
    t.dtype = v.type.dtype;
    t.shape = Static(v.type.shape);
    t.rows_leading = LeadingSym(cut.graph.values[cut.graph.inputs[i]].type.shape, sym);
    t.fill = cut.positive[i] ? Fill::kPositive : Fill::kSigned;
    if (IsInt(t.dtype)) return InvalidArgument(fmt::format("input '{}' is an integer tensor (not profiled)", v.name));
    c.bytes += t.nbytes();
    c.inputs.push_back(t);
  }
  for (int o : g.outputs) {
    const Value& v = g.values[o];
    TensorSpec t;
    t.name = v.name;
    t.dtype = v.type.dtype;
    t.shape = Static(v.type.shape);
    t.rows_leading = true;
    c.bytes += t.nbytes();
    c.outputs.push_back(t);
  }
  c.width = c.outputs.front().shape.empty() ? 1 : c.outputs.front().shape.back();
  c.graph = PrintGraph(g, false);
  return c;
}

}  // namespace

StatusOr<GroupCases> ExtractGroupCases(const Graph& model, const GroupCaseOptions& o) {
  if (o.values.empty()) return InvalidArgument("no values for the row symbol");
  for (int64_t v : o.values)
    if (v <= 0) return InvalidArgument(fmt::format("{}={}: values must be positive", o.symbol, v));
  const auto syms = model.Symbols();
  if (std::find(syms.begin(), syms.end(), o.symbol) == syms.end())
    return InvalidArgument(fmt::format("graph '{}' has no symbol '{}' (its symbols: {})", model.name, o.symbol,
                                       syms.empty() ? "none" : fmt::format("{}", fmt::join(syms, ", "))));
  GroupCases out;
  for (DType dt : o.dtypes) {
    OPFUSE_ASSIGN_OR_RETURN(Graph typed, RetypeGraph(model, dt));
    OPFUSE_ASSIGN_OR_RETURN(Graph g, RunFusionPasses(typed, o.config));
    std::vector<GroupKey> keys;  // dedup within this dtype
    for (size_t gi = 0; gi < g.groups.size(); ++gi) {
      const FusionGroup& grp = g.groups[gi];
      const bool pattern = grp.kind.rfind("pattern:", 0) == 0;
      const bool matmul = grp.kind.rfind("matmul:", 0) == 0;
      if (!grp.decision.fuse || !(pattern || matmul || grp.kind == "generic")) continue;
      const auto first = fusion::ComputeNodes(g, grp.nodes);
      const std::string label = fmt::format("[{}] {} ({})", gi, grp.kind,
                                            first.empty() ? "?" : g.values[g.nodes[first.back()].outputs[0]].name);
      if (dt == o.dtypes.front()) out.groups.push_back(label);
      auto cut = CutGroup(g, grp);
      if (!cut.ok()) {
        out.skipped.push_back({label, cut.status().message()});
        continue;
      }
      bool rowwise = true;
      for (int v : cut->graph.outputs) rowwise = rowwise && LeadingSym(cut->graph.values[v].type.shape, o.symbol);
      if (!rowwise) {
        out.skipped.push_back({label, fmt::format("an output's leading dim is not {}: rows cannot be sampled for the check", o.symbol)});
        continue;
      }
      for (int64_t value : o.values) {
        const Bindings b = {{o.symbol, value}};
        const scheduler::GroupShape s = scheduler::DescribeGroup(g, grp, b);
        if (!s.rows || !s.cols) {
          out.skipped.push_back({label, fmt::format("{}={}: rows/cols not bound", o.symbol, value)});
          continue;
        }
        GroupKey key{s.pattern, s.dtype, *s.rows, *s.cols};
        if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
        keys.push_back(key);
        auto c = MakeCase(*cut, s.pattern, o.symbol, value, dt);
        if (!c.ok()) {
          out.skipped.push_back({label, c.status().message()});
          break;
        }
        c->id = fmt::format("profile/{}/{}/rows={}/cols={}", key.pattern, key.dtype, key.rows, key.cols);
        const CutOut cut_copy = *cut;
        const std::string sym = o.symbol, pat = s.pattern;
        c->remake = [cut_copy, sym, pat, dt](int64_t rows) { return MakeCase(cut_copy, pat, sym, rows, dt); };
        out.cases.push_back({std::move(*c), key, label, value, static_cast<int>(gi)});
      }
    }
  }
  if (out.cases.empty())
    return InvalidArgument(fmt::format("graph '{}' has no fusible group to profile{}", model.name,
                                       out.skipped.empty() ? "" : " (" + out.skipped.front().id + ": " + out.skipped.front().reason + ")"));
  return out;
}

}  // namespace opfuse::bench
