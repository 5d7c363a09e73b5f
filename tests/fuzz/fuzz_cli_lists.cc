// libFuzzer target for the CLI's list parsers that live in the library (asan preset):
// `bench e2e --cases` (bench::ParseE2eCases) and `--ids` (Tokenizer::ParseIds).
//
// The input is split at the first NUL-free '|' into a --cases text and an --ids text. Nothing may
// crash, hang or trip ASan/UBSan; every rejection is InvalidArgument with one line; an accepted case
// has prefill >= 1 and batch >= 1 and a label that parses back to the same case; accepted ids are
// in [0, vocab).
// Seeds: tests/fuzz/corpus_fuzz_cli_lists/.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/e2e_cases.h"
#include "model/tokenizer.h"

namespace {
void CheckRejection(const opfuse::Status& s) {
  if (s.code() != opfuse::StatusCode::kInvalidArgument || s.message().find('\n') != std::string::npos) {
    std::fprintf(stderr, "bad rejection: %s\n", s.ToString().c_str());
    std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const size_t bar = all.find('|');
  const std::string cases_text = all.substr(0, bar), ids_text = bar == std::string::npos ? "" : all.substr(bar + 1);

  auto cases = opfuse::bench::ParseE2eCases({cases_text});
  if (!cases.ok()) {
    CheckRejection(cases.status());
  } else {
    for (const auto& c : *cases) {
      if (c.prefill < 1 || c.batch < 1 || c.decode < 0) std::abort();
      auto again = opfuse::bench::ParseE2eCase(c.label);
      if (!again.ok() || again->prefill != c.prefill || again->decode != c.decode || again->batch != c.batch ||
          again->label != c.label) {
        std::fprintf(stderr, "label does not parse back: %s\n", c.label.c_str());
        std::abort();
      }
    }
  }

  constexpr int64_t kVocab = 32000;
  auto ids = opfuse::Tokenizer::ParseIds(ids_text, kVocab);
  if (!ids.ok()) {
    CheckRejection(ids.status());
  } else {
    for (int64_t id : *ids)
      if (id < 0 || id >= kVocab) std::abort();
  }
  return 0;
}
