// The pattern tree matcher, the escape check and the rewrite (see pattern.h for the language).
//
// The matcher is continuation-passing: matching an operand calls "match the rest" on success, so
// when a later operand fails, an earlier commutative order or AnyOf alternative is retried with
// the bindings it had before. Trees are a dozen nodes, graphs a few hundred, so copying the small
// Binding at each choice point is the simple and sufficient way to undo.
#include "fusion/pattern.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "ir/graph_edit.h"

namespace opfuse::fusion {

// ---------------------------------------------------------------- the tree language
Pat Pat::Op(OpKind op, std::vector<Pat> args) { return Op(std::vector<OpKind>{op}, std::move(args)); }
Pat Pat::Op(std::vector<OpKind> ops, std::vector<Pat> args) {
  auto r = std::make_shared<Rep>();
  r->kind = Rep::Kind::kOp;
  r->ops = std::move(ops);
  r->args = std::move(args);
  Pat p;
  p.rep_ = std::move(r);
  return p;
}
Pat Pat::Var(std::string name) {
  auto r = std::make_shared<Rep>();
  r->kind = Rep::Kind::kVar;
  r->name = std::move(name);
  Pat p;
  p.rep_ = std::move(r);
  return p;
}
Pat Pat::Const(std::string name) {
  auto r = std::make_shared<Rep>();
  r->kind = Rep::Kind::kConst;
  r->name = std::move(name);
  Pat p;
  p.rep_ = std::move(r);
  return p;
}
Pat Pat::ConstValue(double v) {
  auto r = std::make_shared<Rep>();
  r->kind = Rep::Kind::kConst;
  r->const_value = v;
  Pat p;
  p.rep_ = std::move(r);
  return p;
}
Pat Pat::AnyOf(std::vector<Pat> alternatives) {
  auto r = std::make_shared<Rep>();
  r->kind = Rep::Kind::kAnyOf;
  r->args = std::move(alternatives);
  Pat p;
  p.rep_ = std::move(r);
  return p;
}
Pat Pat::As(std::string name) const {
  auto r = std::make_shared<Rep>(*rep_);
  r->name = std::move(name);
  Pat p;
  p.rep_ = std::move(r);
  return p;
}
Pat Pat::Commutative() const {
  auto r = std::make_shared<Rep>(*rep_);
  r->commutative = true;
  Pat p;
  p.rep_ = std::move(r);
  return p;
}
Pat Pat::Where(Pred pred) const {
  auto r = std::make_shared<Rep>(*rep_);
  r->pred = std::move(pred);
  Pat p;
  p.rep_ = std::move(r);
  return p;
}

// ---------------------------------------------------------------- matching
namespace {

using Cont = std::function<bool(const Binding&)>;

// Binds `name` to `value` in b (true), or checks an existing binding agrees.
bool Bind(Binding& b, const std::string& name, int value) {
  if (name.empty()) return true;
  auto [it, inserted] = b.values.emplace(name, value);
  return inserted || it->second == value;
}

bool Match(const Graph& g, const Pat& p, int value, const Binding& b, const Cont& k);

bool MatchArgs(const Graph& g, const std::vector<Pat>& args, const Node& n, const std::vector<int>& order, size_t i,
               const Binding& b, const Cont& k) {
  if (i == args.size()) return k(b);
  return Match(g, args[i], n.inputs[order[i]], b,
               [&](const Binding& b2) { return MatchArgs(g, args, n, order, i + 1, b2, k); });
}

bool Match(const Graph& g, const Pat& p, int value, const Binding& b, const Cont& k) {
  const Pat::Rep& r = p.rep();
  switch (r.kind) {
    case Pat::Rep::Kind::kVar: {
      Binding b2 = b;
      return Bind(b2, r.name, value) && k(b2);
    }
    case Pat::Rep::Kind::kConst: {
      const Node* n = Producer(g, value);
      if (!n || n->op != OpKind::kConstant) return false;
      auto cv = ConstantValue(g, value);
      if (!cv || (r.const_value && *cv != *r.const_value)) return false;
      Binding b2 = b;
      if (!Bind(b2, r.name, value)) return false;
      const int id = g.values[value].producer;
      if (std::find(b2.constants.begin(), b2.constants.end(), id) == b2.constants.end()) b2.constants.push_back(id);
      return k(b2);
    }
    case Pat::Rep::Kind::kAnyOf: {
      Binding b2 = b;
      if (!Bind(b2, r.name, value)) return false;
      for (const Pat& alt : r.args)
        if (Match(g, alt, value, b2, k)) return true;
      return false;
    }
    case Pat::Rep::Kind::kOp: {
      const Value& v = g.values[value];
      if (v.kind != ValueKind::kNode || v.producer < 0) return false;
      const Node& n = g.nodes[v.producer];
      if (n.dead || v.slot != 0) return false;
      if (std::find(r.ops.begin(), r.ops.end(), n.op) == r.ops.end()) return false;
      if (n.inputs.size() != r.args.size()) return false;
      if (r.pred && !r.pred(g, n)) return false;
      Binding b2 = b;
      if (!Bind(b2, r.name, value)) return false;
      if (std::find(b2.nodes.begin(), b2.nodes.end(), v.producer) == b2.nodes.end()) b2.nodes.push_back(v.producer);
      std::vector<int> order(r.args.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
      if (MatchArgs(g, r.args, n, order, 0, b2, k)) return true;
      if (r.commutative && r.args.size() == 2) {
        std::swap(order[0], order[1]);
        return MatchArgs(g, r.args, n, order, 0, b2, k);
      }
      return false;
    }
  }
  return false;
}

}  // namespace

bool MatchTree(const Graph& g, const Pat& p, int value, Binding* out) {
  return Match(g, p, value, Binding{}, [&](const Binding& b) {
    *out = b;
    return true;
  });
}

// ---------------------------------------------------------------- match + checks
namespace {

// Why the rewrite of `m` would be wrong, or "" when it is safe.
std::string EscapeReason(const Graph& g, const UserLists& users, const Binding& b, const Rewrite& rw) {
  const std::set<int> interior(b.nodes.begin(), b.nodes.end());
  const std::set<int> replaced(rw.replaces.begin(), rw.replaces.end());
  for (int n : b.nodes) {
    for (int v : g.nodes[n].outputs) {
      if (replaced.count(v)) continue;
      if (g.IsGraphOutput(v)) return fmt::format("interior value '{}' is a graph output", VName(g, v));
      for (int u : users[v])
        if (!interior.count(u))
          return fmt::format("interior value '{}' is also used outside the match, by {}", VName(g, v), NodeDescr(g, u));
    }
  }
  return "";
}

// A matched node that one of `inputs` is computed from (the rewrite would be a cycle), or -1.
int DependsOnInterior(const Graph& g, const std::vector<int>& inputs, const std::set<int>& interior) {
  std::vector<int> stack;
  std::set<int> seen;
  for (int v : inputs)
    if (g.values[v].kind == ValueKind::kNode && g.values[v].producer >= 0) stack.push_back(g.values[v].producer);
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (interior.count(n)) return n;
    for (int v : g.nodes[n].inputs)
      if (g.values[v].kind == ValueKind::kNode && g.values[v].producer >= 0) stack.push_back(g.values[v].producer);
  }
  return -1;
}

}  // namespace

MatchOutcome MatchAt(const Graph& g, const UserLists& users, const PatternDef& p, int node,
                     const std::set<int>* excluded) {
  MatchOutcome out;
  if (g.nodes[node].dead) return out;
  const int root = g.nodes[node].outputs[0];
  for (const auto& var : p.variants) {
    Binding b;
    if (!MatchTree(g, var.tree, root, &b)) continue;
    if (excluded) {
      bool overlaps = false;
      for (int n : b.nodes) overlaps |= excluded->count(n) > 0;
      for (int n : b.constants) overlaps |= excluded->count(n) > 0;
      if (overlaps) continue;
    }
    std::string why;
    auto rw = var.build(g, b, &why);
    if (!rw) {
      if (!why.empty() && out.blocked.empty()) out.blocked = why;
      continue;
    }
    // The composite's inputs must come from outside the match, and it must replace the root.
    const std::set<int> interior(b.nodes.begin(), b.nodes.end());
    bool inputs_outside = true;
    for (int v : rw->inputs) {
      const Value& val = g.values[v];
      if (val.kind == ValueKind::kNode && interior.count(val.producer)) inputs_outside = false;
    }
    if (!inputs_outside || std::find(rw->replaces.begin(), rw->replaces.end(), root) == rw->replaces.end()) continue;
    if (int via = DependsOnInterior(g, rw->inputs, interior); via >= 0) {
      // Only possible through a replaced extra output (the sum of Add+RMSNorm feeding the weight).
      if (out.blocked.empty())
        out.blocked = fmt::format("{} ({}) blocked: an input depends on the match itself (through {})", p.name, var.label,
                                  NodeDescr(g, via));
      continue;
    }
    std::string esc = EscapeReason(g, users, b, *rw);
    if (!esc.empty()) {
      if (out.blocked.empty()) out.blocked = fmt::format("{} ({}) blocked: {}", p.name, var.label, esc);
      continue;
    }
    out.match = PatternMatch{&p, var.label, std::move(b), std::move(*rw)};
    out.blocked.clear();
    return out;
  }
  return out;
}

int ApplyRewrite(Graph& g, const PatternMatch& m) {
  std::vector<TensorType> types;
  for (int v : m.rewrite.replaces) types.push_back(g.values[v].type);
  int line = 0;
  for (int n : m.binding.nodes) line = std::max(line, g.nodes[n].line);
  const int id = g.AddNode(m.pattern->op, m.rewrite.inputs, types, m.rewrite.attrs);
  g.nodes[id].line = line;
  const std::vector<int> outs = g.nodes[id].outputs;
  for (size_t i = 0; i < m.rewrite.replaces.size() && i < outs.size(); ++i) ReplaceValue(g, m.rewrite.replaces[i], outs[i]);
  for (int n : m.binding.nodes) g.nodes[n].dead = true;
  // Put the composite where its root was: every input of the match is computed before the root
  // and the root's users come after it, so the order stays source-like (users of an extra output,
  // e.g. Add+RMSNorm's sum, may come earlier; the pass's final Compact re-sorts those).
  const int root = m.binding.nodes.front();
  std::swap(g.nodes[root], g.nodes[id]);
  for (int v : g.nodes[root].outputs) g.values[v].producer = root;
  for (int v : g.nodes[id].outputs) g.values[v].producer = id;
  return root;
}

// ---------------------------------------------------------------- builder helpers
std::optional<double> ConstantValue(const Graph& g, int value) {
  const Node* n = Producer(g, value);
  if (!n || n->op != OpKind::kConstant || !g.values[value].type.shape.empty()) return std::nullopt;
  auto it = n->attrs.find("value");
  if (it == n->attrs.end()) return std::nullopt;
  return AttrFloat(n->attrs, "value", 0.0);
}

const std::string& VName(const Graph& g, int value) { return g.values[value].name; }

const Node* Producer(const Graph& g, int value) {
  const Value& v = g.values[value];
  if (v.kind != ValueKind::kNode || v.producer < 0) return nullptr;
  return &g.nodes[v.producer];
}

bool IsChannelVector(const Graph& g, int w, int x) {
  const TensorType& wt = g.values[w].type;
  const TensorType& xt = g.values[x].type;
  return wt.dtype == xt.dtype && wt.shape.size() == 1 && !xt.shape.empty() && wt.shape[0] == xt.shape.back();
}

int64_t NormalizedAxis(const Node& n, size_t rank, int64_t def) {
  int64_t a = AttrInt(n.attrs, "axis", def);
  return a < 0 ? a + static_cast<int64_t>(rank) : a;
}

std::string Num(double v) { return fmt::format("{}", v); }

}  // namespace opfuse::fusion
