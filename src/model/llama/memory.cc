#include "model/llama/memory.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace opfuse::llama {

std::string Bytes(double b) {
  if (b >= 1024.0 * 1024 * 1024 * 1024) return fmt::format("{:.1f} TiB", b / (1024.0 * 1024 * 1024 * 1024));
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.1f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.0f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.0f} KiB", b / 1024.0);
}

MemoryEstimate EstimateMemory(const LlamaConfig& c, DType dtype, int64_t batch, int64_t context) {
  const double es = static_cast<double>(DTypeSize(dtype));
  const double h = static_cast<double>(c.hidden_size), q = static_cast<double>(c.num_attention_heads) * c.head_dim,
               kv = static_cast<double>(c.num_key_value_heads) * c.head_dim, f = static_cast<double>(c.intermediate_size),
               L = static_cast<double>(c.num_hidden_layers), V = static_cast<double>(c.vocab_size);
  const double B = static_cast<double>(batch), S = static_cast<double>(context);
  MemoryEstimate e;
  double per_layer = h * q + 2 * h * kv + q * h + 3 * h * f + 2 * h + q + 2 * kv + 2 * f + 2 * h;  // biases counted
  e.weights = es * (L * per_layer + V * h * (c.tie_word_embeddings ? 1 : 2) + h);
  e.kv_cache = es * 2 * L * B * S * kv;
  e.rope = 2 * S * static_cast<double>(c.head_dim) * (es + 8);  // the tables and their f64 source
  // A prefill of S tokens keeps about one layer's values live (the executors free or reuse dead
  // values), held in f32 where a kernel accumulates; decode adds batch rows of f32 logits.
  const double per_token = 4 * h + 2 * q + 4 * kv + 3 * f;
  e.activations = 4 * S * per_token + 4 * B * (V + per_token);
  return e;
}

std::string MemoryEstimate::Describe(int64_t context, int64_t batch) const {
  return fmt::format("{} (weights {}, KV cache {} for context {} x batch {}, activations {})", Bytes(total()),
                     Bytes(weights), Bytes(kv_cache), context, batch, Bytes(activations + rope));
}

Status CheckFits(const MemoryEstimate& e, double needed, double available, const std::string& where, int64_t context,
                 int64_t batch) {
  if (available <= 0) return Status::Ok();  // unknown: nothing to compare with
  // 5% and 256 MiB of headroom: workspaces, the CUDA context, the allocator's rounding.
  const double budget = available * 0.95 - 256.0 * 1024 * 1024;
  if (needed <= budget) return Status::Ok();
  return InvalidArgument(fmt::format(
      "not enough memory: this run needs about {} on {}, which has {} available; estimate {}; "
      "lower --max-context or --batch (or use a smaller --dtype)",
      Bytes(needed), where, Bytes(available), e.Describe(context, batch)));
}

double HostAvailableBytes() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream ss(line.substr(13));
      double kb = 0;
      if (ss >> kb) return kb * 1024.0;
    }
  }
  return 0;
}

}  // namespace opfuse::llama
