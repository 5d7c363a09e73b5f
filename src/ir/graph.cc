// Graph IR basics: the op table generated from ops.def, dtype names, dims, attributes, the Graph
// container's mutation helpers (used by every pass) and the GraphBuilder.
#include <algorithm>
#include <cmath>
#include <queue>
#include <set>

#include <fmt/format.h>

#include "opfuse/graph.h"

namespace opfuse {

std::string Status::ToString() const {
  static const char* kNames[] = {"ok", "invalid argument", "not found", "unimplemented", "internal",
                                 "unavailable"};
  if (ok()) return "ok";
  return fmt::format("{}: {}", kNames[static_cast<int>(code_)], message_);
}

namespace {
const OpInfo kOpTable[] = {
#define OPFUSE_OP(Enum, text, min_in, max_in, nout, kind, flags) \
  {OpKind::k##Enum, text, min_in, max_in, nout, FusionKind::kind, flags},
#include "opfuse/ops.def"
#undef OPFUSE_OP
};
}  // namespace

const OpInfo& GetOpInfo(OpKind op) { return kOpTable[static_cast<int>(op)]; }

std::optional<OpKind> OpFromName(std::string_view name) {
  for (const auto& info : kOpTable)
    if (name == info.name) return info.op;
  return std::nullopt;
}

const char* FusionKindName(FusionKind k) {
  switch (k) {
    case FusionKind::kElementwise: return "elementwise";
    case FusionKind::kBroadcast: return "broadcast";
    case FusionKind::kReduction: return "reduction";
    case FusionKind::kComposite: return "composite";
    case FusionKind::kLibrary: return "library";
    case FusionKind::kView: return "view";
    case FusionKind::kSource: return "source";
  }
  return "?";
}

// ------------------------------------------------------------------ dtypes
namespace {
struct DTypeRow { DType t; const char* name; int size; };
constexpr DTypeRow kDTypes[] = {{DType::kF32, "f32", 4},  {DType::kF16, "f16", 2}, {DType::kBF16, "bf16", 2},
                                {DType::kI32, "i32", 4},  {DType::kI64, "i64", 8}, {DType::kBool, "bool", 1}};
}  // namespace
const char* DTypeName(DType t) { return kDTypes[static_cast<int>(t)].name; }
int DTypeSize(DType t) { return kDTypes[static_cast<int>(t)].size; }
std::optional<DType> DTypeFromName(std::string_view name) {
  for (const auto& r : kDTypes)
    if (name == r.name) return r.t;
  return std::nullopt;
}

// ------------------------------------------------------------------ variants
namespace {
constexpr std::pair<Variant, const char*> kVariants[] = {
    {Variant::kAuto, "auto"}, {Variant::kUnfused, "unfused"}, {Variant::kLibrary, "library"}, {Variant::kJit, "jit"}};
}  // namespace
const char* VariantName(Variant v) {
  for (const auto& [k, name] : kVariants)
    if (k == v) return name;
  return "?";
}
StatusOr<Variant> ParseVariant(std::string_view s) {
  for (const auto& [k, name] : kVariants)
    if (s == name) return k;
  return InvalidArgument(fmt::format("unknown variant '{}' (expected auto, unfused, library or jit)", s));
}

// ------------------------------------------------------------------ dims and shapes
std::string Dim::ToString() const { return is_static() ? std::to_string(value) : sym; }

std::string ShapeToString(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + s[i].ToString();
  return out + "]";
}

std::string TensorType::ToString() const { return std::string(DTypeName(dtype)) + ShapeToString(shape); }

std::optional<int64_t> NumElements(const Shape& s, const Bindings& b) {
  int64_t n = 1;
  for (const auto& d : s) {
    if (d.is_static()) {
      n *= d.value;
    } else {
      auto it = b.find(d.sym);
      if (it == b.end()) return std::nullopt;
      n *= it->second;
    }
  }
  return n;
}

StatusOr<std::vector<int64_t>> BindShape(const Shape& s, const Bindings& b) {
  std::vector<int64_t> out;
  out.reserve(s.size());
  for (const auto& d : s) {
    if (d.is_static()) {
      out.push_back(d.value);
      continue;
    }
    auto it = b.find(d.sym);
    if (it == b.end()) return InvalidArgument(fmt::format("unbound symbol '{}' (give --shape {}=N)", d.sym, d.sym));
    if (it->second < 0) return InvalidArgument(fmt::format("symbol '{}' bound to negative {}", d.sym, it->second));
    out.push_back(it->second);
  }
  return out;
}

// ------------------------------------------------------------------ attributes
std::string AttrToString(const AttrValue& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) {
    // Shortest text that reads back to the same double, always with a '.' or exponent.
    // Any NaN prints as "nan" (the parser reads no "-nan").
    if (std::isnan(*d)) return "nan";
    std::string s = fmt::format("{}", *d);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  const auto& l = std::get<DimList>(v);
  std::string out = "[";
  for (size_t i = 0; i < l.size(); ++i) out += (i ? ", " : "") + l[i].ToString();
  return out + "]";
}
int64_t AttrInt(const Attrs& a, const std::string& key, int64_t def) {
  auto it = a.find(key);
  if (it == a.end()) return def;
  if (auto* i = std::get_if<int64_t>(&it->second)) return *i;
  if (auto* d = std::get_if<double>(&it->second)) {
    // Saturate: casting a double outside int64's range (1e300, inf) is undefined behaviour.
    if (std::isnan(*d)) return def;
    if (*d >= 9223372036854775808.0) return INT64_MAX;
    if (*d <= -9223372036854775808.0) return INT64_MIN;
    return static_cast<int64_t>(*d);
  }
  return def;
}
double AttrFloat(const Attrs& a, const std::string& key, double def) {
  auto it = a.find(key);
  if (it == a.end()) return def;
  if (auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  if (auto* d = std::get_if<double>(&it->second)) return *d;
  return def;
}
std::string AttrString(const Attrs& a, const std::string& key, const std::string& def) {
  auto it = a.find(key);
  if (it == a.end()) return def;
  if (auto* s = std::get_if<std::string>(&it->second)) return *s;
  return def;
}

// ------------------------------------------------------------------ graph
int Graph::AddValue(std::string vname, TensorType type, ValueKind kind) {
  Value v;
  v.name = std::move(vname);
  v.type = std::move(type);
  v.kind = kind;
  values.push_back(std::move(v));
  int id = static_cast<int>(values.size()) - 1;
  if (kind != ValueKind::kNode) inputs.push_back(id);
  return id;
}

std::string Graph::FreshName(std::string_view hint) const {
  if (indexed_ > values.size()) {  // values were dropped (Compact): index again from scratch
    name_index_.clear();
    indexed_ = 0;
  }
  for (; indexed_ < values.size(); ++indexed_) name_index_.insert(values[indexed_].name);
  std::string base(hint.empty() ? "t" : hint);
  if (!name_index_.count(base)) return base;
  int& i = next_suffix_[base];
  for (;;) {
    std::string cand = fmt::format("{}_{}", base, ++i);
    if (!name_index_.count(cand)) return cand;
  }
}

void Graph::RenameValue(int value, std::string name) {
  if (static_cast<size_t>(value) < indexed_) name_index_.insert(name);
  values[value].name = std::move(name);
}

int Graph::AddNode(OpKind op, std::vector<int> ins, std::vector<TensorType> out_types, Attrs attrs,
                   std::vector<std::string> out_names) {
  Node n;
  n.op = op;
  n.inputs = std::move(ins);
  n.attrs = std::move(attrs);
  int id = static_cast<int>(nodes.size());
  int nout = GetOpInfo(op).num_outputs;
  if (static_cast<int>(out_types.size()) < nout) out_types.resize(nout);
  for (int i = 0; i < nout; ++i) {
    std::string vname = i < static_cast<int>(out_names.size()) && !out_names[i].empty()
                            ? out_names[i] : FreshName(OpName(op));
    int v = AddValue(vname, out_types[i], ValueKind::kNode);
    values[v].producer = id;
    values[v].slot = i;
    n.outputs.push_back(v);
  }
  nodes.push_back(std::move(n));
  return id;
}

std::optional<int> Graph::FindValue(std::string_view vname) const {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == vname) return static_cast<int>(i);
  return std::nullopt;
}

std::vector<std::vector<int>> Graph::Users() const {
  std::vector<std::vector<int>> users(values.size());
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n].dead) continue;
    for (int v : nodes[n].inputs)
      if (users[v].empty() || users[v].back() != static_cast<int>(n)) users[v].push_back(static_cast<int>(n));
  }
  return users;
}

bool Graph::IsGraphOutput(int value) const {
  return std::find(outputs.begin(), outputs.end(), value) != outputs.end();
}

void Graph::ReplaceAllUses(int from, int to) {
  for (auto& n : nodes)
    for (int& v : n.inputs)
      if (v == from) v = to;
  for (int& v : outputs)
    if (v == from) v = to;
}

Status Graph::Compact() {
  // Topological order over live nodes (Kahn), stable with respect to the current order.
  const int nn = static_cast<int>(nodes.size());
  std::vector<int> indeg(nn, 0);
  std::vector<std::vector<int>> succ(nn);
  for (int n = 0; n < nn; ++n) {
    if (nodes[n].dead) continue;
    for (int v : nodes[n].inputs) {
      int p = values[v].producer;
      if (values[v].kind == ValueKind::kNode && p >= 0) {
        if (nodes[p].dead) return Internal(fmt::format("node {} uses value '{}' of a removed node", n, values[v].name));
        succ[p].push_back(n);
        ++indeg[n];
      }
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int n = 0; n < nn; ++n)
    if (!nodes[n].dead && indeg[n] == 0) ready.push(n);
  std::vector<int> order;
  while (!ready.empty()) {
    int n = ready.top();
    ready.pop();
    order.push_back(n);
    for (int s : succ[n])
      if (--indeg[s] == 0) ready.push(s);
  }
  int live = 0;
  for (const auto& n : nodes) live += !n.dead;
  if (static_cast<int>(order.size()) != live) return InvalidArgument("graph has a cycle");

  // Keep inputs/params always, node values only of live nodes.
  std::vector<int> vmap(values.size(), -1);
  std::vector<Value> nv;
  for (int v : inputs) {
    vmap[v] = static_cast<int>(nv.size());
    nv.push_back(values[v]);
  }
  std::vector<Node> nn_list;
  for (int old : order) {
    Node n = nodes[old];
    for (int& o : n.outputs) {
      vmap[o] = static_cast<int>(nv.size());
      nv.push_back(values[o]);
      nv.back().producer = static_cast<int>(nn_list.size());
      o = vmap[o];  // the node's outputs are renumbered too
    }
    nn_list.push_back(std::move(n));
  }
  for (auto& n : nn_list)
    for (int& v : n.inputs) v = vmap[v];
  std::vector<int> new_inputs, new_outputs;
  for (int v : inputs) new_inputs.push_back(vmap[v]);
  for (int v : outputs) {
    if (vmap[v] < 0) return Internal(fmt::format("graph output '{}' was removed", values[v].name));
    new_outputs.push_back(vmap[v]);
  }
  values = std::move(nv);
  nodes = std::move(nn_list);
  inputs = std::move(new_inputs);
  outputs = std::move(new_outputs);
  groups.clear();
  return Status::Ok();
}

std::vector<std::string> Graph::Symbols() const {
  std::set<std::string> syms;
  for (int v : inputs)
    for (const auto& d : values[v].type.shape)
      if (!d.is_static()) syms.insert(d.sym);
  return {syms.begin(), syms.end()};
}

// ------------------------------------------------------------------ builder
int GraphBuilder::Input(std::string vname, DType dtype, Shape shape) {
  return g_.AddValue(std::move(vname), {dtype, std::move(shape)}, ValueKind::kInput);
}
int GraphBuilder::Param(std::string vname, DType dtype, Shape shape) {
  return g_.AddValue(std::move(vname), {dtype, std::move(shape)}, ValueKind::kParam);
}
std::vector<int> GraphBuilder::OpN(OpKind op, std::vector<int> inputs, Attrs attrs) {
  int n = g_.AddNode(op, std::move(inputs), {}, std::move(attrs));
  return g_.nodes[n].outputs;
}
int GraphBuilder::Constant(double value, DType dtype) {
  return Op(OpKind::kConstant, {}, {{"value", value}, {"dtype", std::string(DTypeName(dtype))}});
}
void GraphBuilder::Output(int value, std::string rename) {
  g_.outputs.push_back(value);
  if (!rename.empty()) renames_.emplace_back(value, std::move(rename));
}
StatusOr<Graph> GraphBuilder::Build() {
  Graph g = g_;
  std::unordered_map<std::string, int> by_name;  // one map, not a scan per rename
  for (size_t i = 0; i < g.values.size(); ++i) by_name.emplace(g.values[i].name, static_cast<int>(i));
  for (auto& [v, name] : renames_) {
    if (v < 0 || v >= static_cast<int>(g.values.size())) return InvalidArgument("output refers to an unknown value");
    auto existing = by_name.find(name);
    if (existing != by_name.end() && existing->second != v && g.values[existing->second].name == name)
      return InvalidArgument(fmt::format("duplicate value name '{}'", name));
    g.RenameValue(v, name);
    by_name[name] = v;
  }
  OPFUSE_RETURN_IF_ERROR(VerifyAndInfer(g));
  return g;
}

}  // namespace opfuse
