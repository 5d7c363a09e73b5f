// config.json parsing (model/llama/config.h): real TinyLlama and Llama-3 files, Qwen2 bias, tied
// embeddings, GQA defaults, the built-in configs, the JSON round trip, and each validation error
// (the message must name the field or the problem).
#include <filesystem>
#include <fstream>
#include <sstream>

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
  EXPECT_FALSE(c.o_proj_bias);  // Qwen2Attention: o_proj never has one
  // An explicit attention_bias on a llama config biases q, k, v and o (LlamaAttention).
  LlamaConfig l = MustParse(Minimal({{"attention_bias", true}}));
  EXPECT_TRUE(l.attention_bias);
  EXPECT_TRUE(l.o_proj_bias);
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
  EXPECT_NE(ErrorOf(Minimal({{"rope_scaling", {{"rope_type", "longrope"}, {"factor", 2.0}}}})).find("rope_scaling rope_type 'longrope' is not implemented"),
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
  EXPECT_TRUE(l3.torch_dtype == "bfloat16");
  auto l3b = ParseConfig(ConfigToJson(l3));
  ASSERT_TRUE(l3b.ok());
  EXPECT_EQ(l3b->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_DOUBLE_EQ(l3b->rope_scaling.factor, 32.0);
  EXPECT_TRUE(ParseConfig(ConfigToJson(MustParse(kQwen2)))->attention_bias);
}

// ---- Both generations of keys, written by transformers itself (tools/make_family_fixtures.py) ----

std::string ConfigsDir() { return std::string(OPFUSE_SOURCE_DIR) + "/tests/data/configs"; }

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(LlamaConfig, TransformersFourAndFiveFilesReadTheSame) {
  int pairs = 0;
  for (const auto& e : std::filesystem::directory_iterator(ConfigsDir())) {
    const std::string name = e.path().filename().string();
    if (!name.ends_with(".v5.json")) continue;
    SCOPED_TRACE(name);
    const std::string v5 = ReadFile(e.path().string());
    const std::string v4 = ReadFile(ConfigsDir() + "/" + name.substr(0, name.size() - 8) + ".v4.json");
    ASSERT_NE(v5.find("rope_parameters"), std::string::npos);  // really the 5.x generation
    ASSERT_NE(v4.find("rope_theta"), std::string::npos);
    ASSERT_EQ(v4.find("rope_parameters"), std::string::npos);
    LlamaConfig a = MustParse(v5), b = MustParse(v4);
    EXPECT_EQ(ConfigToJson(a), ConfigToJson(b));
    // And the round trip through our own writer keeps every field.
    EXPECT_EQ(ConfigToJson(MustParse(ConfigToJson(a).dump())), ConfigToJson(a));
    ++pairs;
  }
  EXPECT_GE(pairs, 10);
}

TEST(LlamaConfig, FamilyDefaultsFollowTransformers) {
  // Absent keys take the family's transformers config-class defaults.
  LlamaConfig m = MustParse(Minimal({{"model_type", "mistral"}, {"num_attention_heads", 16}}));
  EXPECT_EQ(m.family, ModelFamily::kMistral);
  EXPECT_EQ(m.num_key_value_heads, 8);              // MistralConfig.num_key_value_heads defaults to 8
  ASSERT_EQ(m.layer_windows.size(), 2u);            // MistralConfig.sliding_window defaults to 4096
  EXPECT_EQ(m.layer_windows[0], 4096);
  EXPECT_EQ(m.max_position_embeddings, 131072);
  {
    nlohmann::json j = nlohmann::json::parse(Minimal({{"model_type", "mistral"}, {"num_key_value_heads", 2}}));
    j["sliding_window"] = nullptr;  // an explicit null: no window
    EXPECT_TRUE(MustParse(j.dump()).layer_windows.empty());
  }
  LlamaConfig q3 = MustParse(Minimal({{"model_type", "qwen3"}}));
  EXPECT_EQ(q3.head_dim, 128);  // Qwen3Config.head_dim defaults to 128, not hidden / heads
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_FALSE(q3.attention_bias);
  EXPECT_FALSE(q3.bos_token_id.has_value());
  EXPECT_EQ(q3.max_position_embeddings, 32768);
  // Qwen2: the window applies only with use_sliding_window, from max_window_layers on.
  EXPECT_TRUE(MustParse(Minimal({{"model_type", "qwen2"}, {"sliding_window", 64}})).layer_windows.empty());
  LlamaConfig q2 = MustParse(Minimal({{"model_type", "qwen2"}, {"use_sliding_window", true}, {"sliding_window", 64},
                                      {"max_window_layers", 1}}));
  EXPECT_EQ(q2.layer_windows, (std::vector<int64_t>{0, 64}));
  LlamaConfig q2t = MustParse(Minimal({{"model_type", "qwen2"}, {"use_sliding_window", true}, {"sliding_window", 64},
                                       {"layer_types", {"sliding_attention", "full_attention"}}}));
  EXPECT_EQ(q2t.layer_windows, (std::vector<int64_t>{64, 0}));
  // No dtype: the checkpoint decides.
  EXPECT_EQ(MustParse(Minimal()).torch_dtype, "");
  EXPECT_EQ(MustParse(Minimal({{"dtype", "bfloat16"}})).torch_dtype, "bfloat16");
  EXPECT_EQ(MustParse(Minimal({{"dtype", "float16"}, {"torch_dtype", "float16"}})).torch_dtype, "float16");
  // Token ids as ints or lists.
  LlamaConfig ids = MustParse(Minimal({{"bos_token_id", {5}}, {"eos_token_id", {2, 7}}, {"pad_token_id", 0}}));
  EXPECT_EQ(ids.bos_token_id, 5);
  EXPECT_EQ(ids.eos_token_ids, (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(ids.pad_token_ids, (std::vector<int64_t>{0}));
  // Keys that do not change the math are ignored.
  EXPECT_TRUE(ParseConfigText(Minimal({{"transformers_version", "4.57.6"}, {"use_cache", true}, {"pretraining_tp", 2},
                                       {"_name_or_path", "x"}, {"temperature", 0.6}, {"attention_dropout", 0.1},
                                       {"initializer_range", 0.02}, {"architectures", {"LlamaForCausalLM"}},
                                       {"max_sequence_length", 2048}}))
                  .ok());
}

TEST(LlamaConfig, RopeGenerations) {
  // rope_parameters (5.x) carries rope_theta inside; rope_scaling (4.x) beside a top-level rope_theta.
  LlamaConfig a = MustParse(Minimal({{"rope_parameters", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 5e5}}}}));
  LlamaConfig b = MustParse(Minimal({{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}, {"rope_theta", 5e5}}));
  EXPECT_EQ(a.rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_DOUBLE_EQ(a.rope_theta, 5e5);
  EXPECT_EQ(ConfigToJson(a), ConfigToJson(b));
  // A 5.x file without rope_theta inside falls back to transformers' default_theta (10000).
  EXPECT_DOUBLE_EQ(MustParse(Minimal({{"rope_parameters", {{"rope_type", "default"}}}})).rope_theta, 10000.0);
  // yarn: attention_factor from factor (0.1 ln s + 1), or mscale / mscale_all_dim, or given.
  LlamaConfig y = MustParse(Minimal({{"rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0},
                                                           {"original_max_position_embeddings", 64}}}}));
  EXPECT_NEAR(y.rope_scaling.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-12);
  // llama3 / yarn without original_max_position_embeddings use max_position_embeddings.
  EXPECT_EQ(MustParse(Minimal({{"rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}}}})).rope_scaling
                .original_max_position_embeddings,
            2048);
  // dynamic is read (exact while the context stays within max_position_embeddings).
  EXPECT_EQ(MustParse(Minimal({{"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}}})).rope_scaling.type,
            RopeScalingType::kDynamic);
}

// Every refusal: InvalidArgument, one line, naming the key and value.
struct Refusal {
  const char* patch;    // JSON object merged into Minimal()
  const char* message;  // a substring of the error
};

class ConfigRefusals : public ::testing::TestWithParam<Refusal> {};

TEST_P(ConfigRefusals, NamesTheKey) {
  const std::string e = ErrorOf(Minimal(nlohmann::json::parse(GetParam().patch)));
  EXPECT_NE(e.find(GetParam().message), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

INSTANTIATE_TEST_SUITE_P(
    Keys, ConfigRefusals,
    ::testing::Values(
        Refusal{R"({"rope_parameters": {"rope_type": "longrope", "short_factor": [1], "long_factor": [1]}})",
                "rope_parameters rope_type 'longrope' is not implemented"},
        Refusal{R"({"rope_scaling": {"type": "su", "factor": 2}})", "rope_scaling rope_type 'su' is not implemented"},
        Refusal{R"({"rope_scaling": {"rope_type": "mrope", "mrope_section": [16, 24, 24]}})", "'mrope' is not implemented"},
        Refusal{R"({"rope_parameters": {"rope_type": "linear", "factor": 2, "finetuned": true}})",
                "rope_parameters key 'finetuned' = true is not understood"},
        Refusal{R"({"partial_rotary_factor": 0.5})", "'partial_rotary_factor' = 0.5 is not implemented"},
        Refusal{R"({"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.25}})",
                "'partial_rotary_factor' = 0.25 is not implemented"},
        Refusal{R"({"rope_parameters": {"full_attention": {"rope_type": "default"}, "sliding_attention": {"rope_type": "default"}}})",
                "per-layer-type rope_parameters"},
        Refusal{R"({"rope_parameters": {"rope_type": "default"}, "rope_scaling": {"rope_type": "linear", "factor": 2}})",
                "both 'rope_parameters' and 'rope_scaling'"},
        Refusal{R"({"hidden_act": "gelu"})", "hidden_act 'gelu' is not implemented"},
        Refusal{R"({"model_type": "gemma"})", "unsupported model_type 'gemma'"},
        Refusal{R"({"quantization_config": {"quant_method": "awq"}})", "'quantization_config'"},
        Refusal{R"({"num_local_experts": 8})", "mixture-of-experts"},
        Refusal{R"({"pruned_heads": {"0": [1]}})", "pruned attention heads"},
        Refusal{R"({"final_logit_softcapping": 30.0})", "soft-capping"},
        Refusal{R"({"some_new_key": 1})", "key 'some_new_key' = 1 is not understood"},
        Refusal{R"({"dtype": "bfloat16", "torch_dtype": "float16"})", "'dtype' 'bfloat16' and 'torch_dtype' 'float16' disagree"},
        Refusal{R"({"dtype": "float8_e4m3fn"})", "unsupported dtype 'float8_e4m3fn'"},
        Refusal{R"({"bos_token_id": [1, 2]})", "'bos_token_id' lists 2 ids"},
        Refusal{R"({"model_type": "mistral", "attention_bias": true})", "'attention_bias' = true is not a mistral field"},
        Refusal{R"({"model_type": "qwen2", "mlp_bias": true})", "'mlp_bias' = true is not a qwen2 field"},
        Refusal{R"({"sliding_window": 128})", "'sliding_window' = 128 is not a llama field"},
        Refusal{R"({"layer_types": ["full_attention", "sliding_attention"]})", "layer_types[1] = \"sliding_attention\" is not implemented for llama"},
        Refusal{R"({"model_type": "qwen3", "layer_types": ["full_attention", "chunked_attention"]})",
                "layer_types[1] = \"chunked_attention\" is not implemented"},
        Refusal{R"({"max_position_embeddings": 4611686018427387904})", "'max_position_embeddings' = 4611686018427387904 is implausibly large"},
        Refusal{R"({"rope_parameters": {"rope_type": "yarn", "factor": 2, "attention_factor": -1}})", "attention_factor"}),
    [](const auto& info) { return "case_" + std::to_string(info.index); });

TEST(LlamaConfig, ContextBeyondMaxPositionEmbeddingsIsRefused) {
  LlamaConfig m = MustParse(Minimal(
      {{"model_type", "mistral"}, {"num_key_value_heads", 2}, {"sliding_window", 64}, {"max_position_embeddings", 256}}));
  EXPECT_TRUE(CheckContext(m, 65).ok());  // a window shorter than the context: windowed attention
  EXPECT_TRUE(CheckContext(m, 256).ok());
  Status s = CheckContext(m, 257);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("context 257 exceeds the model's max_position_embeddings 256"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace opfuse::llama
