// Parsing and validation of Hugging Face Llama-family config.json files, and the built-in configs.
// Every field is read through a typed getter that names the field on failure, so a malformed file
// gives one clear line ("config.json: 'hidden_size' must be a positive integer, got \"abc\"").
#include "model/llama/config.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "util/quote.h"

namespace opfuse::llama {
namespace {

using json = nlohmann::json;

StatusOr<int64_t> GetInt(const json& j, const char* key, std::optional<int64_t> dflt, const char* where = "config.json") {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (dflt) return *dflt;
    return InvalidArgument(fmt::format("{}: missing required field '{}'", where, key));
  }
  if (!it->is_number_integer() && !(it->is_number_float() && it->get<double>() == static_cast<double>(static_cast<int64_t>(it->get<double>()))))
    return InvalidArgument(fmt::format("{}: '{}' must be an integer, got {}", where, key, it->dump()));
  return it->is_number_integer() ? it->get<int64_t>() : static_cast<int64_t>(it->get<double>());
}

StatusOr<double> GetNum(const json& j, const char* key, std::optional<double> dflt, const char* where = "config.json") {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (dflt) return *dflt;
    return InvalidArgument(fmt::format("{}: missing required field '{}'", where, key));
  }
  if (!it->is_number()) return InvalidArgument(fmt::format("{}: '{}' must be a number, got {}", where, key, it->dump()));
  return it->get<double>();
}

StatusOr<bool> GetBool(const json& j, const char* key, bool dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) return InvalidArgument(fmt::format("config.json: '{}' must be true or false, got {}", key, it->dump()));
  return it->get<bool>();
}

StatusOr<RopeScaling> ParseRopeScaling(const json& j) {
  RopeScaling r;
  if (j.is_null()) return r;
  if (!j.is_object()) return InvalidArgument(fmt::format("config.json: 'rope_scaling' must be an object or null, got {}", j.dump()));
  std::string type;
  // HF wrote "type" before transformers 4.43 and "rope_type" since.
  for (const char* k : {"rope_type", "type"}) {
    auto it = j.find(k);
    if (it != j.end() && !it->is_null()) {
      if (!it->is_string()) return InvalidArgument(fmt::format("config.json: 'rope_scaling.{}' must be a string", k));
      type = it->get<std::string>();
      break;
    }
  }
  const char* where = "config.json rope_scaling";
  if (type.empty()) return InvalidArgument("config.json: 'rope_scaling' has no 'rope_type'");
  if (type == "default") return r;
  if (type == "linear") {
    r.type = RopeScalingType::kLinear;
    OPFUSE_ASSIGN_OR_RETURN(r.factor, GetNum(j, "factor", std::nullopt, where));
  } else if (type == "llama3") {
    r.type = RopeScalingType::kLlama3;
    OPFUSE_ASSIGN_OR_RETURN(r.factor, GetNum(j, "factor", std::nullopt, where));
    OPFUSE_ASSIGN_OR_RETURN(r.low_freq_factor, GetNum(j, "low_freq_factor", std::nullopt, where));
    OPFUSE_ASSIGN_OR_RETURN(r.high_freq_factor, GetNum(j, "high_freq_factor", std::nullopt, where));
    OPFUSE_ASSIGN_OR_RETURN(r.original_max_position_embeddings,
                            GetInt(j, "original_max_position_embeddings", std::nullopt, where));
  } else {
    return InvalidArgument(fmt::format(
        "config.json: unsupported rope_scaling rope_type {} (supported: default, linear, llama3)", Quote(type)));
  }
  return r;
}

const char* RopeTypeName(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::kNone: return "default";
    case RopeScalingType::kLinear: return "linear";
    case RopeScalingType::kLlama3: return "llama3";
  }
  return "default";
}

}  // namespace

int64_t LlamaConfig::ParameterCount() const {
  const int64_t h = hidden_size;
  int64_t per_layer = h * q_dim() + 2 * h * kv_dim() + q_dim() * h  // q, k, v, o
                      + 3 * h * intermediate_size                    // gate, up, down
                      + 2 * h;                                       // two norms
  if (attention_bias) per_layer += q_dim() + 2 * kv_dim();
  int64_t n = num_hidden_layers * per_layer + vocab_size * h + h;
  if (!tie_word_embeddings) n += vocab_size * h;
  return n;
}

Status ValidateConfig(const LlamaConfig& c) {
  auto positive = [](const char* name, int64_t v) -> Status {
    if (v <= 0) return InvalidArgument(fmt::format("config.json: '{}' must be positive, got {}", name, v));
    return Status::Ok();
  };
  OPFUSE_RETURN_IF_ERROR(positive("hidden_size", c.hidden_size));
  OPFUSE_RETURN_IF_ERROR(positive("intermediate_size", c.intermediate_size));
  OPFUSE_RETURN_IF_ERROR(positive("num_hidden_layers", c.num_hidden_layers));
  OPFUSE_RETURN_IF_ERROR(positive("num_attention_heads", c.num_attention_heads));
  OPFUSE_RETURN_IF_ERROR(positive("num_key_value_heads", c.num_key_value_heads));
  OPFUSE_RETURN_IF_ERROR(positive("head_dim", c.head_dim));
  OPFUSE_RETURN_IF_ERROR(positive("vocab_size", c.vocab_size));
  OPFUSE_RETURN_IF_ERROR(positive("max_position_embeddings", c.max_position_embeddings));
  // Sizes beyond this would overflow the byte counts of a tensor; no real model is near it.
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  for (auto [name, v] : {std::pair{"hidden_size", c.hidden_size}, {"intermediate_size", c.intermediate_size},
                         {"num_hidden_layers", c.num_hidden_layers}, {"vocab_size", c.vocab_size},
                         {"num_attention_heads", c.num_attention_heads}, {"head_dim", c.head_dim}})
    if (v > kMaxDim) return InvalidArgument(fmt::format("config.json: '{}' = {} is implausibly large (limit {})", name, v, kMaxDim));
  if (c.hidden_size % c.num_attention_heads != 0)
    return InvalidArgument(fmt::format("config.json: num_attention_heads ({}) does not divide hidden_size ({})",
                                       c.num_attention_heads, c.hidden_size));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return InvalidArgument(fmt::format("config.json: num_key_value_heads ({}) does not divide num_attention_heads ({})",
                                       c.num_key_value_heads, c.num_attention_heads));
  if (c.head_dim % 2 != 0) return InvalidArgument(fmt::format("config.json: head_dim ({}) must be even for RoPE", c.head_dim));
  if (!(c.rms_norm_eps > 0)) return InvalidArgument(fmt::format("config.json: 'rms_norm_eps' must be positive, got {}", c.rms_norm_eps));
  if (!(c.rope_theta > 0)) return InvalidArgument(fmt::format("config.json: 'rope_theta' must be positive, got {}", c.rope_theta));
  if (c.rope_scaling.type != RopeScalingType::kNone && !(c.rope_scaling.factor > 0))
    return InvalidArgument(fmt::format("config.json: rope_scaling 'factor' must be positive, got {}", c.rope_scaling.factor));
  if (c.rope_scaling.type == RopeScalingType::kLlama3) {
    const auto& r = c.rope_scaling;
    if (!(r.low_freq_factor > 0) || !(r.high_freq_factor > r.low_freq_factor))
      return InvalidArgument(fmt::format("config.json: rope_scaling needs 0 < low_freq_factor ({}) < high_freq_factor ({})",
                                         r.low_freq_factor, r.high_freq_factor));
    if (r.original_max_position_embeddings <= 0)
      return InvalidArgument("config.json: rope_scaling 'original_max_position_embeddings' must be positive");
  }
  if (c.torch_dtype != "float32" && c.torch_dtype != "float16" && c.torch_dtype != "bfloat16")
    return InvalidArgument(fmt::format("config.json: unsupported torch_dtype {} (float32, float16, bfloat16)", Quote(c.torch_dtype)));
  auto check_id = [&](const char* name, int64_t id) -> Status {
    if (id < 0 || id >= c.vocab_size)
      return InvalidArgument(fmt::format("config.json: {} {} is outside the vocabulary (size {})", name, id, c.vocab_size));
    return Status::Ok();
  };
  if (c.bos_token_id) OPFUSE_RETURN_IF_ERROR(check_id("bos_token_id", *c.bos_token_id));
  for (auto e : c.eos_token_ids) OPFUSE_RETURN_IF_ERROR(check_id("eos_token_id", e));
  return Status::Ok();
}

StatusOr<LlamaConfig> ParseConfig(const json& j) {
  if (!j.is_object()) return InvalidArgument("config.json: top level must be a JSON object");
  LlamaConfig c;
  if (auto it = j.find("model_type"); it != j.end() && it->is_string()) c.model_type = it->get<std::string>();
  if (c.model_type != "llama" && c.model_type != "qwen2" && c.model_type != "mistral")
    return InvalidArgument(fmt::format("config.json: unsupported model_type {} (llama, qwen2, mistral)", Quote(c.model_type)));
  OPFUSE_ASSIGN_OR_RETURN(c.hidden_size, GetInt(j, "hidden_size", std::nullopt));
  OPFUSE_ASSIGN_OR_RETURN(c.intermediate_size, GetInt(j, "intermediate_size", std::nullopt));
  OPFUSE_ASSIGN_OR_RETURN(c.num_hidden_layers, GetInt(j, "num_hidden_layers", std::nullopt));
  OPFUSE_ASSIGN_OR_RETURN(c.num_attention_heads, GetInt(j, "num_attention_heads", std::nullopt));
  OPFUSE_ASSIGN_OR_RETURN(c.vocab_size, GetInt(j, "vocab_size", std::nullopt));
  if (c.num_attention_heads <= 0)
    return InvalidArgument(fmt::format("config.json: 'num_attention_heads' must be positive, got {}", c.num_attention_heads));
  OPFUSE_ASSIGN_OR_RETURN(c.num_key_value_heads, GetInt(j, "num_key_value_heads", c.num_attention_heads));
  if (c.hidden_size % c.num_attention_heads != 0)
    return InvalidArgument(fmt::format("config.json: num_attention_heads ({}) does not divide hidden_size ({})",
                                       c.num_attention_heads, c.hidden_size));
  OPFUSE_ASSIGN_OR_RETURN(c.head_dim, GetInt(j, "head_dim", c.hidden_size / c.num_attention_heads));
  OPFUSE_ASSIGN_OR_RETURN(c.max_position_embeddings, GetInt(j, "max_position_embeddings", 2048));
  OPFUSE_ASSIGN_OR_RETURN(c.rms_norm_eps, GetNum(j, "rms_norm_eps", 1e-6));
  OPFUSE_ASSIGN_OR_RETURN(c.rope_theta, GetNum(j, "rope_theta", 10000.0));
  if (auto it = j.find("rope_scaling"); it != j.end()) {
    OPFUSE_ASSIGN_OR_RETURN(c.rope_scaling, ParseRopeScaling(*it));
  }
  // Qwen2 always has a QKV bias and no attention_bias field; Llama defaults to none.
  OPFUSE_ASSIGN_OR_RETURN(c.attention_bias, GetBool(j, "attention_bias", c.model_type == "qwen2"));
  OPFUSE_ASSIGN_OR_RETURN(c.tie_word_embeddings, GetBool(j, "tie_word_embeddings", false));
  if (auto it = j.find("torch_dtype"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return InvalidArgument("config.json: 'torch_dtype' must be a string");
    c.torch_dtype = it->get<std::string>();
  }
  if (auto it = j.find("bos_token_id"); it != j.end() && !it->is_null()) {
    OPFUSE_ASSIGN_OR_RETURN(int64_t b, GetInt(j, "bos_token_id", std::nullopt));
    c.bos_token_id = b;
  }
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    if (it->is_array()) {
      for (const auto& e : *it) {
        if (!e.is_number_integer()) return InvalidArgument(fmt::format("config.json: 'eos_token_id' entries must be integers, got {}", e.dump()));
        c.eos_token_ids.push_back(e.get<int64_t>());
      }
    } else {
      OPFUSE_ASSIGN_OR_RETURN(int64_t e, GetInt(j, "eos_token_id", std::nullopt));
      c.eos_token_ids.push_back(e);
    }
  }
  OPFUSE_RETURN_IF_ERROR(ValidateConfig(c));
  return c;
}

StatusOr<LlamaConfig> ParseConfigText(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("config.json: not valid JSON");
  return ParseConfig(j);
}

StatusOr<LlamaConfig> LoadConfigFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound(fmt::format("cannot open {}", path));
  std::stringstream ss;
  ss << f.rdbuf();
  auto c = ParseConfigText(ss.str());
  if (!c.ok()) return InvalidArgument(fmt::format("{}: {}", path, c.status().message()));
  return c;
}

json ConfigToJson(const LlamaConfig& c) {
  json j = {{"architectures", json::array({c.model_type == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"})},
            {"model_type", c.model_type},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_hidden_layers", c.num_hidden_layers},
            {"num_attention_heads", c.num_attention_heads},
            {"num_key_value_heads", c.num_key_value_heads},
            {"head_dim", c.head_dim},
            {"vocab_size", c.vocab_size},
            {"max_position_embeddings", c.max_position_embeddings},
            {"rms_norm_eps", c.rms_norm_eps},
            {"rope_theta", c.rope_theta},
            {"attention_bias", c.attention_bias},
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"torch_dtype", c.torch_dtype},
            {"hidden_act", "silu"}};
  if (c.rope_scaling.type == RopeScalingType::kNone) {
    j["rope_scaling"] = nullptr;
  } else {
    json r = {{"rope_type", RopeTypeName(c.rope_scaling.type)}, {"factor", c.rope_scaling.factor}};
    if (c.rope_scaling.type == RopeScalingType::kLlama3) {
      r["low_freq_factor"] = c.rope_scaling.low_freq_factor;
      r["high_freq_factor"] = c.rope_scaling.high_freq_factor;
      r["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
    }
    j["rope_scaling"] = r;
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  return j;
}

std::vector<std::string> BuiltinConfigNames() { return {"tinyllama-1.1b", "tiny"}; }

StatusOr<LlamaConfig> BuiltinConfig(std::string_view name) {
  LlamaConfig c;
  if (name == "tinyllama-1.1b") {
    // TinyLlama/TinyLlama-1.1B-Chat-v1.0 config.json.
    c.hidden_size = 2048;
    c.intermediate_size = 5632;
    c.num_hidden_layers = 22;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 4;
    c.head_dim = 64;
    c.vocab_size = 32000;
    c.max_position_embeddings = 2048;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    c.torch_dtype = "bfloat16";
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
  } else if (name == "tiny") {
    // A few hundred KB: small enough for CPU tests and committed fixtures, yet with GQA (4 heads,
    // 2 kv heads), an MLP wider than hidden, and more than one layer.
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.vocab_size = 256;
    c.max_position_embeddings = 256;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    c.torch_dtype = "float32";
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
  } else {
    return NotFound(fmt::format("unknown built-in config '{}' (known: tinyllama-1.1b, tiny)", name));
  }
  OPFUSE_RETURN_IF_ERROR(ValidateConfig(c));
  return c;
}

}  // namespace opfuse::llama
