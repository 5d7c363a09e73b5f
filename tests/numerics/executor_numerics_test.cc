// The CPU executor (RunGraphCpu, RandomInputs) on small graphs: symbolic shapes bound from inputs,
// op-by-op rounding to the graph dtype, nodes stored out of topological order, graph outputs that
// are inputs, explicit bindings, the fuse_groups semantics (a fused group's internal values stay
// f32, measurably closer to the exact result), and RandomInputs' ranges and determinism.
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "numerics_harness.h"
#include "runtime/cpu/cpu_executor.h"

namespace opfuse::test {
namespace {

constexpr const char* kSwiglu = R"(graph swiglu
input gate: bf16[T, 33]
input up: bf16[T, 33]
g = silu(gate)
out = mul(g, up)
output out
)";

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

TEST(CpuExecutor, BindsSymbolsAndRoundsEachOpToTheGraphDtype) {
  OPFUSE_SEED_TRACE();
  auto g = ParseGraph(kSwiglu);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto rng = TestRng();
  for (int64_t T : {1, 5, 17}) {
    std::map<std::string, HostTensor> in{{"gate", Rand(DType::kBF16, {T, 33}, rng, -4, 4)},
                                         {"up", Rand(DType::kBF16, {T, 33}, rng)}};
    auto out = RunGraphCpu(*g, in);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_EQ(out->size(), 1u);
    const HostTensor& y = out->at("out");
    EXPECT_EQ(y.dtype, DType::kBF16);
    std::vector<double> ref;
    for (int64_t i = 0; i < T * 33; ++i)
      ref.push_back(RoundTo(DType::kBF16, Silu(in["gate"].get(i))) * in["up"].get(i));
    ExpectClose(y, {T, 33}, ref, fmt::format("swiglu graph T={}", T));
  }
}

TEST(CpuExecutor, RunsNodesStoredOutOfTopologicalOrder) {
  OPFUSE_SEED_TRACE();
  auto g = ParseGraph(kSwiglu);
  ASSERT_TRUE(g.ok());
  // Swap the two nodes in storage: mul now comes first, its input produced by the later node.
  std::swap(g->nodes[0], g->nodes[1]);
  for (size_t n = 0; n < g->nodes.size(); ++n)
    for (int v : g->nodes[n].outputs) g->values[v].producer = static_cast<int>(n);
  auto rng = TestRng();
  std::map<std::string, HostTensor> in{{"gate", Rand(DType::kBF16, {3, 33}, rng, -4, 4)},
                                       {"up", Rand(DType::kBF16, {3, 33}, rng)}};
  auto out = RunGraphCpu(*g, in);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> ref;
  for (int64_t i = 0; i < 3 * 33; ++i) ref.push_back(RoundTo(DType::kBF16, Silu(in["gate"].get(i))) * in["up"].get(i));
  ExpectClose(out->at("out"), {3, 33}, ref, "swapped nodes");
}

TEST(CpuExecutor, InputsAsOutputsAndExplicitBindings) {
  OPFUSE_SEED_TRACE();
  auto g = ParseGraph(R"(graph passthrough
input x: f32[T, 4]
y = add(x, x)
z = mul(y, x)
output x, z
)");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto rng = TestRng();
  std::map<std::string, HostTensor> in{{"x", Rand(DType::kF32, {3, 4}, rng)}};
  CpuRunOptions opts;
  opts.bindings["T"] = 3;
  auto out = RunGraphCpu(*g, in, opts);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectExact(out->at("x"), {3, 4}, Values(in["x"]), "input passed through");
  std::vector<double> ref;
  for (double v : Values(in["x"])) ref.push_back(2 * v * v);
  ExpectClose(out->at("z"), {3, 4}, ref, "z");
}

// fuse_groups: inside a fused group the silu result is not rounded to bf16, so the output is
// closer to the exact silu(g) * u than the op-by-op result, and differs from it.
TEST(CpuExecutor, FuseGroupsKeepsGroupInternalValuesInF32) {
  OPFUSE_SEED_TRACE();
  auto g = ParseGraph(kSwiglu);
  ASSERT_TRUE(g.ok());
  FusionGroup grp;
  grp.nodes = {0, 1};
  grp.kind = "pattern:swiglu";
  grp.decision = FusionDecision::Yes("test");
  g->groups.push_back(grp);
  auto rng = TestRng();
  std::map<std::string, HostTensor> in{{"gate", Rand(DType::kBF16, {64, 33}, rng, -4, 4)},
                                       {"up", Rand(DType::kBF16, {64, 33}, rng)}};
  CpuRunOptions fused_opts;
  fused_opts.fuse_groups = true;
  auto fused = RunGraphCpu(*g, in, fused_opts);
  auto unfused = RunGraphCpu(*g, in);
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  ASSERT_TRUE(unfused.ok()) << unfused.status().ToString();
  const HostTensor &f = fused->at("out"), &u = unfused->at("out");
  EXPECT_EQ(f.dtype, DType::kBF16) << "a group's output keeps the graph dtype";
  std::vector<double> exact;
  for (int64_t i = 0; i < f.numel(); ++i) exact.push_back(Silu(in["gate"].get(i)) * in["up"].get(i));
  const double ef = RelError(f, exact), eu = RelError(u, exact);
  EXPECT_LT(ef, eu) << "fused error " << ef << " should be below op-by-op error " << eu;
  EXPECT_NE(f.data, u.data) << "fuse_groups had no effect";
  ExpectClose(f, {64, 33}, Values(u), 2e-2, "fused vs op-by-op");
  // A group whose decision is "no" runs op by op.
  g->groups[0].decision = FusionDecision::No("test");
  auto declined = RunGraphCpu(*g, in, fused_opts);
  ASSERT_TRUE(declined.ok());
  EXPECT_EQ(declined->at("out").data, u.data);
}

TEST(CpuExecutor, RandomInputsRangesAndDeterminism) {
  auto g = ParseGraph(R"(graph emb
input ids: i32[T]
input other: i64[T]
param table: bf16[37, 8]
param w: f32[8]
e = embedding(table, ids)
y = mul(e, e)
output y, other
)");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const auto a = RandomInputs(*g, {{"T", 500}}, 7), b = RandomInputs(*g, {{"T", 500}}, 7), c = RandomInputs(*g, {{"T", 500}}, 8);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a.at("ids").shape, (std::vector<int64_t>{500}));
  std::set<int64_t> seen;
  for (int64_t i = 0; i < 500; ++i) {
    const int64_t id = a.at("ids").get_int(i);
    EXPECT_TRUE(id >= 0 && id < 37) << "id " << id << " outside the table";
    seen.insert(id);
    const int64_t o = a.at("other").get_int(i);
    EXPECT_TRUE(o >= 0 && o < 16) << o;
  }
  EXPECT_GT(seen.size(), 30u) << "ids should cover most of the table";
  EXPECT_TRUE(seen.count(36)) << "the last row should be reachable";
  double mn = 1e9, mx = -1e9;
  for (int64_t i = 0; i < a.at("table").numel(); ++i) {
    mn = std::min(mn, a.at("table").get(i));
    mx = std::max(mx, a.at("table").get(i));
  }
  EXPECT_GE(mn, -1.0);
  EXPECT_LE(mx, 1.0);
  EXPECT_LT(mn, -0.5) << "floats should be signed";
  EXPECT_GT(mx, 0.5);
  for (const auto& [name, t] : a) EXPECT_EQ(t.data, b.at(name).data) << name << " differs for the same seed";
  EXPECT_NE(a.at("table").data, c.at("table").data) << "a different seed should give different values";
  auto out = RunGraphCpu(*g, a);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
}

}  // namespace
}  // namespace opfuse::test
