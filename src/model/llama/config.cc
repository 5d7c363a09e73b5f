// Parsing and validation of Hugging Face Llama-family config.json files, and the built-in configs.
//
// Every top-level key falls in one of three classes (docs/model_format.md lists them):
//   read     — a field of the family's transformers config class that opfuse implements;
//   ignored  — known not to change the forward pass (generation defaults, training-only fields,
//              metadata such as transformers_version, keys starting with '_');
//   refused  — everything else: keys that change the math and are not implemented, keys of
//              other families with a non-neutral value, and keys opfuse has never seen.
// A Reader marks the keys it consumes; whatever is left after parsing is checked against the
// ignored set, so adding a read key can never leave an old "ignored" entry silently hiding it.
// Values are read through typed getters that name the field on failure, so a malformed file gives
// one line ("config.json: 'hidden_size' must be an integer, got \"abc\"").
#include "model/llama/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "util/quote.h"
#include "util/files.h"

namespace opfuse::llama {
namespace {

using json = nlohmann::json;

// A JSON value for an error message: one line, at most ~60 characters.
std::string Short(const json& v) {
  std::string s = v.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

bool IsNeutral(const json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_object() && v.empty()) ||
         (v.is_array() && v.empty());
}

// Reads fields of one JSON object and remembers which keys were consumed. `where` prefixes every
// message ("config.json", "config.json rope_parameters").
class Reader {
 public:
  Reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  const json* Find(const char* key) {
    used_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool Has(const char* key) const {
    auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }

  StatusOr<int64_t> Int(const char* key, std::optional<int64_t> dflt) {
    const json* v = Find(key);
    if (!v) {
      if (dflt) return *dflt;
      return InvalidArgument(fmt::format("{}: missing required field '{}'", where_, key));
    }
    return AsInt(key, *v);
  }
  StatusOr<int64_t> AsInt(const char* key, const json& v) const {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && std::fabs(d) < 9.0e18 && d == std::trunc(d)) return static_cast<int64_t>(d);
    }
    return InvalidArgument(fmt::format("{}: '{}' must be an integer, got {}", where_, key, Short(v)));
  }
  StatusOr<double> Num(const char* key, std::optional<double> dflt) {
    const json* v = Find(key);
    if (!v) {
      if (dflt) return *dflt;
      return InvalidArgument(fmt::format("{}: missing required field '{}'", where_, key));
    }
    if (!v->is_number()) return InvalidArgument(fmt::format("{}: '{}' must be a number, got {}", where_, key, Short(*v)));
    return v->get<double>();
  }
  StatusOr<std::optional<double>> OptNum(const char* key) {
    const json* v = Find(key);
    if (!v) return std::optional<double>();
    if (!v->is_number()) return InvalidArgument(fmt::format("{}: '{}' must be a number, got {}", where_, key, Short(*v)));
    return std::optional<double>(v->get<double>());
  }
  StatusOr<bool> Bool(const char* key, bool dflt) {
    const json* v = Find(key);
    if (!v) return dflt;
    if (!v->is_boolean()) return InvalidArgument(fmt::format("{}: '{}' must be true or false, got {}", where_, key, Short(*v)));
    return v->get<bool>();
  }
  StatusOr<std::optional<std::string>> Str(const char* key) {
    const json* v = Find(key);
    if (!v) return std::optional<std::string>();
    if (!v->is_string()) return InvalidArgument(fmt::format("{}: '{}' must be a string, got {}", where_, key, Short(*v)));
    return std::optional<std::string>(v->get<std::string>());
  }
  // An int or a list of ints (HF's token ids).
  StatusOr<std::vector<int64_t>> IntList(const char* key) {
    const json* v = Find(key);
    std::vector<int64_t> out;
    if (!v) return out;
    if (v->is_array()) {
      for (const auto& e : *v) {
        OPFUSE_ASSIGN_OR_RETURN(int64_t x, AsInt(key, e));
        out.push_back(x);
      }
    } else {
      OPFUSE_ASSIGN_OR_RETURN(int64_t x, AsInt(key, *v));
      out.push_back(x);
    }
    return out;
  }

  const json& j() const { return j_; }
  const std::string& where() const { return where_; }
  bool used(const std::string& key) const { return used_.count(key) > 0; }

 private:
  const json& j_;
  std::string where_;
  std::set<std::string> used_;
};

// Keys of transformers' PretrainedConfig (4.x and 5.x) and of the families' config classes that
// do not change the forward pass opfuse runs: metadata, generation defaults (opfuse's sampler
// takes its own flags), training-only fields, task heads opfuse does not build.
// `pretraining_tp` only splits the same matmuls into slices (the same math).
const std::set<std::string>& IgnoredKeys() {
  static const std::set<std::string> k = {
      "architectures", "transformers_version", "model_type", "initializer_range", "attention_dropout",
      "use_cache", "pretraining_tp", "return_dict", "output_hidden_states", "output_attentions", "torchscript",
      "use_bfloat16", "tf_legacy_loss", "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder",
      "cross_attention_hidden_size", "add_cross_attention", "tie_encoder_decoder", "finetuning_task", "id2label",
      "label2id", "num_labels", "task_specific_params", "problem_type", "tokenizer_class", "prefix",
      "sep_token_id", "decoder_start_token_id", "max_length", "min_length", "do_sample", "early_stopping",
      "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
      "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
      "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
      "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
      "begin_suppress_tokens", "auto_map", "custom_pipelines", "gradient_checkpointing", "_name_or_path",
      "_commit_hash", "_attn_implementation", "_attn_implementation_autoset", "attn_implementation",
      "base_model_tp_plan", "base_model_pp_plan", "keys_to_ignore_at_inference",
      // Older Llama conversions carry these; transformers' LlamaConfig does not read them.
      "max_sequence_length", "use_flash_attention_2", "unk_token_id",
  };
  return k;
}

// Keys that change the math and are refused with a specific reason (rather than "unknown").
std::optional<std::string> RefusedReason(const std::string& key, const json& v) {
  if (key == "quantization_config" || key == "compression_config")
    return "quantized checkpoints are not implemented";
  if (key == "pruned_heads" && !IsNeutral(v)) return "pruned attention heads are not implemented";
  if (key == "num_experts" || key == "num_local_experts" || key == "num_experts_per_tok" || key == "moe_intermediate_size")
    return "mixture-of-experts layers are not implemented";
  if (key == "use_mrope" && !IsNeutral(v)) return "multimodal rotary embeddings are not implemented";
  if ((key == "attn_logit_softcapping" || key == "final_logit_softcapping") && !v.is_null())
    return "logit soft-capping is not implemented";
  return std::nullopt;
}

// Family-specific keys: read by some families, foreign to others. A foreign key with a neutral
// value (null / false) is what other families' files carry and changes nothing; with any other
// value it is refused, because its author expected it to mean something.
const std::set<std::string>& FamilyKeys() {
  static const std::set<std::string> k = {"attention_bias", "mlp_bias", "sliding_window", "use_sliding_window",
                                          "max_window_layers", "layer_types"};
  return k;
}

StatusOr<std::string> ParseDType(Reader& r) {
  OPFUSE_ASSIGN_OR_RETURN(auto d5, r.Str("dtype"));
  OPFUSE_ASSIGN_OR_RETURN(auto d4, r.Str("torch_dtype"));
  if (d5 && d4 && *d5 != *d4)
    return InvalidArgument(fmt::format("config.json: 'dtype' {} and 'torch_dtype' {} disagree", Quote(*d5), Quote(*d4)));
  const std::string d = d5 ? *d5 : d4 ? *d4 : "";
  const char* key = d5 ? "dtype" : "torch_dtype";
  if (!d.empty() && d != "float32" && d != "float16" && d != "bfloat16")
    return InvalidArgument(fmt::format("config.json: unsupported {} {} (float32, float16, bfloat16)", key, Quote(d)));
  return d;
}

double YarnMscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// rope_parameters (transformers 5) or rope_scaling + rope_theta (4.x). Mirrors
// transformers' standardize_rope_params and the _compute_*_parameters functions' reads.
Status ParseRope(Reader& top, LlamaConfig& c) {
  const json* rp = top.Find("rope_parameters");
  const json* rs = top.Find("rope_scaling");
  if (rp && rs)
    return InvalidArgument("config.json: both 'rope_parameters' and 'rope_scaling' are given; a file carries one");
  const char* name = rp ? "rope_parameters" : "rope_scaling";
  const json* d = rp ? rp : rs;
  if (d && !d->is_object())
    return InvalidArgument(fmt::format("config.json: '{}' must be an object or null, got {}", name, Short(*d)));
  static const json kEmpty = json::object();
  if (!d) d = &kEmpty;
  for (auto it = d->begin(); it != d->end(); ++it)
    if (it.value().is_object())
      return InvalidArgument(fmt::format(
          "config.json: per-layer-type {} ('{}' holds an object) are not implemented", name, it.key()));
  Reader r(*d, fmt::format("config.json {}", name));

  std::string type = "default";
  for (const char* k : {"rope_type", "type"}) {
    OPFUSE_ASSIGN_OR_RETURN(auto t, r.Str(k));
    if (t) {
      type = *t;
      break;
    }
  }
  (void)r.Find("type");
  // rope_theta: inside the dict (5.x), else top-level (4.x), else transformers' default_theta.
  OPFUSE_ASSIGN_OR_RETURN(auto theta_in, r.OptNum("rope_theta"));
  OPFUSE_ASSIGN_OR_RETURN(double theta_top, top.Num("rope_theta", 10000.0));
  c.rope_theta = theta_in ? *theta_in : theta_top;
  for (Reader* src : {&r, &top}) {
    OPFUSE_ASSIGN_OR_RETURN(auto prf, src->OptNum("partial_rotary_factor"));
    if (prf && *prf != 1.0)
      return InvalidArgument(fmt::format("{}: 'partial_rotary_factor' = {} is not implemented (only 1.0: RoPE over the whole head)",
                                         src->where(), *prf));
  }
  // Phi-3-style top-level original_max_position_embeddings wins over the dict's, as in transformers.
  OPFUSE_ASSIGN_OR_RETURN(auto orig_top, top.OptNum("original_max_position_embeddings"));

  RopeScaling& s = c.rope_scaling;
  s = RopeScaling{};
  auto orig = [&]() -> StatusOr<int64_t> {
    if (orig_top) return static_cast<int64_t>(*orig_top);
    return r.Int("original_max_position_embeddings", c.max_position_embeddings);
  };
  if (type == "default") {
    s.type = RopeScalingType::kNone;
  } else if (type == "linear") {
    s.type = RopeScalingType::kLinear;
    OPFUSE_ASSIGN_OR_RETURN(s.factor, r.Num("factor", std::nullopt));
  } else if (type == "dynamic") {
    // Dynamic NTK rescales only once a sequence exceeds max_position_embeddings; opfuse's context
    // never does (the engine refuses a longer one), so the tables are the default ones exactly.
    s.type = RopeScalingType::kDynamic;
    OPFUSE_ASSIGN_OR_RETURN(s.factor, r.Num("factor", std::nullopt));
  } else if (type == "llama3") {
    s.type = RopeScalingType::kLlama3;
    OPFUSE_ASSIGN_OR_RETURN(s.factor, r.Num("factor", std::nullopt));
    OPFUSE_ASSIGN_OR_RETURN(s.low_freq_factor, r.Num("low_freq_factor", std::nullopt));
    OPFUSE_ASSIGN_OR_RETURN(s.high_freq_factor, r.Num("high_freq_factor", std::nullopt));
    OPFUSE_ASSIGN_OR_RETURN(s.original_max_position_embeddings, orig());
  } else if (type == "yarn") {
    s.type = RopeScalingType::kYarn;
    OPFUSE_ASSIGN_OR_RETURN(s.original_max_position_embeddings, orig());
    if (s.original_max_position_embeddings <= 0)
      return InvalidArgument("config.json: rope 'original_max_position_embeddings' must be positive");
    OPFUSE_ASSIGN_OR_RETURN(auto factor, r.OptNum("factor"));
    s.factor = factor ? *factor
                      : static_cast<double>(c.max_position_embeddings) / static_cast<double>(s.original_max_position_embeddings);
    OPFUSE_ASSIGN_OR_RETURN(auto af, r.OptNum("attention_factor"));
    OPFUSE_ASSIGN_OR_RETURN(auto mscale, r.OptNum("mscale"));
    OPFUSE_ASSIGN_OR_RETURN(auto mscale_all, r.OptNum("mscale_all_dim"));
    if (af) s.attention_factor = *af;
    else if (mscale && *mscale != 0 && mscale_all && *mscale_all != 0)
      s.attention_factor = YarnMscale(s.factor, *mscale) / YarnMscale(s.factor, *mscale_all);
    else s.attention_factor = YarnMscale(s.factor, 1.0);
    // Python's `x or default`: a 0 means the default too.
    OPFUSE_ASSIGN_OR_RETURN(auto bf, r.OptNum("beta_fast"));
    OPFUSE_ASSIGN_OR_RETURN(auto bs, r.OptNum("beta_slow"));
    s.beta_fast = bf && *bf != 0 ? *bf : 32.0;
    s.beta_slow = bs && *bs != 0 ? *bs : 1.0;
    OPFUSE_ASSIGN_OR_RETURN(s.truncate, r.Bool("truncate", true));
  } else {
    return InvalidArgument(fmt::format(
        "config.json: {} rope_type {} is not implemented (supported: default, linear, dynamic, llama3, yarn)", name,
        Quote(type)));
  }
  // Every key of the rope dict is one of transformers' rope parameters; those of another rope type
  // are ignored (transformers ignores them too), anything else is refused.
  static const std::set<std::string> kRopeKeys = {
      "rope_type", "type", "rope_theta", "partial_rotary_factor", "factor", "low_freq_factor", "high_freq_factor",
      "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
      "truncate"};
  for (auto it = d->begin(); it != d->end(); ++it)
    if (!kRopeKeys.count(it.key()))
      return InvalidArgument(fmt::format("config.json: {} key {} = {} is not understood by opfuse", name,
                                         Quote(it.key()), Short(it.value())));
  return Status::Ok();
}

// Sliding windows per layer, as each family's transformers model applies them.
Status ParseWindows(Reader& r, LlamaConfig& c) {
  c.layer_windows.clear();
  if (c.family == ModelFamily::kMistral) {
    // MistralConfig: sliding_window defaults to 4096 and applies to every layer (layer_types is
    // ignored by MistralModel).
    const bool present = r.j().contains("sliding_window");
    OPFUSE_ASSIGN_OR_RETURN(int64_t w, r.Int("sliding_window", present ? std::optional<int64_t>(0) : 4096));
    if (w < 0) return InvalidArgument(fmt::format("config.json: 'sliding_window' must be positive, got {}", w));
    (void)r.Find("layer_types");
    if (w > 0) c.layer_windows.assign(c.num_hidden_layers, w);
    return Status::Ok();
  }
  if (c.family == ModelFamily::kQwen2 || c.family == ModelFamily::kQwen3) {
    // Qwen2Config / Qwen3Config: sliding_window only when use_sliding_window; it applies to the
    // layers layer_types marks "sliding_attention" (by default those from max_window_layers on).
    OPFUSE_ASSIGN_OR_RETURN(bool use, r.Bool("use_sliding_window", false));
    const bool present = r.j().contains("sliding_window");
    OPFUSE_ASSIGN_OR_RETURN(int64_t w, r.Int("sliding_window", present ? std::optional<int64_t>(0) : 4096));
    OPFUSE_ASSIGN_OR_RETURN(int64_t max_window_layers, r.Int("max_window_layers", 28));
    if (!use) w = 0;
    if (w < 0) return InvalidArgument(fmt::format("config.json: 'sliding_window' must be positive, got {}", w));
    std::vector<bool> sliding(c.num_hidden_layers, false);
    if (const json* lt = r.Find("layer_types")) {
      if (!lt->is_array() || static_cast<int64_t>(lt->size()) != c.num_hidden_layers)
        return InvalidArgument(fmt::format("config.json: 'layer_types' must be a list of {} strings (one per layer)",
                                           c.num_hidden_layers));
      for (size_t i = 0; i < lt->size(); ++i) {
        const json& e = (*lt)[i];
        if (e == "full_attention") continue;
        if (e == "sliding_attention") {
          sliding[i] = true;
          continue;
        }
        return InvalidArgument(fmt::format("config.json: layer_types[{}] = {} is not implemented (full_attention, sliding_attention)",
                                           i, Short(e)));
      }
    } else {
      for (int64_t l = 0; l < c.num_hidden_layers; ++l) sliding[l] = w > 0 && l >= max_window_layers;
    }
    if (w > 0) {
      c.layer_windows.assign(c.num_hidden_layers, 0);
      for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        if (sliding[l]) c.layer_windows[l] = w;
    }
    return Status::Ok();
  }
  // Llama has no sliding window; a layer_types list must say so.
  if (const json* lt = r.Find("layer_types")) {
    if (!lt->is_array()) return InvalidArgument("config.json: 'layer_types' must be a list");
    for (size_t i = 0; i < lt->size(); ++i)
      if ((*lt)[i] != "full_attention")
        return InvalidArgument(fmt::format("config.json: layer_types[{}] = {} is not implemented for llama", i, Short((*lt)[i])));
  }
  return Status::Ok();
}

}  // namespace

const char* FamilyName(ModelFamily f) {
  switch (f) {
    case ModelFamily::kLlama: return "llama";
    case ModelFamily::kMistral: return "mistral";
    case ModelFamily::kQwen2: return "qwen2";
    case ModelFamily::kQwen3: return "qwen3";
  }
  return "llama";
}

const char* RopeTypeName(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::kNone: return "default";
    case RopeScalingType::kLinear: return "linear";
    case RopeScalingType::kLlama3: return "llama3";
    case RopeScalingType::kDynamic: return "dynamic";
    case RopeScalingType::kYarn: return "yarn";
  }
  return "default";
}

int64_t LlamaConfig::ParameterCount() const {
  const int64_t h = hidden_size;
  int64_t per_layer = h * q_dim() + 2 * h * kv_dim() + q_dim() * h  // q, k, v, o
                      + 3 * h * intermediate_size                    // gate, up, down
                      + 2 * h;                                       // two norms
  if (attention_bias) per_layer += q_dim() + 2 * kv_dim();
  if (o_proj_bias) per_layer += h;
  if (mlp_bias) per_layer += 2 * intermediate_size + h;
  if (qk_norm) per_layer += 2 * head_dim;
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
  // Sizes beyond these would overflow the byte counts of a tensor or a table; no real model is near them.
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  for (auto [name, v] : {std::pair{"hidden_size", c.hidden_size}, {"intermediate_size", c.intermediate_size},
                         {"num_hidden_layers", c.num_hidden_layers}, {"vocab_size", c.vocab_size},
                         {"num_attention_heads", c.num_attention_heads}, {"head_dim", c.head_dim},
                         {"max_position_embeddings", c.max_position_embeddings}})
    if (v > kMaxDim) return InvalidArgument(fmt::format("config.json: '{}' = {} is implausibly large (limit {})", name, v, kMaxDim));
  if (c.q_dim() > kMaxDim)
    return InvalidArgument(fmt::format("config.json: num_attention_heads × head_dim = {} is implausibly large", c.q_dim()));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return InvalidArgument(fmt::format("config.json: num_key_value_heads ({}) does not divide num_attention_heads ({})",
                                       c.num_key_value_heads, c.num_attention_heads));
  if (c.head_dim % 2 != 0) return InvalidArgument(fmt::format("config.json: head_dim ({}) must be even for RoPE", c.head_dim));
  if (!(c.rms_norm_eps > 0)) return InvalidArgument(fmt::format("config.json: 'rms_norm_eps' must be positive, got {}", c.rms_norm_eps));
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    return InvalidArgument(fmt::format("config.json: 'rope_theta' must be positive, got {}", c.rope_theta));
  const RopeScaling& r = c.rope_scaling;
  if (r.type != RopeScalingType::kNone && !(r.factor > 0 && std::isfinite(r.factor)))
    return InvalidArgument(fmt::format("config.json: rope 'factor' must be positive, got {}", r.factor));
  if (r.type == RopeScalingType::kLlama3) {
    if (!(r.low_freq_factor > 0) || !(r.high_freq_factor > r.low_freq_factor))
      return InvalidArgument(fmt::format("config.json: rope needs 0 < low_freq_factor ({}) < high_freq_factor ({})",
                                         r.low_freq_factor, r.high_freq_factor));
  }
  if ((r.type == RopeScalingType::kLlama3 || r.type == RopeScalingType::kYarn) && r.original_max_position_embeddings <= 0)
    return InvalidArgument("config.json: rope 'original_max_position_embeddings' must be positive");
  if (r.type == RopeScalingType::kYarn && !(std::isfinite(r.attention_factor) && r.attention_factor > 0 &&
                                            std::isfinite(r.beta_fast) && std::isfinite(r.beta_slow)))
    return InvalidArgument("config.json: rope yarn 'attention_factor', 'beta_fast' and 'beta_slow' must be finite (attention_factor > 0)");
  if (!c.torch_dtype.empty() && c.torch_dtype != "float32" && c.torch_dtype != "float16" && c.torch_dtype != "bfloat16")
    return InvalidArgument(fmt::format("config.json: unsupported torch_dtype {} (float32, float16, bfloat16)", Quote(c.torch_dtype)));
  auto check_id = [&](const char* name, int64_t id) -> Status {
    if (id < 0 || id >= c.vocab_size)
      return InvalidArgument(fmt::format("config.json: {} {} is outside the vocabulary (size {})", name, id, c.vocab_size));
    return Status::Ok();
  };
  if (c.bos_token_id) OPFUSE_RETURN_IF_ERROR(check_id("bos_token_id", *c.bos_token_id));
  for (auto e : c.eos_token_ids) OPFUSE_RETURN_IF_ERROR(check_id("eos_token_id", e));
  if (!c.layer_windows.empty() && static_cast<int64_t>(c.layer_windows.size()) != c.num_hidden_layers)
    return InvalidArgument("config.json: one sliding window per layer expected");
  for (int64_t w : c.layer_windows)
    if (w < 0) return InvalidArgument(fmt::format("config.json: 'sliding_window' must be positive, got {}", w));
  return Status::Ok();
}

Status CheckContext(const LlamaConfig& c, int64_t context) {
  if (context > c.max_position_embeddings)
    return InvalidArgument(fmt::format("context {} exceeds the model's max_position_embeddings {}", context,
                                       c.max_position_embeddings));
  return Status::Ok();
}

StatusOr<LlamaConfig> ParseConfig(const json& j) {
  if (!j.is_object()) return InvalidArgument("config.json: top level must be a JSON object");
  Reader r(j, "config.json");
  LlamaConfig c;
  OPFUSE_ASSIGN_OR_RETURN(auto mt, r.Str("model_type"));
  c.model_type = mt ? *mt : "llama";
  if (c.model_type == "llama") c.family = ModelFamily::kLlama;
  else if (c.model_type == "mistral") c.family = ModelFamily::kMistral;
  else if (c.model_type == "qwen2") c.family = ModelFamily::kQwen2;
  else if (c.model_type == "qwen3") c.family = ModelFamily::kQwen3;
  else return InvalidArgument(fmt::format("config.json: unsupported model_type {} (llama, mistral, qwen2, qwen3)", Quote(c.model_type)));
  const ModelFamily f = c.family;

  OPFUSE_ASSIGN_OR_RETURN(c.hidden_size, r.Int("hidden_size", std::nullopt));
  OPFUSE_ASSIGN_OR_RETURN(c.intermediate_size, r.Int("intermediate_size", std::nullopt));
  OPFUSE_ASSIGN_OR_RETURN(c.num_hidden_layers, r.Int("num_hidden_layers", std::nullopt));
  OPFUSE_ASSIGN_OR_RETURN(c.num_attention_heads, r.Int("num_attention_heads", std::nullopt));
  OPFUSE_ASSIGN_OR_RETURN(c.vocab_size, r.Int("vocab_size", std::nullopt));
  if (c.num_attention_heads <= 0)
    return InvalidArgument(fmt::format("config.json: 'num_attention_heads' must be positive, got {}", c.num_attention_heads));
  // Checked here as well as in ValidateConfig: ParseWindows sizes a vector by the layer count.
  if (c.num_hidden_layers <= 0)
    return InvalidArgument(fmt::format("config.json: 'num_hidden_layers' must be positive, got {}", c.num_hidden_layers));
  if (c.num_hidden_layers > (int64_t{1} << 24))
    return InvalidArgument(fmt::format("config.json: 'num_hidden_layers' = {} is implausibly large (limit {})",
                                       c.num_hidden_layers, int64_t{1} << 24));
  // MistralConfig defaults num_key_value_heads to 8; the others to the head count.
  OPFUSE_ASSIGN_OR_RETURN(c.num_key_value_heads,
                          r.Int("num_key_value_heads", f == ModelFamily::kMistral && !j.contains("num_key_value_heads")
                                                           ? 8 : c.num_attention_heads));
  // Qwen3Config's head_dim defaults to 128; the others derive it (hidden / heads).
  if (f == ModelFamily::kQwen3 && !j.contains("head_dim")) {
    c.head_dim = 128;
  } else {
    if (!r.Has("head_dim") && c.hidden_size % c.num_attention_heads != 0)
      return InvalidArgument(fmt::format("config.json: num_attention_heads ({}) does not divide hidden_size ({})",
                                         c.num_attention_heads, c.hidden_size));
    OPFUSE_ASSIGN_OR_RETURN(c.head_dim, r.Int("head_dim", c.hidden_size / c.num_attention_heads));
  }
  const int64_t default_positions = f == ModelFamily::kLlama ? 2048 : f == ModelFamily::kMistral ? 131072 : 32768;
  OPFUSE_ASSIGN_OR_RETURN(c.max_position_embeddings, r.Int("max_position_embeddings", default_positions));
  OPFUSE_ASSIGN_OR_RETURN(c.rms_norm_eps, r.Num("rms_norm_eps", 1e-6));
  OPFUSE_RETURN_IF_ERROR(ParseRope(r, c));

  OPFUSE_ASSIGN_OR_RETURN(auto act, r.Str("hidden_act"));
  if (act && *act != "silu")
    return InvalidArgument(fmt::format("config.json: hidden_act {} is not implemented (silu)", Quote(*act)));

  // Biases, as each family's transformers modules create them.
  switch (f) {
    case ModelFamily::kLlama: {
      OPFUSE_ASSIGN_OR_RETURN(bool ab, r.Bool("attention_bias", false));
      OPFUSE_ASSIGN_OR_RETURN(c.mlp_bias, r.Bool("mlp_bias", false));
      c.attention_bias = c.o_proj_bias = ab;  // LlamaAttention: q, k, v and o all take attention_bias
      break;
    }
    case ModelFamily::kQwen3: {
      OPFUSE_ASSIGN_OR_RETURN(bool ab, r.Bool("attention_bias", false));
      c.attention_bias = c.o_proj_bias = ab;  // Qwen3Attention: likewise
      c.qk_norm = true;
      break;
    }
    case ModelFamily::kQwen2:
      c.attention_bias = true;  // Qwen2Attention: q, k, v always biased, o never
      break;
    case ModelFamily::kMistral:
      break;
  }
  OPFUSE_RETURN_IF_ERROR(ParseWindows(r, c));
  OPFUSE_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  OPFUSE_ASSIGN_OR_RETURN(c.torch_dtype, ParseDType(r));

  // Token ids (an int or a list). LlamaConfig / MistralConfig default bos 1 and eos 2; Qwen none.
  const bool llama_ids = f == ModelFamily::kLlama || f == ModelFamily::kMistral;
  OPFUSE_ASSIGN_OR_RETURN(auto bos, r.IntList("bos_token_id"));
  if (bos.size() > 1)
    return InvalidArgument(fmt::format("config.json: 'bos_token_id' lists {} ids; a model has one BOS", bos.size()));
  if (!bos.empty()) c.bos_token_id = bos[0];
  else if (llama_ids && !j.contains("bos_token_id")) c.bos_token_id = 1;
  OPFUSE_ASSIGN_OR_RETURN(c.eos_token_ids, r.IntList("eos_token_id"));
  if (c.eos_token_ids.empty() && llama_ids && !j.contains("eos_token_id")) c.eos_token_ids = {2};
  OPFUSE_ASSIGN_OR_RETURN(c.pad_token_ids, r.IntList("pad_token_id"));

  // Every other key: ignored when known harmless, refused otherwise.
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (r.used(k) || IgnoredKeys().count(k) || (!k.empty() && k[0] == '_')) continue;
    if (auto why = RefusedReason(k, it.value()))
      return InvalidArgument(fmt::format("config.json: {} = {}: {}", Quote(k), Short(it.value()), *why));
    if (FamilyKeys().count(k)) {
      if (IsNeutral(it.value())) continue;
      return InvalidArgument(fmt::format("config.json: {} = {} is not a {} field (transformers' {} model does not read it)",
                                         Quote(k), Short(it.value()), c.model_type, c.model_type));
    }
    return InvalidArgument(fmt::format(
        "config.json: key {} = {} is not understood by opfuse (it may change the model's math; docs/model_format.md "
        "lists the keys read and ignored)",
        Quote(k), Short(it.value())));
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
  OPFUSE_ASSIGN_OR_RETURN(std::string text, ReadFileCapped(path, kMaxJsonFileBytes));
  auto c = ParseConfigText(text);
  if (!c.ok()) {
    // The parser's messages begin "config.json: "; the path replaces that prefix (never both).
    std::string_view msg = c.status().message();
    if (msg.rfind("config.json: ", 0) == 0) msg.remove_prefix(13);
    return InvalidArgument(fmt::format("{}: {}", path, msg));
  }
  return c;
}

json ConfigToJson(const LlamaConfig& c) {
  const char* arch = c.family == ModelFamily::kQwen2     ? "Qwen2ForCausalLM"
                     : c.family == ModelFamily::kQwen3   ? "Qwen3ForCausalLM"
                     : c.family == ModelFamily::kMistral ? "MistralForCausalLM"
                                                         : "LlamaForCausalLM";
  json j = {{"architectures", json::array({arch})},
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
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"hidden_act", "silu"}};
  if (!c.torch_dtype.empty()) j["torch_dtype"] = c.torch_dtype;
  if (c.family == ModelFamily::kLlama) {
    j["attention_bias"] = c.attention_bias;
    j["mlp_bias"] = c.mlp_bias;
  } else if (c.family == ModelFamily::kQwen3) {
    j["attention_bias"] = c.attention_bias;
  }
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScalingType::kNone) {
    j["rope_scaling"] = nullptr;
  } else {
    json r = {{"rope_type", RopeTypeName(s.type)}, {"factor", s.factor}};
    if (s.type == RopeScalingType::kLlama3) {
      r["low_freq_factor"] = s.low_freq_factor;
      r["high_freq_factor"] = s.high_freq_factor;
    }
    if (s.type == RopeScalingType::kLlama3 || s.type == RopeScalingType::kYarn)
      r["original_max_position_embeddings"] = s.original_max_position_embeddings;
    if (s.type == RopeScalingType::kYarn) {
      r["attention_factor"] = s.attention_factor;
      r["beta_fast"] = s.beta_fast;
      r["beta_slow"] = s.beta_slow;
      r["truncate"] = s.truncate;
    }
    j["rope_scaling"] = r;
  }
  // Windows: every family's form of "these layers use window W" (one W per model).
  int64_t w = 0;
  for (int64_t x : c.layer_windows) w = std::max(w, x);
  if (c.family == ModelFamily::kMistral) {
    j["sliding_window"] = w > 0 ? json(w) : json(nullptr);
  } else if (c.family == ModelFamily::kQwen2 || c.family == ModelFamily::kQwen3) {
    j["use_sliding_window"] = w > 0;
    j["sliding_window"] = w > 0 ? json(w) : json(nullptr);
    json types = json::array();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      types.push_back(!c.layer_windows.empty() && c.layer_windows[l] > 0 ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
  }
  j["bos_token_id"] = c.bos_token_id ? json(*c.bos_token_id) : json(nullptr);
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  else j["eos_token_id"] = nullptr;
  if (c.pad_token_ids.size() == 1) j["pad_token_id"] = c.pad_token_ids[0];
  else if (!c.pad_token_ids.empty()) j["pad_token_id"] = c.pad_token_ids;
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
