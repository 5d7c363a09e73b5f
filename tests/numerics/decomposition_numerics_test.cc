// Each composite op's fused CPU reference vs its decomposition (OpDef::decompose) executed op by op
// through RunGraphCpu, on the same fresh random inputs. The op-by-op path rounds every
// intermediate to the graph dtype, so the bounds are the per-dtype bounds widened for a handful of
// extra roundings (f32 1e-5, bf16 3e-2, f16 6e-3). A decomposition that is missing or reports
// Unimplemented for a case (causal softmax has no primitive form) skips that test with a message.
#include <fmt/format.h>

#include "numerics_harness.h"
#include "ops/op_def.h"
#include "runtime/cpu/cpu_executor.h"

namespace opfuse::test {
namespace {

double DecompBound(DType dt) {
  switch (dt) {
    case DType::kF32: return 1e-5;
    case DType::kBF16: return 3e-2;
    default: return 6e-3;
  }
}

// Replaces every composite node of g by its decomposition (as the decompose pass does).
StatusOr<Graph> Decompose(const Graph& in) {
  Graph g = in;
  const size_t n0 = g.nodes.size();
  for (size_t i = 0; i < n0; ++i) {
    if (g.nodes[i].dead || GetOpInfo(g.nodes[i].op).kind != FusionKind::kComposite) continue;
    const Node n = g.nodes[i];
    const DecomposeFn fn = GetOpDef(n.op).decompose;
    if (!fn) return Unimplemented(fmt::format("OpDef::decompose is not implemented for {}", OpName(n.op)));
    OPFUSE_ASSIGN_OR_RETURN(std::vector<int> outs, fn(g, n));
    if (outs.size() != n.outputs.size()) return Internal("decomposition returned the wrong number of values");
    for (size_t k = 0; k < outs.size(); ++k) g.ReplaceAllUses(n.outputs[k], outs[k]);
    g.nodes[i].dead = true;
  }
  OPFUSE_RETURN_IF_ERROR(g.Compact());
  OPFUSE_RETURN_IF_ERROR(VerifyAndInfer(g));
  return g;
}

struct Input {
  std::string name;
  std::vector<int64_t> shape;
  double lo = -2, hi = 2;
};

// Builds op(inputs) in dtype dt, runs it fused and decomposed, compares every output.
void CheckDecomposition(OpKind op, DType dt, const std::vector<Input>& inputs, const Attrs& attrs) {
  std::string what = fmt::format("{} {}", OpName(op), DTypeName(dt));
  for (const auto& i : inputs) what += " " + i.name + ShapeStr(i.shape);
  for (const auto& [k, v] : attrs) what += fmt::format(" {}={}", k, AttrToString(v));
  SCOPED_TRACE(what);
  GraphBuilder b("composite");
  std::vector<int> ids;
  for (const auto& i : inputs) {
    Shape s;
    for (auto d : i.shape) s.push_back(Dim(d));
    ids.push_back(b.Input(i.name, dt, s));
  }
  for (int o : b.OpN(op, ids, attrs)) b.Output(o);
  auto fused = b.Build();
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  auto decomposed = Decompose(*fused);
  if (!decomposed.ok() && decomposed.status().code() == StatusCode::kUnimplemented)
    GTEST_SKIP() << what << ": no decomposition: " << decomposed.status().message();
  ASSERT_TRUE(decomposed.ok()) << decomposed.status().ToString();
  for (const auto& n : decomposed->nodes)
    EXPECT_NE(GetOpInfo(n.op).kind, FusionKind::kComposite) << "decomposition still contains " << OpName(n.op);

  auto rng = TestRng();
  std::map<std::string, HostTensor> feed;
  for (const auto& i : inputs) feed[i.name] = Rand(dt, i.shape, rng, i.lo, i.hi);
  auto a = RunGraphCpu(*fused, feed);
  auto c = RunGraphCpu(*decomposed, feed);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(fused->outputs.size(), decomposed->outputs.size());
  for (size_t k = 0; k < fused->outputs.size(); ++k) {
    const HostTensor& fo = a->at(fused->values[fused->outputs[k]].name);
    const HostTensor& dout = c->at(decomposed->values[decomposed->outputs[k]].name);
    ASSERT_EQ(dout.dtype, fo.dtype);
    ExpectClose(fo, dout.shape, Values(dout), DecompBound(dt), fmt::format("{} output {}", what, k));
  }
}

NUMERICS_TEST(DecompositionNumerics, RmsNorm, OpKind::kRmsNorm) {
  OPFUSE_SEED_TRACE();
  for (DType dt : FloatDTypes()) {
    CheckDecomposition(OpKind::kRmsNorm, dt, {{"x", {4, 33}}}, {});
    CheckDecomposition(OpKind::kRmsNorm, dt, {{"x", {3, 64}}, {"w", {64}}}, {{"eps", 1e-5}});
  }
}

NUMERICS_TEST(DecompositionNumerics, AddRmsNorm, OpKind::kAddRmsNorm) {
  OPFUSE_SEED_TRACE();
  for (DType dt : FloatDTypes()) CheckDecomposition(OpKind::kAddRmsNorm, dt, {{"x", {5, 130}}, {"r", {5, 130}}, {"w", {130}}}, {});
}

NUMERICS_TEST(DecompositionNumerics, LayerNorm, OpKind::kLayerNorm) {
  OPFUSE_SEED_TRACE();
  for (DType dt : FloatDTypes()) {
    CheckDecomposition(OpKind::kLayerNorm, dt, {{"x", {4, 33}, -1, 3}}, {});
    CheckDecomposition(OpKind::kLayerNorm, dt, {{"x", {2, 3, 64}, -1, 3}, {"w", {64}}, {"b", {64}}}, {{"eps", 1e-3}});
  }
}

NUMERICS_TEST(DecompositionNumerics, Softmax, OpKind::kSoftmax) {
  OPFUSE_SEED_TRACE();
  for (DType dt : FloatDTypes()) {
    CheckDecomposition(OpKind::kSoftmax, dt, {{"x", {4, 33}, -3, 3}}, {});
    CheckDecomposition(OpKind::kSoftmax, dt, {{"x", {2, 5, 7}, -3, 3}, {"mask", {5, 7}, -2, 0}}, {{"scale", 0.125}});
  }
}

NUMERICS_TEST(DecompositionNumerics, SoftmaxCausal, OpKind::kSoftmax) {
  OPFUSE_SEED_TRACE();
  for (DType dt : FloatDTypes()) CheckDecomposition(OpKind::kSoftmax, dt, {{"x", {3, 9}, -3, 3}}, {{"causal", int64_t{1}}});
}

NUMERICS_TEST(DecompositionNumerics, GatedUnits, OpKind::kSwiglu, OpKind::kGeglu) {
  OPFUSE_SEED_TRACE();
  for (DType dt : FloatDTypes()) {
    CheckDecomposition(OpKind::kSwiglu, dt, {{"gate", {4, 33}, -4, 4}, {"up", {4, 33}}}, {});
    CheckDecomposition(OpKind::kGeglu, dt, {{"gate", {2, 65}, -4, 4}, {"up", {2, 65}}}, {});
    CheckDecomposition(OpKind::kGeglu, dt, {{"gate", {2, 65}, -4, 4}, {"up", {2, 65}}}, {{"approximate", std::string("tanh")}});
  }
}

NUMERICS_TEST(DecompositionNumerics, Rope, OpKind::kRope) {
  OPFUSE_SEED_TRACE();
  for (DType dt : FloatDTypes()) {
    CheckDecomposition(OpKind::kRope, dt, {{"x", {5, 2, 8}}, {"cos", {5, 1, 8}, -1, 1}, {"sin", {5, 1, 8}, -1, 1}}, {});
    CheckDecomposition(OpKind::kRope, dt, {{"x", {3, 34}}, {"cos", {3, 34}, -1, 1}, {"sin", {3, 34}, -1, 1}}, {});
  }
}

}  // namespace
}  // namespace opfuse::test
