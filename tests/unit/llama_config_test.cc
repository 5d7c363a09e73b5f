// config.json parsing (model/llama/config.h): real TinyLlama and Llama-3 files, Qwen2 bias, tied
// embeddings, GQA defaults, the built-in configs, the JSON round trip, and each validation error
// (the message must name the field or the problem).
#include <gtest/gtest.h>

#include "model/llama/config.h"

namespace opfuse::llama {
namespace {

// TinyLlama/TinyLlama-1.1B-Chat-v1.0 config.json, verbatim.
constexpr const char* kTinyLlama = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5632,
  "max_position_embeddings": 2048, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 22,
  "num_key_value_heads": 4, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.35.0", "use_cache": true,
  "vocab_size": 32000})";

// meta-llama/Llama-3.2-1B config.json (abridged to the fields that matter, values verbatim).
constexpr const char* kLlama32 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000, "eos_token_id": 128001,
  "head_dim": 64, "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 131072,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
  "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "rope_theta": 500000.0,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 128256})";

// Qwen/Qwen2-0.5B config.json (abridged): no attention_bias field, the bias is implied.
constexpr const char* kQwen2 = R"({
  "architectures": ["Qwen2ForCausalLM"], "bos_token_id": 151643, "eos_token_id": 151643, "hidden_size": 896,
  "intermediate_size": 4864, "max_position_embeddings": 131072, "model_type": "qwen2", "num_attention_heads": 14,
  "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 151936})";

LlamaConfig MustParse(const std::string& text) {
  auto c = ParseConfigText(text);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : LlamaConfig{};
}

std::string ErrorOf(const std::string& text) {
  auto c = ParseConfigText(text);
  EXPECT_FALSE(c.ok()) << "parsed: " << text;
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  return c.ok() ? "" : c.status().message();
}

// A minimal valid config with `patch` applied: a key set to null is removed (rope_* keys are kept as
// null, which is a valid value for them).
std::string Minimal(const nlohmann::json& patch = nlohmann::json::object()) {
  nlohmann::json j = {{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
                      {"num_attention_heads", 4}, {"vocab_size", 256}};
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    if (it.value().is_null() && it.key().rfind("rope", 0) != 0) j.erase(it.key());
    else j[it.key()] = it.value();
  }
  return j.dump();
}

TEST(LlamaConfig, TinyLlama) {
  LlamaConfig c = MustParse(kTinyLlama);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 5632);
  EXPECT_EQ(c.num_hidden_layers, 22);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.kv_dim(), 256);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  // TinyLlama-1.1B: 1,100,048,384 parameters.
  EXPECT_EQ(c.ParameterCount(), 1100048384);
}

TEST(LlamaConfig, Llama3RopeScalingAndTied) {
  LlamaConfig c = MustParse(kLlama32);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.max_position_embeddings, 131072);
}

TEST(LlamaConfig, LinearRopeScalingAndLegacyTypeKey) {
  LlamaConfig c = MustParse(Minimal({{"rope_scaling", {{"type", "linear"}, {"factor", 4.0}}}}));
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
}

TEST(LlamaConfig, Qwen2ImpliesQkvBias) {
  LlamaConfig c = MustParse(kQwen2);
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.num_key_value_heads, 2);
  // An explicit attention_bias on a llama config works too.
  EXPECT_TRUE(MustParse(Minimal({{"attention_bias", true}})).attention_bias);
}

TEST(LlamaConfig, GqaDefaults) {
  LlamaConfig c = MustParse(Minimal());
  EXPECT_EQ(c.num_key_value_heads, 4);  // = heads when absent
  EXPECT_EQ(c.head_dim, 16);            // = hidden / heads when absent
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(MustParse(Minimal({{"num_key_value_heads", 1}})).kv_dim(), 16);
  EXPECT_EQ(MustParse(Minimal({{"eos_token_id", {2, 3}}})).eos_token_ids, (std::vector<int64_t>{2, 3}));
}

TEST(LlamaConfig, Errors) {
  EXPECT_NE(ErrorOf(Minimal({{"hidden_size", nullptr}})).find("missing required field 'hidden_size'"), std::string::npos);
  EXPECT_NE(ErrorOf(Minimal({{"vocab_size", nullptr}})).find("'vocab_size'"), std::string::npos);
  EXPECT_NE(ErrorOf(Minimal({{"num_attention_heads", 5}})).find("num_attention_heads (5) does not divide hidden_size (64)"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Minimal({{"num_key_value_heads", 3}})).find("num_key_value_heads (3) does not divide num_attention_heads (4)"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Minimal({{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 2.0}}}})).find("unsupported rope_scaling rope_type 'yarn'"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Minimal({{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}})).find("low_freq_factor"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Minimal({{"hidden_size", "64"}})).find("'hidden_size' must be an integer"), std::string::npos);
  EXPECT_NE(ErrorOf(Minimal({{"num_hidden_layers", 0}})).find("'num_hidden_layers' must be positive"), std::string::npos);
  EXPECT_NE(ErrorOf(Minimal({{"torch_dtype", "int8"}})).find("unsupported torch_dtype 'int8'"), std::string::npos);
  EXPECT_NE(ErrorOf(Minimal({{"model_type", "gpt2"}})).find("unsupported model_type 'gpt2'"), std::string::npos);
  EXPECT_NE(ErrorOf(Minimal({{"eos_token_id", 999}})).find("eos_token_id 999 is outside the vocabulary"), std::string::npos);
  EXPECT_NE(ErrorOf(Minimal({{"tie_word_embeddings", 1}})).find("'tie_word_embeddings' must be true or false"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"hidden_size\": 64,").find("not valid JSON"), std::string::npos);
  EXPECT_NE(ErrorOf("[1, 2]").find("top level must be a JSON object"), std::string::npos);
}

TEST(LlamaConfig, LoadFileErrors) {
  auto c = LoadConfigFile("/nonexistent/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
}

TEST(LlamaConfig, BuiltinsAndRoundTrip) {
  for (const auto& name : BuiltinConfigNames()) {
    SCOPED_TRACE(name);
    auto c = BuiltinConfig(name);
    ASSERT_TRUE(c.ok()) << c.status().message();
    auto back = ParseConfig(ConfigToJson(*c));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(ConfigToJson(*back), ConfigToJson(*c));
  }
  auto tiny = *BuiltinConfig("tiny");
  EXPECT_EQ(tiny.num_key_value_heads * 2, tiny.num_attention_heads);  // GQA
  EXPECT_LT(tiny.ParameterCount() * 4, 1 << 20);                       // under 1 MB in f32
  EXPECT_EQ(BuiltinConfig("tinyllama-1.1b")->ParameterCount(), MustParse(kTinyLlama).ParameterCount());
  auto unknown = BuiltinConfig("gpt-5");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("tinyllama-1.1b, tiny"), std::string::npos);
  // Llama-3 rope scaling and bias survive the round trip.
  LlamaConfig l3 = MustParse(kLlama32);
  auto l3b = ParseConfig(ConfigToJson(l3));
  ASSERT_TRUE(l3b.ok());
  EXPECT_EQ(l3b->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_DOUBLE_EQ(l3b->rope_scaling.factor, 32.0);
  EXPECT_TRUE(ParseConfig(ConfigToJson(MustParse(kQwen2)))->attention_bias);
}

}  // namespace
}  // namespace opfuse::llama
