// The opfuse graph IR: dtypes, symbolic shapes, values, nodes, fusion groups, and a builder.
//
// A Graph is a flat, topologically ordered list of nodes over SSA values. Dims are static integers
// or named symbols (e.g. `T` tokens) bound at run time, so one graph (and one generated kernel)
// serves every token count. Fusion passes do not nest graphs: they rewrite matched primitive
// subgraphs into composite ops (patterns) and record `FusionGroup`s over node ids, each carrying a
// `FusionDecision` — fuse, or no plus the reason (XLA-style: a decision always says why).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "opfuse/config.h"
#include "opfuse/status.h"

namespace opfuse {

// ------------------------------------------------------------------ ops (generated from ops.def)
enum class OpKind : int {
#define OPFUSE_OP(Enum, text, min_in, max_in, nout, kind, flags) k##Enum,
#include "opfuse/ops.def"
#undef OPFUSE_OP
};
inline constexpr int kNumOps = 0
#define OPFUSE_OP(Enum, text, min_in, max_in, nout, kind, flags) +1
#include "opfuse/ops.def"
#undef OPFUSE_OP
    ;

enum class FusionKind { kElementwise, kBroadcast, kReduction, kComposite, kLibrary, kView, kSource };
enum OpFlags : unsigned { kNone = 0, kBoolOut = 1, kFloatOnly = 2, kIntOut = 4 };

struct OpInfo {
  OpKind op;
  const char* name;
  int min_inputs, max_inputs, num_outputs;
  FusionKind kind;
  unsigned flags;
};
const OpInfo& GetOpInfo(OpKind op);
std::optional<OpKind> OpFromName(std::string_view name);
inline const char* OpName(OpKind op) { return GetOpInfo(op).name; }
const char* FusionKindName(FusionKind k);
// Elementwise in the fusion sense: unary, broadcast n-ary (and cast).
inline bool IsElementwise(OpKind op) {
  auto k = GetOpInfo(op).kind;
  return k == FusionKind::kElementwise || k == FusionKind::kBroadcast;
}

// ------------------------------------------------------------------ dtypes
enum class DType : int { kF32, kF16, kBF16, kI32, kI64, kBool };
const char* DTypeName(DType t);
std::optional<DType> DTypeFromName(std::string_view name);
int DTypeSize(DType t);
inline bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }
inline bool IsInt(DType t) { return t == DType::kI32 || t == DType::kI64; }

// ------------------------------------------------------------------ shapes
struct Dim {
  int64_t value = 0;   // the size when static
  std::string sym;     // non-empty: a named symbol bound at run time
  Dim() = default;
  Dim(int64_t v) : value(v) {}                      // NOLINT: 2048 is a Dim
  static Dim Sym(std::string s) { Dim d; d.sym = std::move(s); return d; }
  bool is_static() const { return sym.empty(); }
  bool operator==(const Dim& o) const { return value == o.value && sym == o.sym; }
  std::string ToString() const;
};
using Shape = std::vector<Dim>;
using Bindings = std::map<std::string, int64_t>;
std::string ShapeToString(const Shape& s);
// Element count, or nullopt when a symbol is unbound.
std::optional<int64_t> NumElements(const Shape& s, const Bindings& b = {});
StatusOr<std::vector<int64_t>> BindShape(const Shape& s, const Bindings& b);

struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && shape == o.shape; }
  std::string ToString() const;  // e.g. bf16[T, 2048]
};

// ------------------------------------------------------------------ attributes
using DimList = std::vector<Dim>;
using AttrValue = std::variant<int64_t, double, std::string, DimList>;
using Attrs = std::map<std::string, AttrValue>;
std::string AttrToString(const AttrValue& v);
int64_t AttrInt(const Attrs& a, const std::string& key, int64_t def);
double AttrFloat(const Attrs& a, const std::string& key, double def);  // ints convert
std::string AttrString(const Attrs& a, const std::string& key, const std::string& def);

// ------------------------------------------------------------------ graph
enum class ValueKind { kInput, kParam, kNode };
struct Value {
  std::string name;
  TensorType type;
  ValueKind kind = ValueKind::kNode;
  int producer = -1;  // node id for kNode values
  int slot = 0;       // which output of the producer
  bool declared = false;  // type written in the source; inference must agree with it
};

struct Node {
  OpKind op{};
  std::vector<int> inputs;   // value ids
  std::vector<int> outputs;  // value ids
  Attrs attrs;
  int line = 0;              // source line in a .ofg file, 0 when built by API
  bool dead = false;         // removed by a pass; dropped by Graph::Compact()
};

struct FusionDecision {
  bool fuse = false;
  std::string reason;
  static FusionDecision Yes(std::string r) { return {true, std::move(r)}; }
  static FusionDecision No(std::string r) { return {false, std::move(r)}; }
  std::string ToString() const { return (fuse ? "fuse: " : "no: ") + reason; }
};

// How a group runs. kAuto on a group: not scheduled yet; as a requested variant (the executor's
// option): whatever the schedule pass picks.
enum class Variant {
  kAuto,
  kUnfused,  // op by op: one library kernel per node, composites decomposed into primitives first
  kLibrary,  // the hand-written fused kernel (a fused group), or each node's library kernel
  kJit,      // a generated kernel for the whole group
};
const char* VariantName(Variant v);                    // "auto" | "unfused" | "library" | "jit"
StatusOr<Variant> ParseVariant(std::string_view s);    // the inverse; anything else is an error

// fuse_matmul's plan of a "matmul:" group (passes/fuse_matmul.cc), in the order the decode GEMV
// consumes it: node ids of the graph the group belongs to.
struct MatmulGroupPlan {
  int norm = -1;              // rms_norm / add_rms_norm computed as the prologue, or -1
  std::vector<int> matmuls;   // one GEMV segment each, in column order; with swiglu: {gate, up}
  std::vector<int> ropes;     // parallel to matmuls: the rope applied to that matmul's output, or -1
  std::vector<int> views;     // the reshapes between a matmul and its rope (views, no kernel)
  int swiglu = -1;            // the swiglu epilogue reading matmuls[0] (gate) and matmuls[1] (up), or -1
  // The most rows the group runs as one GEMV launch (more: its matmuls on cuBLASLt one by one): the
  // default kDecodeGemvMaxRows, raised up to kGemvCapacityRows by the schedule pass where a profile
  // measured the fused group faster at those rows.
  int64_t gemv_max_rows = kDecodeGemvMaxRows;
};

struct FusionGroup {
  std::vector<int> nodes;     // node ids, topological order
  std::string kind;           // "pattern:<name>" | "generic" | "single" | "matmul:<form>"
  FusionDecision decision;
  Variant variant = Variant::kAuto;  // set by the schedule pass
  std::string name;           // kernel-style name, e.g. fz_add_rms_norm_bf16_h2048
  std::optional<MatmulGroupPlan> matmul;  // "matmul:" groups only
};

class Graph {
 public:
  std::string name = "main";
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs;    // value ids of inputs and params, in declaration order
  std::vector<int> outputs;   // value ids
  std::vector<FusionGroup> groups;  // filled by the fusion passes

  int AddValue(std::string name, TensorType type, ValueKind kind);
  // Appends a node; output values get fresh names (prefix + counter) unless names are given.
  int AddNode(OpKind op, std::vector<int> inputs, std::vector<TensorType> out_types, Attrs attrs = {},
              std::vector<std::string> out_names = {});
  std::optional<int> FindValue(std::string_view name) const;
  // A name no value has: `hint`, else hint_1, hint_2, ... Amortised O(1) (graphs of 10^5 ops are
  // built and rewritten one name at a time): the names are indexed incrementally as values are
  // appended, so a value renamed in place must go through RenameValue for the index to see it.
  std::string FreshName(std::string_view hint) const;
  void RenameValue(int value, std::string name);
  // Users of each value (node ids), for passes.
  std::vector<std::vector<int>> Users() const;
  bool IsGraphOutput(int value) const;
  // Redirects every use of `from` (node inputs and graph outputs) to `to`.
  void ReplaceAllUses(int from, int to);
  // Drops dead nodes and unreferenced node values, renumbers, and sorts nodes topologically.
  // Groups are cleared (they refer to node ids). Fails on a cycle.
  Status Compact();
  // Symbols appearing in input shapes, sorted.
  std::vector<std::string> Symbols() const;

 private:
  // FreshName's index: every name values[0, indexed_) had when indexed (a superset of the names in
  // use: a renamed-away name stays "taken", which only skips it), and the next suffix per hint.
  mutable std::unordered_set<std::string> name_index_;
  mutable size_t indexed_ = 0;
  mutable std::unordered_map<std::string, int> next_suffix_;
};

// Checks structure (names, arity, cycles, symbols) and infers every node's output types,
// checking declared types. Errors name the node (and line when parsed from text).
Status VerifyAndInfer(Graph& g);

// ------------------------------------------------------------------ builder
// GraphBuilder b("swiglu");
// auto gate = b.Input("gate", DType::kBF16, {Dim::Sym("T"), 5632});
// auto up = b.Input("up", DType::kBF16, {Dim::Sym("T"), 5632});
// b.Output(b.Mul({b.Silu({gate}), up}), "out");
// StatusOr<Graph> g = b.Build();   // verified, types inferred
class GraphBuilder {
 public:
  explicit GraphBuilder(std::string name = "main") { g_.name = std::move(name); }
  int Input(std::string name, DType dtype, Shape shape);
  int Param(std::string name, DType dtype, Shape shape);
  // Adds a node; returns its output value ids. Types are inferred at Build().
  std::vector<int> OpN(OpKind op, std::vector<int> inputs, Attrs attrs = {});
  int Op(OpKind op, std::vector<int> inputs, Attrs attrs = {}) { return OpN(op, std::move(inputs), std::move(attrs))[0]; }
  int Constant(double value, DType dtype = DType::kF32);
  void Output(int value, std::string rename = "");
  StatusOr<Graph> Build();
#define OPFUSE_OP(Enum, text, min_in, max_in, nout, kind, flags) \
  int Enum(std::vector<int> in, Attrs attrs = {}) { return Op(OpKind::k##Enum, std::move(in), std::move(attrs)); }
#include "opfuse/ops.def"
#undef OPFUSE_OP

 private:
  Graph g_;
  std::vector<std::pair<int, std::string>> renames_;
};

// ------------------------------------------------------------------ text format (.ofg)
// Grammar: docs/graph_format.md. Parse errors are InvalidArgument "line N: <problem>".
StatusOr<Graph> ParseGraph(std::string_view text);
// The syntax alone (names resolved, no VerifyAndInfer): for tests of the parser itself.
StatusOr<Graph> ParseGraphUnverified(std::string_view text);
StatusOr<Graph> ParseGraphFile(const std::string& path);
// Prints the graph; with groups, each group is shown as a comment before its first node.
std::string PrintGraph(const Graph& g, bool with_groups = true);

}  // namespace opfuse
