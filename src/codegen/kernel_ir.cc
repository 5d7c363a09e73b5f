// Lowering a fusion group to the kernel IR (see kernel_ir.h for the model).
// Primitive elementwise ops map one-to-one onto scalar exprs; reductions become kReduce; composite
// ops are lowered here in terms of the same exprs (an RMSNorm is a sum-reduction pass and an
// epilogue), so patterns and generic groups share one emitter and one interpreter.
#include "codegen/kernel_ir.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "ops/op_def.h"

namespace opfuse::codegen {

const char* AccessName(Access a) {
  switch (a) {
    case Access::kFull: return "full";
    case Access::kChannel: return "channel";
    case Access::kRowScalar: return "row";
    case Access::kScalar: return "scalar";
    case Access::kGeneral: return "general";
  }
  return "?";
}

namespace {

bool IsOne(const Dim& d) { return d.is_static() && d.value == 1; }

// Classifies `s` against the iteration space.
Access Classify(const Shape& s, const Shape& space, std::vector<bool>* varies) {
  if (s == space) return Access::kFull;
  const size_t off = space.size() - s.size();
  bool all_one = true;
  for (const auto& d : s) all_one &= IsOne(d);
  if (all_one) return Access::kScalar;
  varies->assign(space.size(), false);
  for (size_t i = 0; i < s.size(); ++i) (*varies)[off + i] = !IsOne(s[i]);
  const size_t last = space.size() - 1;
  bool channel = (*varies)[last], row = !(*varies)[last];
  for (size_t i = 0; i < last; ++i) {
    channel &= !(*varies)[i];
    row &= (*varies)[i] || IsOne(space[i]);
  }
  // Channel needs the last dim to actually be C; row needs every leading dim present.
  if (channel && !s.empty() && s.back() == space.back()) return Access::kChannel;
  if (row && off == 0 && !IsOne(space.back())) return Access::kRowScalar;
  return Access::kGeneral;
}

class Lowering {
 public:
  Lowering(const Graph& g, std::vector<int> nodes) : g_(g), nodes_(std::move(nodes)) {
    std::sort(nodes_.begin(), nodes_.end());  // node ids are topological after Graph::Compact
  }

  StatusOr<Kernel> Run() {
    if (nodes_.empty()) return InvalidArgument("empty group");
    std::set<int> in_group(nodes_.begin(), nodes_.end());
    for (int n : nodes_) {
      const Node& node = g_.nodes[n];
      FusionKind k = GetOpInfo(node.op).kind;
      if (k == FusionKind::kLibrary || k == FusionKind::kView)
        return Unimplemented(fmt::format("{} is a {} op: not lowered by the JIT", OpName(node.op), FusionKindName(k)));
      if (node.op == OpKind::kArgmax) return Unimplemented("argmax is not lowered by the JIT (library kernel)");
      for (int v : node.outputs)
        if (IsInt(g_.values[v].type.dtype)) return Unimplemented(fmt::format("integer result '{}' ({}) is not lowered by the JIT", g_.values[v].name, DTypeName(g_.values[v].type.dtype)));
      for (int v : node.inputs)
        if (IsInt(g_.values[v].type.dtype)) return Unimplemented(fmt::format("integer input '{}' is not lowered by the JIT", g_.values[v].name));
      k_.ops.push_back(OpName(node.op));
    }
    // Iteration space: broadcast of every value the group touches.
    Shape space;
    auto widen = [&](const Shape& s) -> Status {
      auto b = BroadcastShapes(space, s);
      if (!b.ok()) return b.status();
      space = *b;
      return Status::Ok();
    };
    for (int n : nodes_) {
      for (int v : g_.nodes[n].inputs) OPFUSE_RETURN_IF_ERROR(widen(g_.values[v].type.shape));
      for (int v : g_.nodes[n].outputs) OPFUSE_RETURN_IF_ERROR(widen(g_.values[v].type.shape));
    }
    if (space.empty()) space = {Dim(1)};
    k_.space = space;
    for (const auto& d : space)
      if (!d.is_static() && std::find(k_.symbols.begin(), k_.symbols.end(), d.sym) == k_.symbols.end()) k_.symbols.push_back(d.sym);

    auto users = g_.Users();
    for (int n : nodes_) {
      const Node& node = g_.nodes[n];
      std::vector<int> args;
      for (int v : node.inputs) {
        OPFUSE_ASSIGN_OR_RETURN(int e, ValueExpr(v, in_group));
        args.push_back(e);
      }
      OPFUSE_ASSIGN_OR_RETURN(std::vector<int> outs, LowerNode(node, args));
      for (size_t i = 0; i < outs.size(); ++i) value_expr_[node.outputs[i]] = outs[i];
    }
    // Outputs: values produced here and used outside the group or by the graph.
    for (int n : nodes_) {
      for (int v : g_.nodes[n].outputs) {
        bool external = g_.IsGraphOutput(v);
        for (int u : users[v]) external |= !in_group.count(u);
        if (!external) continue;
        KernelOutput o;
        o.tensor = Tensor(v);
        o.expr = value_expr_.at(v);
        // A reduction's [1, ..., 1] output over a space of one row ([1, C]) is that row's value: a row
        // output (its row kernels' forms — window mode, the stream — are those of any row count).
        if (o.tensor.access == Access::kScalar && o.tensor.type.shape.size() == space.size() && !IsOne(space.back()) &&
            k_.exprs[o.expr].row_level && k_.exprs[o.expr].kind != ExprKind::kConst)
          o.tensor.access = Access::kRowScalar;
        if (o.tensor.access == Access::kGeneral)
          return Unimplemented(fmt::format("output '{}' {} is a partial broadcast of the iteration space {}", o.tensor.name,
                                           ShapeToString(o.tensor.type.shape), ShapeToString(space)));
        k_.outputs.push_back(o);
      }
    }
    if (k_.outputs.empty()) return InvalidArgument("group has no outputs");
    for (const auto& e : k_.exprs) k_.num_passes = std::max(k_.num_passes, e.depth);
    Name();
    return k_;
  }

 private:
  KernelTensor Tensor(int v) {
    KernelTensor t;
    t.name = g_.values[v].name;
    t.graph_value = v;
    t.type = g_.values[v].type;
    t.access = Classify(t.type.shape, k_.space, &t.varies);
    return t;
  }

  int Add(Expr e) {
    for (int a : e.args) e.depth = std::max(e.depth, k_.exprs[a].depth);
    k_.exprs.push_back(std::move(e));
    return static_cast<int>(k_.exprs.size()) - 1;
  }
  int Op(OpKind op, std::vector<int> args) {
    Expr e;
    e.kind = ExprKind::kOp;
    e.op = op;
    e.row_level = true;
    for (int a : args) e.row_level &= k_.exprs[a].row_level;
    e.args = std::move(args);
    return Add(std::move(e));
  }
  int Const(double v) {
    Expr e;
    e.kind = ExprKind::kConst;
    e.constant = v;
    e.row_level = true;
    return Add(e);
  }
  int Cols() {
    Expr e;
    e.kind = ExprKind::kCols;
    e.row_level = true;
    return Add(e);
  }
  int Reduce(OpKind op, int arg) {
    Expr e;
    e.kind = ExprKind::kReduce;
    e.op = op;
    e.args = {arg};
    e.row_level = true;
    e.depth = k_.exprs[arg].depth + 1;
    k_.exprs.push_back(e);
    return static_cast<int>(k_.exprs.size()) - 1;
  }
  int Round(int arg, DType t) {
    if (t == DType::kF32) return arg;
    Expr e;
    e.kind = ExprKind::kRound;
    e.dtype = t;
    e.args = {arg};
    e.row_level = k_.exprs[arg].row_level;
    return Add(e);
  }
  int InputIndex(int v) {
    for (size_t i = 0; i < k_.inputs.size(); ++i)
      if (k_.inputs[i].graph_value == v) return static_cast<int>(i);
    k_.inputs.push_back(Tensor(v));
    return static_cast<int>(k_.inputs.size()) - 1;
  }
  StatusOr<int> ValueExpr(int v, const std::set<int>& in_group) {
    if (auto it = value_expr_.find(v); it != value_expr_.end()) return it->second;
    int p = g_.values[v].producer;
    if (g_.values[v].kind == ValueKind::kNode && p >= 0 && in_group.count(p))
      return Internal(fmt::format("value '{}' used before it is computed in the group", g_.values[v].name));
    Expr e;
    e.kind = ExprKind::kLoad;
    e.input = InputIndex(v);
    Access a = k_.inputs[e.input].access;
    e.row_level = (a == Access::kRowScalar || a == Access::kScalar);
    int id = Add(e);
    value_expr_[v] = id;
    return id;
  }
  // Reduction over c of an element-level expression whose row length is C.
  StatusOr<int> RowReduce(const Node& n, OpKind op, int arg, const Shape& in_shape) {
    if (in_shape.empty() || !(in_shape.back() == k_.space.back()))
      return Unimplemented(fmt::format("{} reduces a dim ({}) other than the kernel's row ({})", OpName(n.op),
                                       in_shape.empty() ? "scalar" : in_shape.back().ToString(), k_.space.back().ToString()));
    return Reduce(op, arg);
  }

  StatusOr<std::vector<int>> LowerNode(const Node& n, const std::vector<int>& a) {
    const auto& in_shape = [&](int i) -> const Shape& { return g_.values[n.inputs[i]].type.shape; };
    const DType out_dtype = g_.values[n.outputs[0]].type.dtype;
    switch (GetOpInfo(n.op).kind) {
      case FusionKind::kSource:
        return std::vector<int>{Const(AttrFloat(n.attrs, "value", 0.0))};
      case FusionKind::kElementwise:
        if (n.op == OpKind::kCast) return std::vector<int>{Round(a[0], out_dtype)};
        return std::vector<int>{Op(n.op, a)};
      case FusionKind::kBroadcast:
        return std::vector<int>{Op(n.op, a)};
      case FusionKind::kReduction: {
        OpKind op = n.op == OpKind::kMax ? OpKind::kMax : OpKind::kSum;
        OPFUSE_ASSIGN_OR_RETURN(int r, RowReduce(n, op, a[0], in_shape(0)));
        if (n.op == OpKind::kMean) r = Op(OpKind::kDiv, {r, Cols()});
        return std::vector<int>{r};
      }
      case FusionKind::kComposite:
        return LowerComposite(n, a);
      default:
        return Unimplemented(fmt::format("{} is not lowered by the JIT", OpName(n.op)));
    }
  }

  StatusOr<std::vector<int>> LowerComposite(const Node& n, std::vector<int> a) {
    const Shape& xs = g_.values[n.inputs[0]].type.shape;
    const DType dt = g_.values[n.inputs[0]].type.dtype;
    auto rms = [&](int x, int w, double eps) -> StatusOr<int> {
      OPFUSE_ASSIGN_OR_RETURN(int ss, RowReduce(n, OpKind::kSum, Op(OpKind::kMul, {x, x}), xs));
      int inv = Op(OpKind::kRsqrt, {Op(OpKind::kAdd, {Op(OpKind::kDiv, {ss, Cols()}), Const(eps)})});
      int y = Op(OpKind::kMul, {x, inv});
      return w >= 0 ? Op(OpKind::kMul, {y, w}) : y;
    };
    switch (n.op) {
      case OpKind::kRmsNorm: {
        OPFUSE_ASSIGN_OR_RETURN(int y, rms(a[0], a.size() > 1 ? a[1] : -1, AttrFloat(n.attrs, "eps", 1e-6)));
        return std::vector<int>{y};
      }
      case OpKind::kAddRmsNorm: {
        int s = Round(Op(OpKind::kAdd, {a[0], a[1]}), dt);  // the residual sum is stored, so normalise it rounded
        OPFUSE_ASSIGN_OR_RETURN(int y, rms(s, a[2], AttrFloat(n.attrs, "eps", 1e-6)));
        return std::vector<int>{y, s};
      }
      case OpKind::kLayerNorm: {
        OPFUSE_ASSIGN_OR_RETURN(int sum, RowReduce(n, OpKind::kSum, a[0], xs));
        int mean = Op(OpKind::kDiv, {sum, Cols()});
        int d = Op(OpKind::kSub, {a[0], mean});
        OPFUSE_ASSIGN_OR_RETURN(int ss, RowReduce(n, OpKind::kSum, Op(OpKind::kMul, {d, d}), xs));
        int inv = Op(OpKind::kRsqrt, {Op(OpKind::kAdd, {Op(OpKind::kDiv, {ss, Cols()}), Const(AttrFloat(n.attrs, "eps", 1e-5))})});
        int y = Op(OpKind::kMul, {d, inv});
        if (a.size() > 1) y = Op(OpKind::kMul, {y, a[1]});
        if (a.size() > 2) y = Op(OpKind::kAdd, {y, a[2]});
        return std::vector<int>{y};
      }
      case OpKind::kSoftmax: {
        // Base 2, as the library kernel (src/kernels/softmax.cu): z = (x * scale + mask) * log2(e)
        // with scale * log2(e) folded into one constant (one FMUL, or one FMA with a mask), then
        // e = 2^(z - max z) and y = e * (1 / sum e). The register path keeps e from the sum's pass
        // (the emitter's pass-value cache): one exp2 per element and one FMUL.
        constexpr double kLog2e = 1.4426950408889634;
        const double scale = AttrFloat(n.attrs, "scale", 1.0);
        int s = Op(OpKind::kMul, {a[0], Const(scale * kLog2e)});
        if (a.size() > 1) s = Op(OpKind::kAdd, {s, Op(OpKind::kMul, {a[1], Const(kLog2e)})});
        if (AttrInt(n.attrs, "causal", 0)) {
          if (xs.size() < 2) return Unimplemented("causal softmax needs rank >= 2");
          Expr e;
          e.kind = ExprKind::kCausal;
          e.args = {s};
          s = Add(e);
        }
        OPFUSE_ASSIGN_OR_RETURN(int m, RowReduce(n, OpKind::kMax, s, xs));
        const int e = Op(OpKind::kExp2, {Op(OpKind::kSub, {s, m})});
        OPFUSE_ASSIGN_OR_RETURN(int z, RowReduce(n, OpKind::kSum, e, xs));
        return std::vector<int>{Op(OpKind::kMul, {e, Op(OpKind::kRecip, {z})})};  // 1 / sum: row-level
      }
      case OpKind::kSwiglu:
        return std::vector<int>{Op(OpKind::kMul, {Op(OpKind::kSilu, {a[0]}), a[1]})};
      case OpKind::kGeglu:
        return std::vector<int>{Op(OpKind::kMul, {Op(OpKind::kGelu, {a[0]}), a[1]})};
      case OpKind::kRope: {
        const Expr& x = k_.exprs[a[0]];
        if (x.kind != ExprKind::kLoad || k_.inputs[x.input].access != Access::kFull)
          return Unimplemented("rope: x must be a full-shape input of the kernel (rotate-half reads neighbours)");
        if (!(xs.back() == k_.space.back())) return Unimplemented("rope: x's last dim must be the kernel row");
        Expr rot;
        rot.kind = ExprKind::kLoadRotHalf;
        rot.input = x.input;
        int r = Add(rot);
        return std::vector<int>{Op(OpKind::kAdd, {Op(OpKind::kMul, {a[0], a[1]}), Op(OpKind::kMul, {r, a[2]})})};
      }
      default:
        return Unimplemented(fmt::format("{} has no JIT lowering", OpName(n.op)));
    }
  }

  void Name() {
    std::string body;
    if (nodes_.size() == 1 && GetOpInfo(g_.nodes[nodes_[0]].op).kind == FusionKind::kComposite) {
      body = OpName(g_.nodes[nodes_[0]].op);
    } else {
      std::vector<std::string> uniq;
      for (const auto& o : k_.ops)
        if (o != "constant" && std::find(uniq.begin(), uniq.end(), o) == uniq.end()) uniq.push_back(o);
      for (size_t i = 0; i < uniq.size() && i < 4; ++i) body += (i ? "_" : "") + uniq[i];
      if (uniq.size() > 4) body += fmt::format("_{}more", uniq.size() - 4);
    }
    DType dt = k_.outputs[0].tensor.type.dtype;
    const Dim& c = k_.cols();
    k_.name = fmt::format("fz_{}_{}_{}{}", body, DTypeName(dt), k_.is_row() ? "h" : "w", c.ToString());
    // Static leading dims are baked into the kernel too (e.g. RoPE's head count): name them.
    std::string lead;
    for (size_t d = 0; d + 1 < k_.space.size(); ++d)
      if (k_.space[d].is_static() && k_.space[d].value != 1) lead += (lead.empty() ? "" : "x") + std::to_string(k_.space[d].value);
    if (!lead.empty()) k_.name += "_x" + lead;
    std::string args;
    for (size_t i = 0; i < k_.inputs.size(); ++i) args += (i ? ", " : "") + k_.inputs[i].name;
    k_.summary = fmt::format("{}({})", fmt::join(k_.ops, " -> "), args);
  }

  const Graph& g_;
  std::vector<int> nodes_;
  Kernel k_;
  std::map<int, int> value_expr_;
};

}  // namespace

StatusOr<Kernel> BuildKernel(const Graph& g, const std::vector<int>& nodes) { return Lowering(g, nodes).Run(); }
StatusOr<Kernel> BuildKernel(const Graph& g, const FusionGroup& group) { return BuildKernel(g, group.nodes); }

std::string Kernel::ToString() const {
  std::string s = fmt::format("kernel {} space={} passes={}\n", name, ShapeToString(space), num_passes);
  for (size_t i = 0; i < inputs.size(); ++i)
    s += fmt::format("  in{} {}: {} ({})\n", i, inputs[i].name, inputs[i].type.ToString(), AccessName(inputs[i].access));
  for (size_t i = 0; i < exprs.size(); ++i) {
    const Expr& e = exprs[i];
    std::string args;
    for (int a : e.args) args += fmt::format(" e{}", a);
    s += fmt::format("  e{} = {} {}{}{} depth={}{}\n", i,
                     e.kind == ExprKind::kLoad ? "load" : e.kind == ExprKind::kLoadRotHalf ? "load_rot_half"
                     : e.kind == ExprKind::kConst ? "const" : e.kind == ExprKind::kOp ? "op"
                     : e.kind == ExprKind::kRound ? "round" : e.kind == ExprKind::kReduce ? "reduce"
                     : e.kind == ExprKind::kCausal ? "causal" : "cols",
                     e.kind == ExprKind::kOp || e.kind == ExprKind::kReduce ? OpName(e.op) : "",
                     e.input >= 0 ? fmt::format(" in{}", e.input) : "", args, e.depth, e.row_level ? " row" : "");
  }
  for (const auto& o : outputs) s += fmt::format("  out {} = e{} ({})\n", o.tensor.name, o.expr, AccessName(o.tensor.access));
  return s;
}

}  // namespace opfuse::codegen
