// Graph builder: the prefill/decode graphs of tiny and TinyLlama-1.1B shapes verify, name their
// params after the HF tensors, take positions as inputs, and the pipeline finds the patterns the
// design promises (RMSNorm, Add+RMSNorm, RoPE, SwiGLU) under fusion and none without it. Variants
// (Qwen2 bias, tied embeddings, GQA) change the graph as they should. RoPE tables are checked
// against hand-computed values, Llama-3 scaling included.
#include <cmath>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "model/llama/engine.h"
#include "model/llama/graph_builder.h"
#include "model/llama/tensor_parallel.h"
#include "model/llama/weights.h"
#include "passes/pipeline.h"

namespace opfuse::llama {
namespace {

LlamaConfig Tiny() { return *BuiltinConfig("tiny"); }

std::map<std::string, int> PatternCounts(const Graph& g) {
  std::map<std::string, int> n;
  for (const auto& grp : g.groups)
    if ((grp.kind.rfind("pattern:", 0) == 0 || grp.kind.rfind("matmul:", 0) == 0 || grp.kind.rfind("collective:", 0) == 0) &&
        grp.decision.fuse)
      n[grp.kind.substr(grp.kind.find(':') + 1)]++;
  return n;
}

int CountOps(const Graph& g, OpKind op) {
  int n = 0;
  for (const auto& node : g.nodes) n += !node.dead && node.op == op;
  return n;
}

Graph Compiled(const Graph& g, Strategy s, const std::set<std::string>& disabled = {}) {
  Graph copy = g;
  PassContext ctx;
  ctx.config = StrategyConfig(s);
  ctx.config.disabled.insert(disabled.begin(), disabled.end());
  Status st = RunPipeline(copy, ctx);
  EXPECT_TRUE(st.ok()) << st.message();
  return copy;
}

TEST(LlamaGraph, PrefillInterfaceAndParams) {
  const LlamaConfig c = Tiny();
  GraphOptions o;
  o.cache_len = 64;
  auto g = BuildPrefillGraph(c, o);
  ASSERT_TRUE(g.ok()) << g.status().message();
  std::set<std::string> params, inputs;
  for (int v : g->inputs)
    (g->values[v].kind == ValueKind::kParam ? params : inputs).insert(g->values[v].name);
  for (const auto& e : ExpectedTensors(c)) EXPECT_TRUE(params.count(e.name)) << e.name;
  EXPECT_TRUE(params.count(kRopeCos) && params.count(kRopeSin));
  EXPECT_EQ(params.size(), ExpectedTensors(c).size() + 2);
  for (const char* n : {"input_ids", "position_ids", "cache_pos", "last_index"}) EXPECT_TRUE(inputs.count(n)) << n;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) EXPECT_TRUE(inputs.count(CacheKeyName(l)) && inputs.count(CacheValueName(l)));
  EXPECT_EQ(g->Symbols(), std::vector<std::string>{"T"});
  // One kv_attention and 7 linear layers per layer, plus the LM head; positions gathered by embedding.
  EXPECT_EQ(CountOps(*g, OpKind::kKvAttention), c.num_hidden_layers);
  EXPECT_EQ(CountOps(*g, OpKind::kMatmul), 7 * c.num_hidden_layers + 1);
  EXPECT_EQ(CountOps(*g, OpKind::kEmbedding), 4);  // tokens, cos, sin, last token
  EXPECT_EQ(CountOps(*g, OpKind::kConstant), 2 * c.num_hidden_layers + 1);  // one eps per norm
  ASSERT_EQ(g->outputs.size(), 1u);
  EXPECT_EQ(g->values[g->outputs[0]].type.ToString(), "f32[1, 256]");
}

TEST(LlamaGraph, DecodeIsBatchedWithArgmax) {
  const LlamaConfig c = Tiny();
  GraphOptions o;
  o.batch = 4;
  o.with_argmax = true;
  auto g = BuildDecodeGraph(c, o);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(g->Symbols().empty());
  EXPECT_FALSE(g->FindValue("position_ids"));  // decode positions are cache_pos
  ASSERT_EQ(g->outputs.size(), 2u);
  EXPECT_EQ(g->values[g->outputs[0]].type.ToString(), "f32[4, 256]");
  EXPECT_EQ(g->values[g->outputs[1]].type.ToString(), "i32[4, 1]");
  EXPECT_EQ(g->values[*g->FindValue(CacheKeyName(1))].type.ToString(), "f32[4, 256, 2, 16]");
}

TEST(LlamaGraph, FusionFindsTheLlamaPatterns) {
  const LlamaConfig c = *BuiltinConfig("tinyllama-1.1b");
  GraphOptions o;
  o.dtype = DType::kBF16;
  o.batch = 1;
  o.with_argmax = true;
  auto g = BuildDecodeGraph(c, o);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const int64_t L = c.num_hidden_layers;
  auto fused = PatternCounts(Compiled(*g, Strategy::kAlwaysFuse));
  // Layer 0's input norm is a plain RMSNorm; every later norm follows a residual add, and so does
  // the final norm. bf16: fuse_matmul takes each swiglu with its gate/up matmuls, q/k/v as
  // siblings, and each group the norm before it as a prologue; the final norm stays (a reshape
  // stands between it and the LM head).
  EXPECT_EQ(fused["rms_norm"], 0);
  EXPECT_EQ(fused["add_rms_norm"], 1) << "the final norm";
  // q and k take their ropes as GEMV epilogues.
  EXPECT_EQ(fused["rope"], 0);
  EXPECT_EQ(fused["norm_swiglu"], L);
  EXPECT_EQ(fused["norm_siblings_rope"], L);
  EXPECT_EQ(fused["swiglu"] + fused["siblings"], 0);
  EXPECT_TRUE(PatternCounts(Compiled(*g, Strategy::kNeverFuse)).empty());
  // The typed plan of each q/k/v group: the norm, three segments, ropes on q and k (with the
  // reshape before each as a view), none on v.
  const Graph cg = Compiled(*g, Strategy::kAlwaysFuse);
  int checked = 0;
  for (const auto& grp : cg.groups) {
    if (grp.kind != "matmul:norm_siblings_rope") continue;
    ASSERT_TRUE(grp.matmul.has_value());
    const MatmulGroupPlan& p = *grp.matmul;
    ASSERT_EQ(p.matmuls.size(), 3u);
    ASSERT_EQ(p.ropes.size(), 3u);
    EXPECT_GE(p.norm, 0);
    EXPECT_GE(p.ropes[0], 0);
    EXPECT_GE(p.ropes[1], 0);
    EXPECT_EQ(p.ropes[2], -1);
    EXPECT_EQ(p.views.size(), 2u);
    for (int i = 0; i < 2; ++i) {  // rope i rotates (a view of) matmul i's output
      const Node& rope = cg.nodes[p.ropes[i]];
      const int view = cg.values[rope.inputs[0]].producer;
      ASSERT_GE(view, 0);
      EXPECT_EQ(cg.nodes[view].op, OpKind::kReshape);
      EXPECT_EQ(cg.nodes[view].inputs[0], cg.nodes[p.matmuls[i]].outputs[0]);
    }
    ++checked;
  }
  EXPECT_EQ(checked, L);
}

TEST(LlamaGraph, BiasTiedAndMha) {
  LlamaConfig c = Tiny();
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  c.num_key_value_heads = c.num_attention_heads;
  GraphOptions o;
  o.cache_len = 32;
  auto g = BuildPrefillGraph(c, o);
  ASSERT_TRUE(g.ok()) << g.status().message();
  int with_bias = 0;
  for (const auto& n : g->nodes) with_bias += n.op == OpKind::kMatmul && n.inputs.size() == 3;
  EXPECT_EQ(with_bias, 3 * c.num_hidden_layers);  // q, k, v
  EXPECT_FALSE(g->FindValue("lm_head.weight"));
  EXPECT_EQ(g->values[*g->FindValue(CacheValueName(0))].type.ToString(), "f32[1, 32, 4, 16]");
}

TEST(LlamaGraph, BadOptions) {
  GraphOptions o;
  o.batch = 0;
  EXPECT_EQ(BuildDecodeGraph(Tiny(), o).status().code(), StatusCode::kInvalidArgument);
  o.batch = 2;  // symbolic T with batch > 1: [B*T] is not one dim
  EXPECT_EQ(BuildPrefillGraph(Tiny(), o).status().code(), StatusCode::kInvalidArgument);
  o.tokens = 5;
  EXPECT_TRUE(BuildPrefillGraph(Tiny(), o).ok());
  o.dtype = DType::kI32;
  EXPECT_EQ(BuildPrefillGraph(Tiny(), o).status().code(), StatusCode::kInvalidArgument);
}

TEST(LlamaRope, TablesByHand) {
  LlamaConfig c = Tiny();  // head_dim 16, theta 1e4
  auto t = ComputeRopeTables(c, 3);
  ASSERT_EQ(t.cos.size(), 3u * 16);
  // Position 0: cos 1, sin 0 everywhere.
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(t.cos[i], 1.0f);
    EXPECT_EQ(t.sin[i], 0.0f);
  }
  // Position 2, frequency index 1: inv_freq = 1e4^(-2/16) = 0.316227766.
  EXPECT_NEAR(t.cos[2 * 16 + 1], std::cos(2 * 0.316227766), 1e-6);
  EXPECT_NEAR(t.sin[2 * 16 + 1 + 8], std::sin(2 * 0.316227766), 1e-6);  // rotate-half: repeated at +D/2
}

TEST(LlamaRope, Llama3Scaling) {
  LlamaConfig c = Tiny();
  c.head_dim = 128;
  c.rope_theta = 500000;
  c.rope_scaling = {RopeScalingType::kLlama3, 8.0, 1.0, 4.0, 8192};
  const auto inv = RopeInvFreq(c);
  ASSERT_EQ(inv.size(), 64u);
  // High frequency (wavelength 2*pi < 8192/4): unchanged.
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  // Low frequency (wavelength > 8192): divided by the factor.
  const double f63 = std::pow(500000.0, -126.0 / 128);
  EXPECT_NEAR(inv[63], f63 / 8, 1e-6 * f63);
  // A medium one is smoothed between the two: find i with 2048 <= wavelength <= 8192.
  int checked = 0;
  for (int i = 0; i < 64; ++i) {
    const double f = std::pow(500000.0, -2.0 * i / 128), wl = 2 * M_PI / f;
    if (wl < 2048 || wl > 8192) continue;
    const double s = (8192 / wl - 1) / (4 - 1);
    EXPECT_NEAR(inv[i], (1 - s) * f / 8 + s * f, 1e-5 * f) << i;
    ++checked;
  }
  EXPECT_GT(checked, 0);
  c.rope_scaling = {RopeScalingType::kLinear, 4.0};
  EXPECT_NEAR(RopeInvFreq(c)[1], std::pow(500000.0, -2.0 / 128) / 4, 1e-7);
}

TEST(LlamaStrategy, Names) {
  for (auto s : {Strategy::kNeverFuse, Strategy::kAlwaysFuse, Strategy::kSmartSchedule}) {
    auto p = ParseStrategy(StrategyName(s));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, s);
  }
  EXPECT_EQ(*ParseStrategy("smart"), Strategy::kSmartSchedule);
  EXPECT_EQ(ParseStrategy("sometimes").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(StrategyConfig(Strategy::kNeverFuse).enable_fusion);
  EXPECT_EQ(StrategyConfig(Strategy::kAlwaysFuse).min_tensor_elements, 0);
}

}  // namespace
}  // namespace opfuse::llama

namespace opfuse::llama {
namespace {

// Tensor parallelism (tensor_parallel.h): one table decides the split; a rank's graph holds its
// shards and heads, all_reduces the two row-parallel outputs of every layer, gathers the logits, and
// still fuses what one rank's graph fuses.
TEST(LlamaTensorParallel, ShardTableAndRankGraph) {
  EXPECT_EQ(ShardKindOf("model.layers.3.self_attn.q_proj.weight"), ShardKind::kRows);
  EXPECT_EQ(ShardKindOf("model.layers.3.self_attn.k_proj.bias"), ShardKind::kKvRows);
  EXPECT_EQ(ShardKindOf("model.layers.3.self_attn.o_proj.weight"), ShardKind::kCols);
  EXPECT_EQ(ShardKindOf("model.layers.3.self_attn.o_proj.bias"), ShardKind::kFirstRank);
  EXPECT_EQ(ShardKindOf("model.layers.0.mlp.down_proj.weight"), ShardKind::kCols);
  EXPECT_EQ(ShardKindOf("model.layers.0.mlp.up_proj.weight"), ShardKind::kRows);
  EXPECT_EQ(ShardKindOf("model.layers.0.self_attn.q_norm.weight"), ShardKind::kReplicated);
  EXPECT_EQ(ShardKindOf("model.embed_tokens.weight"), ShardKind::kReplicated);
  EXPECT_EQ(ShardKindOf("lm_head.weight"), ShardKind::kRows);

  const LlamaConfig c = *BuiltinConfig("tinyllama-1.1b");  // 32 heads, 4 KV heads, 5632, vocab 32000
  GraphOptions o;
  o.dtype = DType::kBF16;
  o.with_argmax = true;
  o.cache_len = 64;
  o.tp = {1, 4};
  auto g = BuildDecodeGraph(c, o);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const int64_t L = c.num_hidden_layers;
  EXPECT_EQ(CountOps(*g, OpKind::kAllReduce), 2 * L);
  EXPECT_EQ(CountOps(*g, OpKind::kAllGather), 1);
  auto type = [&](const std::string& name) { return g->values[*g->FindValue(name)].type.ToString(); };
  EXPECT_EQ(type("model.layers.0.self_attn.q_proj.weight"), "bf16[512, 2048]");
  EXPECT_EQ(type("model.layers.0.self_attn.k_proj.weight"), "bf16[64, 2048]");
  EXPECT_EQ(type("model.layers.0.self_attn.o_proj.weight"), "bf16[2048, 512]");
  EXPECT_EQ(type("model.layers.0.mlp.gate_proj.weight"), "bf16[1408, 2048]");
  EXPECT_EQ(type("model.layers.0.mlp.down_proj.weight"), "bf16[2048, 1408]");
  EXPECT_EQ(type("lm_head.weight"), "bf16[8000, 2048]");
  EXPECT_EQ(type("model.embed_tokens.weight"), "bf16[32000, 2048]");
  EXPECT_EQ(type(CacheKeyName(0)), "bf16[1, 64, 1, 64]");
  EXPECT_EQ(type("logits"), "f32[1, 32000]");
  const auto fused = PatternCounts(Compiled(*g, Strategy::kAlwaysFuse));
  EXPECT_EQ(fused.at("norm_swiglu"), L);
  EXPECT_EQ(fused.at("norm_siblings_rope"), L);
  // The final add_rms_norm follows the last down_proj's all-reduce: one collective group
  // (fuse_collective); the layers' add_rms_norms stay the GEMV groups' prologues.
  EXPECT_EQ(fused.count("add_rms_norm"), 0u);
  EXPECT_EQ(fused.at("all_reduce_add_rms_norm"), 1);
  // Without fuse_matmul every all-reduce feeds a standalone add_rms_norm but layer 0's first (the
  // input norm of layer 0 is a plain rms_norm of the embeddings; 2L all-reduces, 2L add_rms_norms).
  const auto unmatmul = PatternCounts(Compiled(*g, Strategy::kAlwaysFuse, {"fuse_matmul"}));
  EXPECT_EQ(unmatmul.at("all_reduce_add_rms_norm"), 2 * L);
  EXPECT_EQ(unmatmul.count("add_rms_norm"), 0u);
  const auto plain = PatternCounts(Compiled(*g, Strategy::kAlwaysFuse, {"fuse_collective"}));
  EXPECT_EQ(plain.count("all_reduce_add_rms_norm"), 0u);
  EXPECT_EQ(plain.at("add_rms_norm"), 1);

  // 8 ranks over 4 KV heads: each head on two ranks; a rank beyond the group is refused.
  o.tp = {5, 8};
  g = BuildDecodeGraph(c, o);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(type("model.layers.0.self_attn.v_proj.weight"), "bf16[64, 2048]");
  EXPECT_EQ(type("model.layers.0.self_attn.q_proj.weight"), "bf16[256, 2048]");
  o.tp = {8, 8};
  EXPECT_EQ(BuildDecodeGraph(c, o).status().code(), StatusCode::kInvalidArgument);
  o.tp = {0, 3};
  EXPECT_EQ(BuildDecodeGraph(c, o).status().message(), "--tensor-parallel 3: num_attention_heads 32 is not a multiple of 3");
}

// ShardParams against the rule by hand: KV heads replicated at world > Hkv, row-parallel biases on
// rank 0 only, the tied head's vocabulary rows.
TEST(LlamaTensorParallel, ShardParamsByHand) {
  LlamaConfig c = Tiny();  // 4 heads, 2 KV heads of 16, hidden 64, vocab 256
  c.attention_bias = c.o_proj_bias = true;
  c.tie_word_embeddings = true;
  std::map<std::string, HostTensor> full;
  for (const auto& e : ExpectedTensors(c)) {
    HostTensor t(DType::kF32, e.shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, static_cast<double>(i));
    full[e.name] = std::move(t);
  }
  const auto r3 = ShardParams(c, full, {3, 4});
  const HostTensor& k = r3.at("model.layers.0.self_attn.k_proj.weight");
  ASSERT_EQ(k.shape, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(k.get(0), 16.0 * 64);  // rank 3 of 4 holds KV head 3 / (4 / 2) = 1: rows 16..31
  const HostTensor& kb = r3.at("model.layers.0.self_attn.k_proj.bias");
  EXPECT_EQ(kb.get(0), 16.0);
  const HostTensor& o = r3.at("model.layers.0.self_attn.o_proj.weight");
  ASSERT_EQ(o.shape, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(o.get(0), 48.0);      // columns 48..63 of row 0
  EXPECT_EQ(o.get(16), 64 + 48.0);  // row 1
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(r3.at("model.layers.0.self_attn.o_proj.bias").get(i), 0.0);
  EXPECT_EQ(ShardParams(c, full, {0, 4}).at("model.layers.0.self_attn.o_proj.bias").get(5), 5.0);
  const HostTensor& head = r3.at("lm_head.weight");
  ASSERT_EQ(head.shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(head.get(0), 192.0 * 64);  // vocabulary rows 192..255 of the tied embedding
  EXPECT_EQ(r3.at("model.embed_tokens.weight").shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(full.at("model.layers.0.self_attn.k_proj.weight").shape, (std::vector<int64_t>{32, 64}));  // untouched
}

}  // namespace
}  // namespace opfuse::llama
