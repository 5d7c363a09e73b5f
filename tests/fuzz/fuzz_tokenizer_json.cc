// libFuzzer target for the tokenizer.json reader and its encoder (built by the asan preset:
// OPFUSE_FUZZ=ON).
//
// An input that starts with '{' is a whole tokenizer.json: it is loaded, and when accepted, a few
// fixed strings are encoded and their ids decoded again. Any other input is text, encoded and
// decoded by each committed fixture tokenizer (tests/data/tokenizers/, found from this file's
// path). Nothing may crash, hang or trip ASan/UBSan; every rejection is one line; every id an
// accepted encode returns names a token (decode must accept it).
// Seeds: tests/fuzz/corpus_fuzz_tokenizer_json/ (the fixtures' tokenizer.json files and texts).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer_json.h"

namespace {

void CheckOneLine(const opfuse::Status& s) {
  if (!s.ok() && s.message().find('\n') != std::string::npos) {
    std::fprintf(stderr, "multi-line error: %s\n", s.message().c_str());
    std::abort();
  }
}

void RoundTrip(const opfuse::JsonBpeTokenizer& t, std::string_view text) {
  auto ids = t.Encode(text);
  CheckOneLine(ids.status());
  if (!ids.ok()) return;
  for (int32_t id : *ids)
    if (id < 0 || id >= t.vocab_size() || !t.IdToToken(id)) std::abort();
  auto back = t.Decode(*ids);
  CheckOneLine(back.status());
}

const std::vector<std::unique_ptr<opfuse::JsonBpeTokenizer>>& Fixtures() {
  static const auto* fixtures = [] {
    auto* v = new std::vector<std::unique_ptr<opfuse::JsonBpeTokenizer>>();
    std::string dir = __FILE__;
    dir = dir.substr(0, dir.rfind('/')) + "/../data/tokenizers/";
    for (const char* name : {"llama3_bpe", "qwen2_bpe", "spm_bpe", "metaspace_bpe", "misc_bpe"}) {
      auto t = opfuse::JsonBpeTokenizer::Load(dir + name + "/tokenizer.json");
      if (!t.ok()) {
        std::fprintf(stderr, "fixture %s: %s\n", name, t.status().message().c_str());
        std::abort();
      }
      v->push_back(std::move(*t));
    }
    return v;
  }();
  return *fixtures;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  if (!in.empty() && in[0] == '{') {
    auto t = opfuse::JsonBpeTokenizer::FromStrings(in);
    CheckOneLine(t.status());
    if (!t.ok()) return 0;
    for (const char* s : {"Hello, world!", "  DON'T 12345\r\n", "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x99\x82", ""})
      RoundTrip(**t, s);
    return 0;
  }
  for (const auto& t : Fixtures()) RoundTrip(*t, in);
  return 0;
}
