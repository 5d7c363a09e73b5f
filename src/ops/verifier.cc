// VerifyAndInfer: structural checks with precise errors, then shape/dtype inference in
// topological order. Errors are InvalidArgument naming the node (and its source line).
//   - dangling name / unknown value id, duplicate names
//   - arity (inputs and outputs) against ops.def
//   - cycle (a node that depends on itself through its inputs)
//   - unbound symbol (a symbol in an attribute that no input shape binds)
//   - dtype / shape mismatch (from each op's inference), and declared types that disagree
//   - state: an input an op writes in place (OpDef::mutated_inputs, kv_attention's caches) must
//     be a graph input or param that no other node (nor another slot of the same node) reads and
//     that is not a graph output — the write is then its only effect and execution order cannot
//     change what anyone sees
//   - sizes: static dims and dim-list attributes are bounded (kMaxElements) so that the shape
//     arithmetic in every op's inference (products, sums) can never overflow int64
//
// It lives in ops/ because what it checks per op (arity, attribute rules, inference, state inputs) is
// that op's definition record (ops/op_def.h); the IR layer below holds the graph structure only.
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "opfuse/graph.h"
#include "ops/op_def.h"
#include "util/quote.h"

namespace opfuse {
namespace {

// 2^48 elements: far beyond any real tensor, far below int64 overflow in shape arithmetic.
constexpr int64_t kMaxElements = int64_t{1} << 48;
constexpr const char* kMaxElementsText = "2^48";

// Null when the static part of `s` has at most kMaxElements elements (no dim over the limit
// either, even where another dim is 0), else the reason.
std::optional<std::string> CheckSize(const Shape& s) {
  __int128 prod = 1;
  for (const auto& d : s) {
    if (!d.is_static()) continue;
    if (d.value > kMaxElements) return fmt::format("dim {} is larger than {}", d.value, kMaxElementsText);
    if (d.value > 1) prod *= d.value;
    if (prod > kMaxElements) return fmt::format("more than {} elements", kMaxElementsText);
  }
  return std::nullopt;
}

// Dim lists in attributes (reshape shape=, transpose perm=): each entry at most kMaxElements in
// magnitude and the product of the magnitudes at most 2^62, so inference may multiply them.
std::optional<std::string> CheckDimListSize(const DimList& l) {
  __int128 prod = 1;
  for (const auto& d : l) {
    if (!d.is_static()) continue;
    __int128 v = d.value < 0 ? -static_cast<__int128>(d.value) : d.value;
    if (v > kMaxElements) return fmt::format("entry {} is larger than {} in magnitude", d.value, kMaxElementsText);
    if (v > 1) prod *= v;
    if (prod > (static_cast<__int128>(1) << 62)) return std::string("entries multiply to more than 2^62");
  }
  return std::nullopt;
}

// Every attribute of `n` is one its op reads (OpDef::attrs), with a value its rule accepts; names
// beginning with '_' are the passes' annotations. A misspelled or unsupported attribute is an error,
// never a silent default.
Status CheckAttrs(const Node& n, const OpDef& def) {
  for (const auto& [key, attr] : n.attrs) {
    if (!key.empty() && key[0] == '_') continue;
    const AttrSpec* spec = nullptr;
    for (const AttrSpec& s : def.attrs)
      if (key == s.name) spec = &s;
    if (spec == nullptr) {
      std::string known;
      for (const AttrSpec& s : def.attrs) known += (known.empty() ? "" : ", ") + std::string(s.name);
      return NodeError(n, fmt::format("unknown attribute {} ({})", Quote(key),
                                      known.empty() ? "this op takes no attributes" : "it takes: " + known));
    }
    const auto* i = std::get_if<int64_t>(&attr);
    const auto* d = std::get_if<double>(&attr);
    const auto* str = std::get_if<std::string>(&attr);
    const bool number = i || d;
    const double x = i ? static_cast<double>(*i) : d ? *d : 0.0;
    std::string need;
    switch (spec->rule) {
      case AttrRule::kFlag: if (!i || (*i != 0 && *i != 1)) need = "0 or 1"; break;
      case AttrRule::kInt: if (!i) need = "an integer"; break;
      case AttrRule::kNonNegativeInt: if (!i || *i < 0) need = "an integer >= 0"; break;
      case AttrRule::kPositive: if (!number || !std::isfinite(x) || x <= 0) need = "a finite number > 0"; break;
      case AttrRule::kFinite: if (!number || !std::isfinite(x)) need = "a finite number"; break;
      case AttrRule::kNumber: if (!number) need = "a number"; break;
      case AttrRule::kString: if (!str) need = "a string"; break;
      case AttrRule::kDType: if (!str || !DTypeFromName(*str)) need = "a dtype name (f32, f16, bf16, i32, i64, bool)"; break;
      case AttrRule::kDims: if (!std::holds_alternative<DimList>(attr)) need = "a dim list [...]"; break;
    }
    if (!need.empty()) {
      const std::string got = i ? std::to_string(*i) : d ? fmt::format("{}", *d) : str ? Quote(*str) : "a list";
      return NodeError(n, fmt::format("attribute {} must be {}, got {}", key, need, got));
    }
  }
  return Status::Ok();
}

// Mutated inputs (see the list above). Runs after the dangling-id checks.
Status CheckStateInputs(const Graph& g) {
  std::vector<int> readers(g.values.size(), 0);
  for (const auto& n : g.nodes)
    if (!n.dead)
      for (int v : n.inputs) ++readers[v];
  for (const auto& n : g.nodes) {
    if (n.dead) continue;
    for (int slot : GetOpDef(n.op).mutated_inputs) {
      if (slot >= static_cast<int>(n.inputs.size())) continue;
      const Value& v = g.values[n.inputs[slot]];
      if (v.kind == ValueKind::kNode)
        return NodeError(n, fmt::format("state input {} ('{}') is written in place, so it must be a graph input or param, "
                                        "not the result of another op", slot, v.name));
      if (readers[n.inputs[slot]] != 1)
        return NodeError(n, fmt::format("state input {} ('{}') is written in place, so no other op (or other input of "
                                        "this one) may read it; it is read {} times", slot, v.name, readers[n.inputs[slot]]));
      if (g.IsGraphOutput(n.inputs[slot]))
        return NodeError(n, fmt::format("state input {} ('{}') is written in place and cannot also be a graph output",
                                        slot, v.name));
    }
  }
  return Status::Ok();
}

Status CheckStructure(const Graph& g) {
  const int nv = static_cast<int>(g.values.size());
  std::set<std::string> names;
  for (const auto& v : g.values) {
    if (v.name.empty()) return InvalidArgument("a value has an empty name");
    if (!names.insert(v.name).second) return InvalidArgument(fmt::format("duplicate value name '{}'", v.name));
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.dead) continue;
    const OpInfo& info = GetOpInfo(n.op);
    const int nin = static_cast<int>(n.inputs.size());
    if (nin < info.min_inputs || (info.max_inputs >= 0 && nin > info.max_inputs)) {
      std::string want = info.min_inputs == info.max_inputs ? std::to_string(info.min_inputs)
                         : info.max_inputs < 0 ? fmt::format("at least {}", info.min_inputs)
                                               : fmt::format("{} to {}", info.min_inputs, info.max_inputs);
      const bool one = want == "1" || want == "at least 1";
      return NodeError(n, fmt::format("arity: takes {} input{}, got {}", want, one ? "" : "s", nin));
    }
    if (static_cast<int>(n.outputs.size()) != info.num_outputs)
      return NodeError(n, fmt::format("arity: produces {} output{}, {} bound", info.num_outputs,
                                      info.num_outputs == 1 ? "" : "s", n.outputs.size()));
    for (int v : n.inputs)
      if (v < 0 || v >= nv) return NodeError(n, fmt::format("dangling input (value id {})", v));
    for (int v : n.outputs)
      if (v < 0 || v >= nv || g.values[v].producer != static_cast<int>(i))
        return NodeError(n, "output value is not owned by this node");
  }
  OPFUSE_RETURN_IF_ERROR(CheckStateInputs(g));
  if (g.outputs.empty()) return InvalidArgument("graph has no outputs");
  for (int v : g.outputs)
    if (v < 0 || v >= nv) return InvalidArgument(fmt::format("dangling graph output (value id {})", v));
  return Status::Ok();
}

// Topological order of live nodes, or a cycle error naming a node on the cycle.
StatusOr<std::vector<int>> TopoOrder(const Graph& g) {
  const int nn = static_cast<int>(g.nodes.size());
  std::vector<int> state(nn, 0), order;  // 0 new, 1 on stack, 2 done
  for (int root = 0; root < nn; ++root) {
    if (g.nodes[root].dead || state[root]) continue;
    std::vector<std::pair<int, size_t>> stack{{root, 0}};
    state[root] = 1;
    while (!stack.empty()) {
      auto& [n, k] = stack.back();
      if (k < g.nodes[n].inputs.size()) {
        int v = g.nodes[n].inputs[k++];
        int p = g.values[v].kind == ValueKind::kNode ? g.values[v].producer : -1;
        if (p < 0) continue;
        if (g.nodes[p].dead) return NodeError(g.nodes[n], fmt::format("uses '{}' of a removed node", g.values[v].name));
        if (state[p] == 1)
          return NodeError(g.nodes[p], fmt::format("cycle: '{}' depends on itself", g.values[g.nodes[p].outputs[0]].name));
        if (state[p] == 0) {
          state[p] = 1;
          stack.push_back({p, 0});
        }
      } else {
        state[n] = 2;
        order.push_back(n);
        stack.pop_back();
      }
    }
  }
  return order;
}

}  // namespace

Status VerifyAndInfer(Graph& g) {
  OPFUSE_RETURN_IF_ERROR(CheckStructure(g));
  OPFUSE_ASSIGN_OR_RETURN(std::vector<int> order, TopoOrder(g));
  const auto symbols = g.Symbols();
  const std::set<std::string> symset(symbols.begin(), symbols.end());
  for (int v : g.inputs)
    for (const auto& d : g.values[v].type.shape)
      if (d.is_static() && d.value < 0)
        return InvalidArgument(fmt::format("input '{}': negative dim {}", g.values[v].name, d.value));
  for (int v : g.inputs)
    if (auto why = CheckSize(g.values[v].type.shape))
      return InvalidArgument(fmt::format("input '{}': {} is too large: {}", g.values[v].name,
                                         g.values[v].type.ToString(), *why));
  for (int id : order) {
    Node& n = g.nodes[id];
    for (const auto& [key, attr] : n.attrs)
      if (const auto* dims = std::get_if<DimList>(&attr))
        for (const auto& d : *dims)
          if (!d.is_static() && !symset.count(d.sym))
            return NodeError(n, fmt::format("unbound symbol '{}' in attribute {} (no input shape uses it)", d.sym, key));
    for (const auto& [key, attr] : n.attrs)
      if (const auto* dims = std::get_if<DimList>(&attr))
        if (auto why = CheckDimListSize(*dims)) return NodeError(n, fmt::format("attribute {}: {}", key, *why));
    const OpDef& def = GetOpDef(n.op);
    OPFUSE_RETURN_IF_ERROR(CheckAttrs(n, def));
    if (!def.infer) return NodeError(n, "op has no shape inference (internal)");
    std::vector<TensorType> in;
    for (int v : n.inputs) in.push_back(g.values[v].type);
    auto out = def.infer(n, in);
    if (!out.ok()) return out.status();
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      Value& val = g.values[n.outputs[k]];
      if (val.declared && !(val.type == (*out)[k]))
        return NodeError(n, fmt::format("{} mismatch: '{}' declared {} but computes {}",
                                        val.type.dtype != (*out)[k].dtype ? "dtype" : "shape", val.name,
                                        val.type.ToString(), (*out)[k].ToString()));
      val.type = (*out)[k];
      if (auto why = CheckSize(val.type.shape))
        return NodeError(n, fmt::format("result '{}' {} is too large: {}", val.name, val.type.ToString(), *why));
    }
  }
  return Status::Ok();
}

}  // namespace opfuse
