// Declarative fusion patterns: a small tree language for "the primitive subgraph a framework
// traces", a matcher, and the rewrite into a composite op.
//
// A pattern is a list of variants (largest first, e.g. softmax with scale and mask, then with mask,
// ...). Each variant is a tree of `Pat`s rooted at the op that produces the result:
//
//   Pat::Op(kMul, {Pat::Op(kSilu, {Pat::Var("gate")}), Pat::Var("up")}).Commutative()
//
// Var binds any value under a name; a name used twice must bind the same value (that is how
// "x*x" and "the same exp feeds the div and the sum" are said). As() names an op's result the same
// way; Const() binds a scalar constant node (read as an attribute, e.g. eps); AnyOf() tries
// alternatives; Where() adds a check on the node (slice bounds, axis). Matching backtracks fully
// (commutative operand orders and alternatives are retried when a later sibling fails).
//
// A structural match then goes through the variant's `build` (semantic checks: weight is a
// per-channel vector, eps is a constant, ... → the composite's inputs and attributes) and the
// escape check: an interior value used outside the match blocks the rewrite — except the values
// the composite replaces (its outputs; Add+RMSNorm replaces the add's sum with its second output).
// A blocked match is reported with the reason, so `opfuse explain` can say why a pattern did not
// apply.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "opfuse/graph.h"

namespace opfuse::fusion {

// What a structural match binds.
struct Binding {
  std::map<std::string, int> values;  // capture name -> value id
  std::vector<int> nodes;             // matched op nodes (interior and root), no constants
  std::vector<int> constants;         // constant nodes read as scalars

  int value(const std::string& name) const {
    auto it = values.find(name);
    return it == values.end() ? -1 : it->second;
  }
  bool has(const std::string& name) const { return values.count(name) > 0; }
};

class Pat {
 public:
  using Pred = std::function<bool(const Graph&, const Node&)>;
  static Pat Op(OpKind op, std::vector<Pat> args);
  static Pat Op(std::vector<OpKind> ops, std::vector<Pat> args);  // any of these ops
  static Pat Var(std::string name);
  static Pat Const(std::string name);  // a rank-0 constant node
  static Pat ConstValue(double v);     // a rank-0 constant equal to v
  static Pat AnyOf(std::vector<Pat> alternatives);
  Pat As(std::string name) const;      // also bind this op's result
  Pat Commutative() const;             // binary op: either operand order
  Pat Where(Pred pred) const;

  struct Rep;
  const Rep& rep() const { return *rep_; }

 private:
  std::shared_ptr<const Rep> rep_;
};

struct Pat::Rep {
  enum class Kind { kOp, kVar, kConst, kAnyOf } kind = Kind::kOp;
  std::vector<OpKind> ops;
  std::vector<Pat> args;  // op operands, or AnyOf alternatives
  std::string name;       // Var/Const name, or As() name of an op
  bool commutative = false;
  std::optional<double> const_value;
  Pred pred;
};

// Structural match of `p` against `value`. On success fills `out` and returns true.
bool MatchTree(const Graph& g, const Pat& p, int value, Binding* out);

// The composite op a match becomes.
struct Rewrite {
  std::vector<int> inputs;    // the composite's inputs (value ids)
  Attrs attrs;                // eps, scale, approximate, ...
  std::vector<int> replaces;  // values replaced by the composite's outputs, in output order
  std::string what;           // "silu(gate) * up": the reason text after "matched "
};

// Returns nullopt (with a reason in *why_not when it is worth telling) to reject a structural match.
using BuildFn = std::function<std::optional<Rewrite>(const Graph& g, const Binding& b, std::string* why_not)>;

struct PatternVariant {
  std::string label;  // "with weight", "scale+mask", ...
  Pat tree;
  BuildFn build;
};

struct PatternDef {
  std::string name;  // kill-switch name and group kind suffix: "swiglu" -> "pattern:swiglu"
  OpKind op;         // the composite op it produces
  std::string summary;
  std::vector<PatternVariant> variants;  // tried in order: largest first
  // When disabled, a pattern still matches and keeps its ops as one unfused group, so no later
  // pattern takes them apart (a disabled LayerNorm is not re-read as an RMSNorm of x - mean).
  // A pattern that merely extends another (Add+RMSNorm around an RMSNorm) sets this false:
  // disabling it leaves the inner pattern free to apply.
  bool claim_when_disabled = true;
};

struct PatternMatch {
  const PatternDef* pattern = nullptr;
  std::string variant;
  Binding binding;
  Rewrite rewrite;
};

struct MatchOutcome {
  std::optional<PatternMatch> match;
  std::string blocked;  // non-empty: the structure matched but the rewrite may not happen
};

using UserLists = std::vector<std::vector<int>>;  // Graph::Users()

// Tries every variant of `p` rooted at node `node` (its first output). Matches touching a node in
// `excluded` (already claimed by another pattern) are skipped.
MatchOutcome MatchAt(const Graph& g, const UserLists& users, const PatternDef& p, int node,
                     const std::set<int>* excluded = nullptr);

// Adds the composite node in the root's place (the old root moves to the end, dead), redirects the
// replaced values to its outputs (which take over their names) and marks the matched nodes dead.
// Constants left without users are the caller's to drop. Returns the composite's node id.
int ApplyRewrite(Graph& g, const PatternMatch& m);

// ---------------------------------------------------------------- helpers for pattern builders
std::optional<double> ConstantValue(const Graph& g, int value);  // a rank-0 constant's value
const std::string& VName(const Graph& g, int value);
const Node* Producer(const Graph& g, int value);  // nullptr for inputs/params
// w is a per-channel vector of x: [C] with C = x's last dim, same dtype.
bool IsChannelVector(const Graph& g, int w, int x);
// The axis attribute of `n` normalised against rank (negative counts from the end).
int64_t NormalizedAxis(const Node& n, size_t rank, int64_t def = -1);
// "1e-05"-style number for reason texts.
std::string Num(double v);

}  // namespace opfuse::fusion
