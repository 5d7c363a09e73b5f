// model/llama/memory.h: the engine's memory estimate and its refusal, the default context cap.
#include "model/llama/memory.h"

#include <cmath>

#include <gtest/gtest.h>

namespace opfuse::llama {
namespace {

LlamaConfig Tiny() {
  LlamaConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 176;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 1000;
  c.max_position_embeddings = 131072;
  return c;
}

TEST(MemoryEstimate, KvCacheAndWeightsByHand) {
  const LlamaConfig c = Tiny();
  const MemoryEstimate e = EstimateMemory(c, DType::kBF16, 3, 100);
  // KV cache: 2 (k, v) x 2 layers x 3 sequences x 100 positions x 32 (2 kv heads x 16) x 2 bytes.
  EXPECT_DOUBLE_EQ(e.kv_cache, 2.0 * 2 * 3 * 100 * 32 * 2);
  // Weights: at least the parameter count in bf16, and biases add at most a little.
  EXPECT_GE(e.weights, 2.0 * static_cast<double>(c.ParameterCount()));
  EXPECT_LE(e.weights, 2.0 * static_cast<double>(c.ParameterCount()) * 1.05);
  EXPECT_GT(e.activations, 0);
  EXPECT_DOUBLE_EQ(e.total(), e.weights + e.kv_cache + e.rope + e.activations);
  // Twice the context: twice the KV cache.
  EXPECT_DOUBLE_EQ(EstimateMemory(c, DType::kBF16, 3, 200).kv_cache, 2 * e.kv_cache);
  // f32 doubles the weights.
  EXPECT_DOUBLE_EQ(EstimateMemory(c, DType::kF32, 3, 100).weights, 2 * e.weights);
}

TEST(MemoryEstimate, NoOverflowAtTheLimits) {
  LlamaConfig c = Tiny();
  c.hidden_size = c.intermediate_size = c.vocab_size = int64_t{1} << 24;
  c.num_hidden_layers = int64_t{1} << 24;
  const MemoryEstimate e = EstimateMemory(c, DType::kF32, 1 << 12, int64_t{1} << 24);
  EXPECT_TRUE(std::isfinite(e.total()));
  EXPECT_GT(e.total(), 1e20);
  Status s = CheckFits(e, e.total(), 80.0 * (1 << 30), "the GPU", int64_t{1} << 24, 1 << 12);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST(MemoryEstimate, RefusalNamesTheEstimateAndTheKnobs) {
  const MemoryEstimate e = EstimateMemory(Tiny(), DType::kF32, 64, 131072);
  const double gib = 1024.0 * 1024 * 1024;
  Status s = CheckFits(e, e.total(), 1 * gib, "the host", 131072, 64);
  ASSERT_FALSE(s.ok());
  const std::string m = s.message();
  EXPECT_EQ(m.find('\n'), std::string::npos);
  EXPECT_NE(m.find("not enough memory"), std::string::npos) << m;
  EXPECT_NE(m.find("the host"), std::string::npos) << m;
  EXPECT_NE(m.find("KV cache"), std::string::npos) << m;
  EXPECT_NE(m.find("context 131072 x batch 64"), std::string::npos) << m;
  EXPECT_NE(m.find("--max-context"), std::string::npos) << m;
  EXPECT_NE(m.find("--batch"), std::string::npos) << m;
  // Enough memory, or unknown (0): no refusal.
  EXPECT_TRUE(CheckFits(e, e.total(), 1e6 * gib, "the host", 131072, 64).ok());
  EXPECT_TRUE(CheckFits(e, e.total(), 0, "the host", 131072, 64).ok());
}

TEST(MemoryEstimate, DefaultContextIsCapped) {
  LlamaConfig c = Tiny();
  EXPECT_EQ(ContextFor(c, 0), kDefaultContextCap);
  EXPECT_EQ(ContextFor(c, 100), 100);
  EXPECT_EQ(ContextFor(c, 131072), 131072);  // asked for: given (CheckContext bounds it by the model)
  c.max_position_embeddings = 2048;
  EXPECT_EQ(ContextFor(c, 0), 2048);
}

TEST(MemoryEstimate, HostAvailableIsPlausible) {
  const double b = HostAvailableBytes();
  EXPECT_GE(b, 0);
  if (b > 0) EXPECT_GT(b, 1 << 20);  // a machine running the tests has more than 1 MiB free
}

}  // namespace
}  // namespace opfuse::llama
