// JsonBpeTokenizer: a Hugging Face "fast tokenizer" file (tokenizer.json) of BPE type, read and run
// by opfuse itself, so that Llama-3, Qwen2/Qwen3 and Llama-2-style models tokenize text exactly as
// the `tokenizers` package does (`encode(text, add_special_tokens=False).ids` and
// `decode(ids, skip_special_tokens=False)`).
//
// The choice: no Debian package implements tokenizer.json, and the format is a pipeline of small,
// well-defined steps (added-token split -> normalizer -> pre-tokenizer -> BPE model; decoder chain
// on the way back), so each step the supported models use is re-implemented here step for step
// after the Rust original, and everything else is refused when the file is loaded. The invariant:
// a file that loads produces HF's ids; anything that could change the ids and is not implemented
// (another model/normalizer/pre-tokenizer type, a field value such as dropout or invert, truncation,
// padding) is an InvalidArgument naming the JSON path and value, never a silent approximation.
// Regexes run on PCRE2 (HF uses Oniguruma; the few syntax differences that matter for \s are
// translated), NFC on ICU. Malformed files give one-line errors; no exception leaves this class.
// docs/tokenizers.md lists what is supported and refused.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "opfuse/status.h"

namespace opfuse {

class JsonBpeTokenizer {
 public:
  // PATH (a tokenizer.json) and, when it exists, tokenizer_config.json in the same directory.
  static StatusOr<std::unique_ptr<JsonBpeTokenizer>> Load(const std::string& path);
  // The same from text; `config_json` empty means no tokenizer_config.json. `label` prefixes errors.
  static StatusOr<std::unique_ptr<JsonBpeTokenizer>> FromStrings(std::string_view tokenizer_json,
                                                                 std::string_view config_json = {},
                                                                 const std::string& label = "tokenizer.json");
  ~JsonBpeTokenizer();
  JsonBpeTokenizer(const JsonBpeTokenizer&) = delete;
  JsonBpeTokenizer& operator=(const JsonBpeTokenizer&) = delete;

  // HF's encode(text, add_special_tokens=False).ids: no BOS. InvalidArgument for text that is not
  // valid UTF-8. Thread-safe.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;
  // The pieces the model is given (added tokens as their text), after added-token extraction,
  // normalization and pre-tokenization: for text without added tokens, HF's
  // pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)). For tests and debugging.
  StatusOr<std::vector<std::string>> PreTokenize(std::string_view text) const;
  // HF's decode(ids, skip_special_tokens): ids that name no token are skipped, as HF does.
  StatusOr<std::string> Decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // One past the largest id of the vocabulary and the added tokens.
  int32_t vocab_size() const;
  // The token's string as stored in the file (e.g. "Ġthe"); nullopt for an id that names no token.
  std::optional<std::string> IdToToken(int32_t id) const;
  // Added tokens first, then the model's vocabulary (as HF's token_to_id).
  std::optional<int32_t> TokenToId(std::string_view token) const;

  // The BOS a caller should prepend to Encode()'s ids for a prompt: tokenizer_config.json's
  // add_bos_token when present (true: its bos_token), else the post-processor's template (a
  // TemplateProcessing whose `single` starts with a special token). nullopt: prepend nothing.
  std::optional<int32_t> bos_to_prepend() const;
  // tokenizer_config.json's clean_up_tokenization_spaces (false when absent): transformers' decode
  // then applies CleanUpTokenizationSpaces to Decode()'s text (Llama-3 sets it).
  bool clean_up_tokenization_spaces() const;
  // tokenizer_config.json's bos_token / eos_token (bos: else the template's leading token).
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

  struct Impl;

 private:
  explicit JsonBpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// transformers' clean_up_tokenization: " ." -> ".", " ," -> ",", " n't" -> "n't", ... (ten rules).
std::string CleanUpTokenizationSpaces(std::string text);

}  // namespace opfuse
