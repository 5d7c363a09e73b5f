// DecomposeNode (src/passes/decompose_node.h): the scratch graph the CUDA executor runs a composite
// op by op from (a group the scheduler did not fuse, e.g. one under min_tensor_elements). Checked
// here without a GPU: the scratch graph's inputs are the node's distinct inputs in order (the
// executor maps them back by position), its outputs keep the node's names and types, and run
// through the CPU reference it computes what the composite computes.
//
// Regression: the executor used to list every input twice (Graph::AddValue already appends to
// inputs), so its positional map sent x's slot to cos and left sin unmapped — the k-projection rope
// at decode (x [1, T, 4, 64], tables [1, T, 1, 64]) then failed with a wrong slice shape, and a
// composite whose inputs all had one shape would have read the wrong tensors silently.
#include <cmath>

#include "../jit_cases.h"
#include "pass_test_util.h"
#include "passes/decompose_node.h"
#include "runtime/cpu/cpu_executor.h"

namespace opfuse::testing {
namespace {

struct Case {
  const char* name;
  const char* text;
  int distinct_inputs;
};

const Case kCases[] = {
    {"rope_k_decode_T1",
     "graph g\ninput x: f32[1, 1, 4, 64]\ninput c: f32[1, 1, 1, 64]\ninput s: f32[1, 1, 1, 64]\ny = rope(x, c, s)\noutput y\n", 3},
    {"rope_k_decode_T2",
     "graph g\ninput x: f32[1, 2, 4, 64]\ninput c: f32[1, 2, 1, 64]\ninput s: f32[1, 2, 1, 64]\ny = rope(x, c, s)\noutput y\n", 3},
    {"rope_same_shapes",
     "graph g\ninput x: f32[3, 8, 64]\ninput c: f32[3, 8, 64]\ninput s: f32[3, 8, 64]\ny = rope(x, c, s)\noutput y\n", 3},
    {"rms_norm", "graph g\ninput x: f32[5, 96]\nparam w: f32[96]\ny = rms_norm(x, w) {eps=1e-5}\noutput y\n", 2},
    {"add_rms_norm",
     "graph g\ninput x: f32[5, 96]\ninput r: f32[5, 96]\nparam w: f32[96]\ny, h = add_rms_norm(x, r, w)\noutput y, h\n", 3},
    {"swiglu_same_input", "graph g\ninput a: f32[4, 32]\ny = swiglu(a, a)\noutput y\n", 1},
    {"softmax_mask", "graph g\ninput x: f32[4, 16]\ninput m: f32[4, 16]\ny = softmax(x, m) {scale=0.5}\noutput y\n", 2},
};

// DecomposeNode on the graph's first node, its values named and typed as in the graph.
StatusOr<NodeDecomposition> DecomposeFirst(const Graph& g) {
  return DecomposeNode(g.nodes[0], [&](int v) { return std::pair<std::string, TensorType>(g.values[v].name, g.values[v].type); });
}

// The graph (its composite) and the decomposition on the CPU reference with the same random inputs.
void RunBoth(const Graph& g, const NodeDecomposition& d, uint64_t seed, std::map<std::string, HostTensor>* ref,
             std::map<std::string, HostTensor>* out) {
  const Graph& sub = d.graph;
  const auto inputs = RandomInputs(g, {}, seed);
  auto r = RunGraphCpu(g, inputs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::map<std::string, HostTensor> sub_in;
  for (size_t i = 0; i < d.inputs.size(); ++i) sub_in[sub.values[sub.inputs[i]].name] = inputs.at(g.values[d.inputs[i]].name);
  auto o = RunGraphCpu(sub, sub_in);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  *ref = std::move(*r);
  *out = std::move(*o);
}

class DecomposeNodeTest : public ::testing::TestWithParam<Case> {};

TEST_P(DecomposeNodeTest, MatchesTheCompositeOnTheCpu) {
  const Case& c = GetParam();
  auto g = ParseGraph(c.text);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->nodes.size(), 1u);
  const Node& n = g->nodes[0];
  auto d = DecomposeFirst(*g);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const Graph& sub = d->graph;
  // Inputs: the node's distinct inputs, once each, in order, with their names and types.
  ASSERT_EQ(static_cast<int>(d->inputs.size()), c.distinct_inputs);
  ASSERT_EQ(sub.inputs.size(), d->inputs.size());
  for (size_t i = 0; i < d->inputs.size(); ++i) {
    EXPECT_EQ(sub.values[sub.inputs[i]].name, g->values[d->inputs[i]].name) << i;
    EXPECT_TRUE(sub.values[sub.inputs[i]].type == g->values[d->inputs[i]].type) << i;
  }
  // Outputs: the node's, by position, same names and types; produced by primitives.
  ASSERT_EQ(sub.outputs.size(), n.outputs.size());
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    EXPECT_EQ(sub.values[sub.outputs[k]].name, g->values[n.outputs[k]].name);
    EXPECT_TRUE(sub.values[sub.outputs[k]].type == g->values[n.outputs[k]].type);
  }
  for (const Node& sn : sub.nodes) EXPECT_NE(GetOpInfo(sn.op).kind, FusionKind::kComposite) << OpName(sn.op);
  EXPECT_GT(sub.nodes.size(), 1u);

  std::map<std::string, HostTensor> ref, out;
  ASSERT_NO_FATAL_FAILURE(RunBoth(*g, *d, 0x5eed + c.distinct_inputs, &ref, &out));
  for (int o : g->outputs) {
    const std::string& name = g->values[o].name;
    ASSERT_TRUE(out.count(name)) << name;
    EXPECT_LE(testing_cases::RelErr(out.at(name), ref.at(name)), 1e-5) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Composites, DecomposeNodeTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// f16/bf16 norms run op by op as eager frameworks do: the normalisation in f32 (cast up, primitives in
// f32, cast down), the residual sum and the weight multiply in the input dtype.
TEST(DecomposeNode, HalfPrecisionNormsNormaliseInF32) {
  for (const char* text : {"graph g\ninput x: bf16[6, 256]\nparam w: bf16[256]\ny = rms_norm(x, w) {eps=1e-5}\noutput y\n",
                           "graph g\ninput x: f16[6, 256]\ninput r: f16[6, 256]\nparam w: f16[256]\n"
                           "y, h = add_rms_norm(x, r, w)\noutput y, h\n",
                           "graph g\ninput x: bf16[3, 128]\ny = rms_norm(x)\noutput y\n"}) {
    SCOPED_TRACE(text);
    auto g = ParseGraph(text);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    const Node& n = g->nodes[0];
    const DType dt = g->values[n.inputs[0]].type.dtype;
    auto d = DecomposeFirst(*g);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    const Graph& sub = d->graph;
    int casts = 0, f32_mean = 0;
    for (const Node& sn : sub.nodes) {
      EXPECT_NE(GetOpInfo(sn.op).kind, FusionKind::kComposite) << OpName(sn.op);
      casts += sn.op == OpKind::kCast;
      f32_mean += sn.op == OpKind::kMean && sub.values[sn.outputs[0]].type.dtype == DType::kF32;
    }
    EXPECT_EQ(casts, 2);
    EXPECT_EQ(f32_mean, 1);
    ASSERT_EQ(sub.outputs.size(), n.outputs.size());
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      EXPECT_EQ(sub.values[sub.outputs[k]].name, g->values[n.outputs[k]].name);
      EXPECT_EQ(sub.values[sub.outputs[k]].type.dtype, dt);
    }
    std::map<std::string, HostTensor> ref, out;
    ASSERT_NO_FATAL_FAILURE(RunBoth(*g, *d, 0x5eed, &ref, &out));
    // One extra rounding (the normalised value before the weight) beside the composite's single one.
    EXPECT_LE(testing_cases::RelErr(out.at("y"), ref.at("y")), dt == DType::kBF16 ? 8e-3 : 1e-3);
    if (ref.count("h")) EXPECT_EQ(testing_cases::RelErr(out.at("h"), ref.at("h")), 0.0) << "the sum is one rounding in both";
  }
}

TEST(DecomposeNode, CausalSoftmaxHasNoPrimitiveForm) {
  auto g = ParseGraph("graph g\ninput x: f32[4, 4]\ny = softmax(x) {causal=1}\noutput y\n");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto d = DecomposeFirst(*g);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(d.status().message().find("causal"), std::string::npos) << d.status().message();
}

TEST(DecomposeNode, PrimitiveOpIsUnimplemented) {
  auto g = ParseGraph("graph g\ninput x: f32[4]\ny = exp(x)\noutput y\n");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto d = DecomposeFirst(*g);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(d.status().message().find("no decomposition"), std::string::npos) << d.status().message();
}

}  // namespace
}  // namespace opfuse::testing
