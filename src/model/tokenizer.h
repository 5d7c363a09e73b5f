// Tokenizer: text <-> token ids for a model directory, via a Hugging Face `tokenizer.json` (BPE,
// read by opfuse itself: model/tokenizer_json.h) or SentencePiece (`tokenizer.model`), with token ids
// in and out always available. tokenizer.json wins when both exist, as HF's AutoTokenizer prefers the
// fast tokenizer; it also decides whether a prompt gets a BOS (prepend_bos()).
//
// SentencePiece comes from Debian's libsentencepiece through a dlopen()ed module
// (libopfuse_sentencepiece.so, see model/plugins/sentencepiece_plugin.cc) so that opfuse binaries
// never need the library to start. When the directory has no tokenizer.model, or the module or
// library cannot be loaded, ForModelDir returns an ids-only tokenizer whose reason() says why;
// Encode/Decode then fail with that reason and ParseIds/FormatIds still work. Nothing falls back
// silently: callers print reason() when has_text() is false.
// The module is searched at $OPFUSE_SENTENCEPIECE_MODULE, next to the running binary, then in the
// build tree it was built in.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "opfuse/status.h"

namespace opfuse {

class JsonBpeTokenizer;

class Tokenizer {
 public:
  struct Module;  // the loaded module's entry points (tokenizer.cc)
  enum class Kind { kIdsOnly, kSentencePiece, kJson };
  // DIR/tokenizer.json when present, else DIR/tokenizer.model through SentencePiece when possible;
  // otherwise ids only (reason() says why). Fails when a tokenizer.json is malformed or unsupported,
  // when a tokenizer.model exists and SentencePiece rejects it (a corrupt file), or when the
  // tokenizer has more tokens than the model's vocab_size.
  static StatusOr<std::unique_ptr<Tokenizer>> ForModelDir(const std::string& dir, int64_t vocab_size);
  // DIR's tokenizer (tokenizer.json, else tokenizer.model) with no model config: NotFound when the
  // directory has neither file, Unavailable when only tokenizer.model exists and SentencePiece is missing.
  static StatusOr<std::unique_ptr<Tokenizer>> FromDir(const std::string& dir);
  // A tokenizer.json file (tokenizer_config.json beside it is read too); InvalidArgument naming the
  // field when the file is malformed or uses something opfuse does not implement.
  static StatusOr<std::unique_ptr<Tokenizer>> LoadJson(const std::string& path);
  // A SentencePiece model file; Unavailable when the module/library is missing, InvalidArgument
  // when the file is not a SentencePiece model.
  static StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& path);
  static std::unique_ptr<Tokenizer> IdsOnly(int64_t vocab_size, std::string reason);
  ~Tokenizer();

  Kind kind() const { return json_ ? Kind::kJson : handle_ ? Kind::kSentencePiece : Kind::kIdsOnly; }
  bool has_text() const { return kind() != Kind::kIdsOnly; }
  const std::string& reason() const { return reason_; }  // why ids only ("" when has_text())
  int64_t vocab_size() const { return vocab_size_; }
  std::optional<int64_t> bos_id() const { return bos_; }
  std::optional<int64_t> eos_id() const { return eos_; }
  // The BOS to put before a prompt's ids. A tokenizer.json decides itself (tokenizer_config.json's
  // add_bos_token, else its TemplateProcessing post-processor: Llama-3 yes, Qwen2 no); nullopt means
  // none. For SentencePiece it is bos_id() (Llama's SentencePiece tokenizer adds its BOS); callers
  // that have their own rule there (generate: config.json's bos_token_id) check kind() first.
  std::optional<int64_t> prepend_bos() const { return kind() == Kind::kJson ? json_bos_ : bos_; }

  StatusOr<std::vector<int64_t>> Encode(std::string_view text) const;  // no BOS added
  StatusOr<std::string> Decode(const std::vector<int64_t>& ids) const;
  // Each id's token as the tokenizer stores it (tokenizer.json: the vocabulary string, e.g. "Ġthe";
  // SentencePiece: the id decoded on its own, since the module exposes no piece table).
  StatusOr<std::vector<std::string>> TokenStrings(const std::vector<int64_t>& ids) const;

  // "1,2, 3" -> {1, 2, 3}; every id must be in [0, vocab_size). Errors name the bad entry.
  static StatusOr<std::vector<int64_t>> ParseIds(std::string_view text, int64_t vocab_size);
  static std::string FormatIds(const std::vector<int64_t>& ids);  // "1,2,3"

 private:
  Tokenizer() = default;
  const Module* module_ = nullptr;
  void* handle_ = nullptr;
  std::unique_ptr<JsonBpeTokenizer> json_;
  int64_t vocab_size_ = 0;
  std::optional<int64_t> bos_, eos_, json_bos_;
  std::string reason_;
};

}  // namespace opfuse
