// Tokenizer: text <-> token ids for a model directory, via SentencePiece (`tokenizer.model`), with
// token ids in and out always available.
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

class Tokenizer {
 public:
  struct Module;  // the loaded module's entry points (tokenizer.cc)
  // DIR/tokenizer.model through SentencePiece when possible; otherwise ids only (reason() says why).
  // Fails only when a tokenizer.model exists and SentencePiece rejects it (a corrupt file).
  static StatusOr<std::unique_ptr<Tokenizer>> ForModelDir(const std::string& dir, int64_t vocab_size);
  // A SentencePiece model file; Unavailable when the module/library is missing, InvalidArgument
  // when the file is not a SentencePiece model.
  static StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& path);
  static std::unique_ptr<Tokenizer> IdsOnly(int64_t vocab_size, std::string reason);
  ~Tokenizer();

  bool has_text() const { return handle_ != nullptr; }
  const std::string& reason() const { return reason_; }  // why ids only ("" when has_text())
  int64_t vocab_size() const { return vocab_size_; }
  std::optional<int64_t> bos_id() const { return bos_; }
  std::optional<int64_t> eos_id() const { return eos_; }

  StatusOr<std::vector<int64_t>> Encode(std::string_view text) const;  // no BOS added
  StatusOr<std::string> Decode(const std::vector<int64_t>& ids) const;

  // "1,2, 3" -> {1, 2, 3}; every id must be in [0, vocab_size). Errors name the bad entry.
  static StatusOr<std::vector<int64_t>> ParseIds(std::string_view text, int64_t vocab_size);
  static std::string FormatIds(const std::vector<int64_t>& ids);  // "1,2,3"

 private:
  Tokenizer() = default;
  const Module* module_ = nullptr;
  void* handle_ = nullptr;
  int64_t vocab_size_ = 0;
  std::optional<int64_t> bos_, eos_;
  std::string reason_;
};

}  // namespace opfuse
