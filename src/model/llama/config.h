// LlamaConfig: the shape of a Llama-family model, read from a Hugging Face `config.json`.
//
// Covers Llama / TinyLlama, Llama-3 `rope_scaling` (rope_type "llama3" and "linear"), Qwen2-style
// QKV bias (`attention_bias`, or model_type "qwen2" where it is implied), GQA
// (num_key_value_heads) and tied embeddings. Parsing never trusts the file: every required field
// is checked for presence and type, and the result is validated (heads divide hidden, kv heads
// divide heads, ...) so later code (weights check, graph builder) can rely on it. Two built-in
// configs exist for runs without a model directory: "tinyllama-1.1b" and "tiny" (a few hundred KB).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "opfuse/status.h"

namespace opfuse::llama {

enum class RopeScalingType { kNone, kLinear, kLlama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  // llama3 only:
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct LlamaConfig {
  std::string model_type = "llama";
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // GQA; equals num_attention_heads when the file omits it
  int64_t head_dim = 0;             // hidden_size / num_attention_heads when the file omits it
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)
  bool tie_word_embeddings = false;
  std::string torch_dtype = "float32";  // as written by HF: float32, float16, bfloat16
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // HF allows an int or a list

  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  // Total parameter count implied by the shapes (embeddings counted once when tied).
  int64_t ParameterCount() const;
};

// Checks the invariants the rest of opfuse relies on; the message names the field.
Status ValidateConfig(const LlamaConfig& c);
// Parses and validates a config.json document.
StatusOr<LlamaConfig> ParseConfig(const nlohmann::json& j);
StatusOr<LlamaConfig> ParseConfigText(std::string_view text);
StatusOr<LlamaConfig> LoadConfigFile(const std::string& path);
// Serialises to HF config.json form (ParseConfig(ToJson(c)) == c).
nlohmann::json ConfigToJson(const LlamaConfig& c);

// Built-in configs: "tinyllama-1.1b", "tiny". NotFound lists the known names.
StatusOr<LlamaConfig> BuiltinConfig(std::string_view name);
std::vector<std::string> BuiltinConfigNames();

}  // namespace opfuse::llama
