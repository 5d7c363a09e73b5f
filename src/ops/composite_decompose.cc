// OpDef::decompose for every composite op: the composite written out in primitives, exactly in
// the form the fusion patterns (src/fusion/pattern_*.cc) match, so decompose -> fuse_patterns
// gives back the same composite op (tests/passes checks that round trip).
//
// Used by the `decompose` pass when a pattern is disabled, and by numerics tests comparing the
// fused reference with the op-by-op result. Attribute meanings (shared with the CPU reference):
//   rms_norm(x, w?) {eps=1e-6}        x * rsqrt(mean(x*x) + eps) [* w]; f16/bf16: the part before
//                                     * w in f32 between cast(x, f32) and a cast back (eager form)
//   add_rms_norm(x, r, w) {eps=1e-6}  s = x + r; (rms_norm(s, w), s)
//   layer_norm(x, w?, b?) {eps=1e-5}  (x - mean(x)) * rsqrt(mean((x - mean)^2) + eps) [* w] [+ b]
//   softmax(x, mask?) {scale=1, causal=0}  softmax over the last axis of x * scale + mask;
//       causal has no primitive form (the op set has no position index): Unimplemented.
//   swiglu(g, u)                       silu(g) * u
//   geglu(g, u) {approximate="none"|"tanh"}  gelu(g) * u, or gelu_tanh(g) * u
//   rope(x, cos, sin)                  x * cos + concat(-x[..., D/2:], x[..., :D/2]) * sin
// New nodes are named after the composite's first output (h_sq, h_inv, ...); types are left for
// VerifyAndInfer. The caller (the decompose pass) moves the composite's output names over.
#include <fmt/format.h>

#include "ops/op_def.h"

namespace opfuse {
namespace {

class Emitter {
 public:
  Emitter(Graph& g, const Node& n) : g_(g), base_(g.values[n.outputs[0]].name) {}
  int Op(OpKind op, std::vector<int> in, Attrs attrs, const char* suffix) {
    int id = g_.AddNode(op, std::move(in), {}, std::move(attrs), {g_.FreshName(base_ + "_" + suffix)});
    return g_.nodes[id].outputs[0];
  }
  int Op(OpKind op, std::vector<int> in, const char* suffix) { return Op(op, std::move(in), {}, suffix); }
  int Const(double v, const char* suffix) {
    return Op(OpKind::kConstant, {}, {{"value", v}, {"dtype", std::string("f32")}}, suffix);
  }
  // x * rsqrt(mean(x*x) + eps) [* w]. In f16/bf16 (dt) the normalisation runs in f32 between two
  // casts, as eager frameworks do it (Hugging Face LlamaRMSNorm: x.to(float32) ... .to(dtype), then
  // weight *): op by op, the half-precision squares and mean would otherwise each round.
  int RmsNorm(int x, int w, double eps, DType dt) {
    const bool up = dt == DType::kBF16 || dt == DType::kF16;
    const int xs = up ? Op(OpKind::kCast, {x}, {{"dtype", std::string("f32")}}, "f32") : x;
    int sq = Op(OpKind::kMul, {xs, xs}, "sq");
    int ms = Op(OpKind::kMean, {sq}, "ms");
    int mse = Op(OpKind::kAdd, {ms, Const(eps, "eps")}, "ms_eps");
    int inv = Op(OpKind::kRsqrt, {mse}, "inv");
    int n = Op(OpKind::kMul, {xs, inv}, "n");
    if (up) n = Op(OpKind::kCast, {n}, {{"dtype", std::string(DTypeName(dt))}}, "n_cast");
    return w < 0 ? n : Op(OpKind::kMul, {n, w}, "w");
  }

 private:
  Graph& g_;
  std::string base_;
};

StatusOr<std::vector<int>> DecomposeComposite(Graph& g, const Node& node_ref) {
  const Node n = node_ref;  // node_ref points into g.nodes, which grows below
  Emitter e(g, n);
  // Defaults agree with the CPU reference (composite_cpu.cc).
  const double eps = AttrFloat(n.attrs, "eps", n.op == OpKind::kLayerNorm ? 1e-5 : 1e-6);
  const DType dt = n.inputs.empty() ? DType::kF32 : g.values[n.inputs[0]].type.dtype;
  switch (n.op) {
    case OpKind::kRmsNorm:
      return std::vector<int>{e.RmsNorm(n.inputs[0], n.inputs.size() > 1 ? n.inputs[1] : -1, eps, dt)};
    case OpKind::kAddRmsNorm: {
      int s = e.Op(OpKind::kAdd, {n.inputs[0], n.inputs[1]}, "sum");  // rounded to dt, as the op's sum output
      return std::vector<int>{e.RmsNorm(s, n.inputs[2], eps, dt), s};
    }
    case OpKind::kLayerNorm: {
      const int x = n.inputs[0];
      int mu = e.Op(OpKind::kMean, {x}, "mean");
      int d = e.Op(OpKind::kSub, {x, mu}, "d");
      int dd = e.Op(OpKind::kMul, {d, d}, "dd");
      int var = e.Op(OpKind::kMean, {dd}, "var");
      int ve = e.Op(OpKind::kAdd, {var, e.Const(eps, "eps")}, "var_eps");
      int inv = e.Op(OpKind::kRsqrt, {ve}, "inv");
      int y = e.Op(OpKind::kMul, {d, inv}, "n");
      if (n.inputs.size() > 1) y = e.Op(OpKind::kMul, {y, n.inputs[1]}, "w");
      if (n.inputs.size() > 2) y = e.Op(OpKind::kAdd, {y, n.inputs[2]}, "b");
      return std::vector<int>{y};
    }
    case OpKind::kSoftmax: {
      if (AttrInt(n.attrs, "causal", 0) != 0)
        return Unimplemented("causal softmax has no primitive form (the op set has no position index)");
      int y = n.inputs[0];
      auto scale = n.attrs.find("scale");
      if (scale != n.attrs.end()) y = e.Op(OpKind::kMul, {y, e.Const(AttrFloat(n.attrs, "scale", 1.0), "scale")}, "scaled");
      if (n.inputs.size() > 1) y = e.Op(OpKind::kAdd, {y, n.inputs[1]}, "masked");
      int m = e.Op(OpKind::kMax, {y}, "max");
      int d = e.Op(OpKind::kSub, {y, m}, "shift");
      int ex = e.Op(OpKind::kExp, {d}, "exp");
      int s = e.Op(OpKind::kSum, {ex}, "sum");
      return std::vector<int>{e.Op(OpKind::kDiv, {ex, s}, "p")};
    }
    case OpKind::kSwiglu:
      return std::vector<int>{e.Op(OpKind::kMul, {e.Op(OpKind::kSilu, {n.inputs[0]}, "act"), n.inputs[1]}, "glu")};
    case OpKind::kGeglu: {
      const std::string approx = AttrString(n.attrs, "approximate", "none");
      if (approx != "none" && approx != "tanh")
        return InvalidArgument(fmt::format("{}: approximate must be \"none\" or \"tanh\", got \"{}\"", NodeLabel(n), approx));
      OpKind act = approx == "tanh" ? OpKind::kGeluTanh : OpKind::kGelu;
      return std::vector<int>{e.Op(OpKind::kMul, {e.Op(act, {n.inputs[0]}, "act"), n.inputs[1]}, "glu")};
    }
    case OpKind::kRope: {
      const int x = n.inputs[0];
      const Shape& s = g.values[x].type.shape;
      if (s.empty() || !s.back().is_static() || s.back().value % 2)
        return Unimplemented(fmt::format("{}: rope needs a static, even last dim to split, got {}", NodeLabel(n), ShapeToString(s)));
      const int64_t d = s.back().value, axis = static_cast<int64_t>(s.size()) - 1;
      int lo = e.Op(OpKind::kSlice, {x}, {{"axis", axis}, {"start", int64_t{0}}, {"end", d / 2}}, "lo");
      int hi = e.Op(OpKind::kSlice, {x}, {{"axis", axis}, {"start", d / 2}, {"end", d}}, "hi");
      int neg = e.Op(OpKind::kNeg, {hi}, "hi_neg");
      int rot = e.Op(OpKind::kConcat, {neg, lo}, {{"axis", axis}}, "rot");
      int xc = e.Op(OpKind::kMul, {x, n.inputs[1]}, "cos");
      int rs = e.Op(OpKind::kMul, {rot, n.inputs[2]}, "sin");
      return std::vector<int>{e.Op(OpKind::kAdd, {xc, rs}, "rope")};
    }
    default:
      return InvalidArgument(fmt::format("{}: not a composite op", NodeLabel(n)));
  }
}

}  // namespace

void RegisterCompositeDecompositions(OpDefTable& t) {
  for (OpKind op : {OpKind::kRmsNorm, OpKind::kAddRmsNorm, OpKind::kLayerNorm, OpKind::kSoftmax, OpKind::kSwiglu,
                    OpKind::kGeglu, OpKind::kRope})
    t[static_cast<int>(op)].decompose = DecomposeComposite;
}

}  // namespace opfuse
