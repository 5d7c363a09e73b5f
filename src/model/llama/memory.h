// What an engine will hold, estimated before anything is allocated (issue 28): weights, KV cache,
// RoPE tables and activations, for a config, dtype, batch and context. Computed in double, so no
// config or flag value can overflow it. Engine::Create compares it with what the host and the
// device have and refuses a request that cannot fit (exit 2, naming the knob to turn) instead of
// failing in an allocation minutes later.
#pragma once
#include <cstdint>
#include <string>

#include "model/llama/config.h"
#include "opfuse/graph.h"
#include "opfuse/status.h"

namespace opfuse::llama {

// The context an engine uses when --max-context is not given: the model's max_position_embeddings,
// capped here (a 131072-position config would otherwise reserve a full-length KV cache).
inline constexpr int64_t kDefaultContextCap = 8192;

// Sequences one engine decodes together at most: the attention kernels put sequences x kv heads in
// a grid dimension (< 65536), and a larger batch is far past any memory budget anyway.
inline constexpr int64_t kMaxBatch = 4096;

// The context of a run: --max-context when given (> 0), else min(max_position_embeddings, the cap).
inline int64_t ContextFor(const LlamaConfig& c, int64_t max_context) {
  return max_context > 0 ? max_context : (c.max_position_embeddings < kDefaultContextCap ? c.max_position_embeddings
                                                                                          : kDefaultContextCap);
}

struct MemoryEstimate {
  double weights = 0;      // parameters in the engine's dtype
  double kv_cache = 0;     // 2 x layers x batch x context x kv_dim
  double rope = 0;         // cos/sin tables [context, head_dim]
  double activations = 0;  // a prefill of `context` tokens (one layer live at a time) + batch rows of logits
  double total() const { return weights + kv_cache + rope + activations; }
  // "4.2 GiB (weights 2.1 GiB, KV cache 1.9 GiB for context 8192 x batch 1, ...)"
  std::string Describe(int64_t context, int64_t batch) const;
};

MemoryEstimate EstimateMemory(const LlamaConfig& c, DType dtype, int64_t batch, int64_t context);

// Fits `needed` bytes into `available` (where: "the host" / "the GPU"), or InvalidArgument naming the
// estimate and the flags that shrink it. A small margin is kept for workspaces and the runtime.
Status CheckFits(const MemoryEstimate& e, double needed, double available, const std::string& where, int64_t context,
                 int64_t batch);

// MemAvailable from /proc/meminfo in bytes (0 when it cannot be read: no check then).
double HostAvailableBytes();

std::string Bytes(double b);  // "1.5 GiB", "300 MiB"

}  // namespace opfuse::llama
