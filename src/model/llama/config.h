// LlamaConfig: the shape and math of a Llama-family model, read from a Hugging Face `config.json`.
//
// Families: llama (Llama 1/2/3.x, TinyLlama), mistral, qwen2 (Q/K/V bias), qwen3 (per-head q/k
// RMSNorm before RoPE). Both generations of keys transformers writes are read: 4.x
// (`rope_theta` + `rope_scaling`, `torch_dtype`) and 5.x (`rope_parameters`, `dtype`).
//
// The parser is exact about what it understands: every top-level key is either read, known not
// to change the math (ignored), or refused. A key that changes the math and is not implemented
// (an unknown rope type, partial rotary, a quantization config, an activation other than silu, a
// key opfuse has never seen) is InvalidArgument naming the key and value — never a silent
// default. Absent keys take the defaults of the family's transformers config class, so a file
// that omits `sliding_window` for Mistral gets 4096 as transformers does. docs/model_format.md
// lists the keys read, ignored and refused.
//
// Sliding windows are kept per layer; the graph builder gives a layer's kv_attention its window
// when the window is shorter than the cache (a longer one changes nothing).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "opfuse/status.h"

namespace opfuse::llama {

enum class ModelFamily { kLlama, kMistral, kQwen2, kQwen3 };
const char* FamilyName(ModelFamily f);  // the model_type string

// transformers' ROPE_INIT_FUNCTIONS types that Llama accepts, minus "longrope" (refused).
// kNone is rope_type "default".
enum class RopeScalingType { kNone, kLinear, kLlama3, kDynamic, kYarn };
const char* RopeTypeName(RopeScalingType t);

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;  // linear, dynamic, llama3, yarn
  // llama3 only:
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3 and yarn (max_position_embeddings when the file omits it):
  int64_t original_max_position_embeddings = 8192;
  // yarn only (attention_factor resolved from factor / mscale / mscale_all_dim at parse time, as
  // transformers' _compute_yarn_parameters does; it multiplies the cos and sin tables):
  double attention_factor = 1.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
};

struct LlamaConfig {
  std::string model_type = "llama";
  ModelFamily family = ModelFamily::kLlama;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // GQA
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2 always; Llama / Qwen3 with attention_bias)
  bool o_proj_bias = false;     // o_proj carries a bias (Llama / Qwen3 with attention_bias)
  bool mlp_bias = false;        // gate/up/down carry a bias (Llama mlp_bias)
  bool qk_norm = false;         // per-head RMSNorm of q and k before RoPE (Qwen3)
  bool tie_word_embeddings = false;
  // As written by HF (`dtype` or `torch_dtype`): float32, float16, bfloat16; "" when the file
  // names none (the checkpoint's tensors decide, as transformers 5's dtype="auto" does).
  std::string torch_dtype;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // HF allows an int or a list
  std::vector<int64_t> pad_token_ids;
  // Sliding-window attention per layer: 0 = full attention, W = a query attends the last W
  // positions (itself included). Empty = every layer full.
  std::vector<int64_t> layer_windows;

  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  // Total parameter count implied by the shapes (embeddings counted once when tied).
  int64_t ParameterCount() const;
};

// Checks the invariants the rest of opfuse relies on; the message names the field.
Status ValidateConfig(const LlamaConfig& c);
// Refuses a context (KV cache positions) the model's math is not defined for here: longer than
// max_position_embeddings (where dynamic rope would rescale).
Status CheckContext(const LlamaConfig& c, int64_t context);
// Parses and validates a config.json document.
StatusOr<LlamaConfig> ParseConfig(const nlohmann::json& j);
StatusOr<LlamaConfig> ParseConfigText(std::string_view text);
StatusOr<LlamaConfig> LoadConfigFile(const std::string& path);
// Serialises to HF config.json form in transformers 4.x keys (ParseConfig(ToJson(c)) == c).
nlohmann::json ConfigToJson(const LlamaConfig& c);

// Built-in configs: "tinyllama-1.1b", "tiny". NotFound lists the known names.
StatusOr<LlamaConfig> BuiltinConfig(std::string_view name);
std::vector<std::string> BuiltinConfigNames();

}  // namespace opfuse::llama
