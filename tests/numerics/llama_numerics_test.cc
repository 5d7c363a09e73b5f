// A toy Llama built with GraphBuilder, run end to end through RunGraphCpu: embedding, per layer
// RMSNorm, q/k/v projections (GQA), RoPE with real cos/sin tables, causal attention, output
// projection, residual adds, RMSNorm, SwiGLU MLP written as silu + mul, and a final norm + LM head.
// Checks: the CPU reference is fast enough for tests (< 1 s for 2 layers at hidden 64 and 256),
// outputs are finite, non-trivial and deterministic, and executing hand-made fusion groups (each
// silu + mul pair, decision fuse) with fuse_groups agrees with the op-by-op run within bf16 bounds
// while actually changing the result.
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "numerics_harness.h"
#include "runtime/cpu/cpu_executor.h"

namespace opfuse::test {
namespace {

struct ToyConfig {
  int64_t vocab = 97, hidden = 64, heads = 4, kv_heads = 2, inter = 128, layers = 2;
  DType dtype = DType::kBF16;
  int64_t head_dim() const { return hidden / heads; }
};

Graph BuildToyLlama(const ToyConfig& c) {
  GraphBuilder b("toy_llama");
  const Dim T = Dim::Sym("T");
  const int64_t hd = c.head_dim();
  const Attrs tb{{"transpose_b", int64_t{1}}};
  const Attrs eps{{"eps", 1e-5}};
  int ids = b.Input("ids", DType::kI32, {T});
  int cos = b.Input("cos", c.dtype, {T, 1, hd});
  int sin = b.Input("sin", c.dtype, {T, 1, hd});
  int h = b.Embedding({b.Param("embed", c.dtype, {c.vocab, c.hidden}), ids});
  for (int64_t l = 0; l < c.layers; ++l) {
    auto P = [&](const char* name, Shape s) { return b.Param(fmt::format("l{}_{}", l, name), c.dtype, std::move(s)); };
    int xn = b.RmsNorm({h, P("attn_norm", {c.hidden})}, eps);
    int q = b.Matmul({xn, P("wq", {c.hidden, c.hidden})}, tb);
    int k = b.Matmul({xn, P("wk", {c.kv_heads * hd, c.hidden})}, tb);
    int v = b.Matmul({xn, P("wv", {c.kv_heads * hd, c.hidden})}, tb);
    q = b.Rope({b.Reshape({q}, {{"shape", DimList{T, Dim(c.heads), Dim(hd)}}}), cos, sin});
    k = b.Rope({b.Reshape({k}, {{"shape", DimList{T, Dim(c.kv_heads), Dim(hd)}}}), cos, sin});
    v = b.Reshape({v}, {{"shape", DimList{T, Dim(c.kv_heads), Dim(hd)}}});
    int attn = b.Attention({q, k, v}, {{"causal", int64_t{1}}});
    attn = b.Reshape({attn}, {{"shape", DimList{T, Dim(c.hidden)}}});
    h = b.Add({h, b.Matmul({attn, P("wo", {c.hidden, c.hidden})}, tb)});
    int hn = b.RmsNorm({h, P("mlp_norm", {c.hidden})}, eps);
    int gate = b.Matmul({hn, P("w_gate", {c.inter, c.hidden})}, tb);
    int up = b.Matmul({hn, P("w_up", {c.inter, c.hidden})}, tb);
    int act = b.Mul({b.Silu({gate}), up});
    h = b.Add({h, b.Matmul({act, P("w_down", {c.hidden, c.inter})}, tb)});
  }
  int hf = b.RmsNorm({h, b.Param("final_norm", c.dtype, {c.hidden})}, eps);
  b.Output(b.Matmul({hf, b.Param("lm_head", c.dtype, {c.vocab, c.hidden})}, tb), "logits");
  auto g = b.Build();
  if (!g.ok()) throw StatusError(g.status());
  return std::move(g).value();
}

// Random weights scaled like an initialised model (1/sqrt(fan_in)), norms near 1, real RoPE tables.
std::map<std::string, HostTensor> ToyInputs(const Graph& g, const ToyConfig& c, int64_t T, uint64_t seed) {
  auto in = RandomInputs(g, {{"T", T}}, seed);
  for (auto& [name, t] : in) {
    if (name == "cos" || name == "sin" || name == "ids" || name == "embed") continue;
    const bool norm = name.find("norm") != std::string::npos;
    const double scale = norm ? 0.2 : 1.0 / std::sqrt(static_cast<double>(t.shape.back()));
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, norm ? 1.0 + scale * t.get(i) : scale * t.get(i) * std::sqrt(3.0));
  }
  const int64_t hd = c.head_dim();
  for (int64_t p = 0; p < T; ++p)
    for (int64_t i = 0; i < hd; ++i) {
      const double freq = std::pow(10000.0, -2.0 * static_cast<double>(i % (hd / 2)) / static_cast<double>(hd));
      in["cos"].set(p * hd + i, std::cos(p * freq));
      in["sin"].set(p * hd + i, std::sin(p * freq));
    }
  return in;
}

double MillisSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void CheckLogits(const HostTensor& logits, const ToyConfig& c, int64_t T) {
  ASSERT_EQ(logits.shape, (std::vector<int64_t>{T, c.vocab}));
  ASSERT_EQ(logits.dtype, c.dtype);
  double l2 = 0;
  for (int64_t i = 0; i < logits.numel(); ++i) {
    const double v = logits.get(i);
    ASSERT_TRUE(std::isfinite(v)) << "logit " << i << " is " << v;
    l2 += v * v;
  }
  EXPECT_GT(std::sqrt(l2 / logits.numel()), 1e-3) << "logits are (nearly) all zero";
}

TEST(ToyLlama, TwoLayersHidden64RunUnderOneSecond) {
  OPFUSE_SEED_TRACE();
  const ToyConfig c;
  const Graph g = BuildToyLlama(c);
  const int64_t T = 7;
  const auto in = ToyInputs(g, c, T, ProcessSeed());
  const auto t0 = std::chrono::steady_clock::now();
  auto out = RunGraphCpu(g, in);
  const double ms = MillisSince(t0);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_LT(ms, 1000.0) << "2-layer toy Llama took " << ms << " ms on the CPU reference";
  CheckLogits(out->at("logits"), c, T);
  auto again = RunGraphCpu(g, in);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->at("logits").data, out->at("logits").data) << "the CPU reference must be deterministic";
}

TEST(ToyLlama, TwoLayersHidden256RunUnderOneSecond) {
  OPFUSE_SEED_TRACE();
  ToyConfig c;
  c.hidden = 256;
  c.heads = 8;
  c.kv_heads = 4;
  c.inter = 688;
  c.vocab = 1000;
  const Graph g = BuildToyLlama(c);
  const int64_t T = 16;
  const auto in = ToyInputs(g, c, T, ProcessSeed());
  const auto t0 = std::chrono::steady_clock::now();
  auto out = RunGraphCpu(g, in);
  const double ms = MillisSince(t0);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_LT(ms, 1000.0) << "2-layer hidden-256 toy Llama took " << ms << " ms on the CPU reference";
  CheckLogits(out->at("logits"), c, T);
}

TEST(ToyLlama, FusedSwigluGroupsAgreeWithOpByOpWithinBf16Bounds) {
  OPFUSE_SEED_TRACE();
  const ToyConfig c;
  Graph g = BuildToyLlama(c);
  // One group per silu + mul pair, decided "fuse" by hand.
  const auto users = g.Users();
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (g.nodes[n].op != OpKind::kSilu) continue;
    const auto& u = users[g.nodes[n].outputs[0]];
    ASSERT_EQ(u.size(), 1u);
    ASSERT_EQ(g.nodes[u[0]].op, OpKind::kMul);
    FusionGroup grp;
    grp.nodes = {static_cast<int>(n), u[0]};
    grp.kind = "pattern:swiglu";
    grp.decision = FusionDecision::Yes("set by the test");
    g.groups.push_back(grp);
  }
  ASSERT_EQ(g.groups.size(), static_cast<size_t>(c.layers));
  const int64_t T = 7;
  const auto in = ToyInputs(g, c, T, ProcessSeed());
  CpuRunOptions fused_opts;
  fused_opts.fuse_groups = true;
  auto fused = RunGraphCpu(g, in, fused_opts);
  auto unfused = RunGraphCpu(g, in);
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  ASSERT_TRUE(unfused.ok()) << unfused.status().ToString();
  CheckLogits(fused->at("logits"), c, T);
  ExpectClose(fused->at("logits"), {T, c.vocab}, Values(unfused->at("logits")), 2e-2, "fused groups vs op by op");
  EXPECT_NE(fused->at("logits").data, unfused->at("logits").data)
      << "keeping silu in f32 inside the group should change some bf16 logit";
}

}  // namespace
}  // namespace opfuse::test
