// libFuzzer target for the model config reader (src/model/llama/config.h; asan preset).
//
// Feeds arbitrary bytes to ParseConfigText. It must never crash, hang or trip ASan/UBSan; a rejection
// is InvalidArgument with one line; an accepted config passes ValidateConfig's bounds (every size
// positive and bounded, so the engine's shape arithmetic cannot overflow) and its memory estimate is
// finite for any context the config allows.
// Seeds: tests/fuzz/corpus_fuzz_config_json/ (the committed configs of both transformers generations).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "model/llama/config.h"
#include "model/llama/memory.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto c = opfuse::llama::ParseConfigText(text);
  if (!c.ok()) {
    const std::string& m = c.status().message();
    if (c.status().code() != opfuse::StatusCode::kInvalidArgument || m.find('\n') != std::string::npos) {
      std::fprintf(stderr, "bad rejection: %s\n", c.status().ToString().c_str());
      std::abort();
    }
    return 0;
  }
  if (c->hidden_size <= 0 || c->num_hidden_layers <= 0 || c->vocab_size <= 0 || c->head_dim <= 0 ||
      c->max_position_embeddings <= 0) {
    std::fprintf(stderr, "accepted a config with a non-positive size\n");
    std::abort();
  }
  const int64_t context = opfuse::llama::ContextFor(*c, 0);
  const auto e = opfuse::llama::EstimateMemory(*c, opfuse::DType::kBF16, 1, context);
  if (!std::isfinite(e.total()) || e.total() <= 0 || !opfuse::llama::CheckContext(*c, context).ok()) std::abort();
  return 0;
}
