// The Llama-family model as an opfuse Graph: one prefill graph (B sequences of T new tokens) and
// one decode graph (T = 1), written in primitives the way a framework traces the model.
//
// Design note: the engine is a client of the compiler (DESIGN.md "Llama-family engine"), so this
// file emits exactly what torch would trace from transformers' LlamaForCausalLM and leaves every
// fusion decision to the pipeline: RMSNorm is mul/mean/add/rsqrt/mul(/mul weight), RoPE is
// slice/neg/concat/mul/add with cos and sin gathered by `embedding` from tables indexed by
// position ids (positions are graph inputs — device memory at run time — never constants), SwiGLU
// is silu*mul, and each residual add is followed by the next norm (the Add+RMSNorm shape). Linear
// layers are matmul(x, W) {transpose_b=1} on the Hugging Face [out, in] weights, with the bias as
// matmul's third operand where the config has one (Qwen2). Attention is `kv_attention`, which
// appends the new K/V to the per-layer cache (state inputs) and attends causally over absolute
// positions, GQA included. Only the last token of each sequence reaches the final projection: the
// normed hidden states are gathered by `embedding` with `last_index` (b*T + len_b - 1), which
// also handles right-padded batches. Weights are params named by their HF tensor names; tied
// embeddings use model.embed_tokens.weight for the LM head.
//
// Graph interface (names are the contract with the engine):
//   inputs  input_ids [B,T] i32; position_ids [B,T] i32 (prefill only; decode uses cache_pos);
//           cache_pos [B] i32 (tokens already cached per sequence); last_index [B] i32 (prefill
//           only); past.N.key / past.N.value [B,S,Hkv,D] per layer (state: written in place)
//   params  every HF tensor of ExpectedTensors(config); rope.cos / rope.sin [S, D] (RopeTables)
//   outputs logits [B, vocab] f32; next_token [B, 1] i32 (argmax, when with_argmax)
// With tensor parallelism (GraphOptions::tp) the interface is the same but for the params (each
// rank's shards) and the caches' head count; the logits are the whole vocabulary on every rank.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/llama/config.h"
#include "model/llama/tensor_parallel.h"
#include "opfuse/graph.h"

namespace opfuse::llama {

struct GraphOptions {
  int64_t batch = 1;
  // Prefill: a fixed token count, or the symbol "T" when unset. Decode ignores it (T = 1).
  std::optional<int64_t> tokens;
  int64_t cache_len = 0;     // S: positions the KV cache holds (0: max_position_embeddings)
  DType dtype = DType::kF32;  // weights, activations and cache
  bool with_argmax = false;   // add the next_token output (greedy decoding on the device)
  // Tensor parallelism: the graph of rank tp.rank of tp.world (tensor_parallel.h). Its params are
  // RankTensors' shards, its caches hold LocalKvHeads heads, o_proj's and down_proj's outputs are
  // all_reduced before the residual add, and the vocabulary-parallel logits are all_gathered.
  TensorParallel tp;
};

StatusOr<Graph> BuildPrefillGraph(const LlamaConfig& c, const GraphOptions& o);
StatusOr<Graph> BuildDecodeGraph(const LlamaConfig& c, const GraphOptions& o);

// Names of the per-layer cache inputs.
std::string CacheKeyName(int64_t layer);
std::string CacheValueName(int64_t layer);
inline constexpr const char* kRopeCos = "rope.cos";
inline constexpr const char* kRopeSin = "rope.sin";

// The RoPE tables for positions [0, positions): cos and sin of position * inv_freq, each
// [positions, head_dim] in rotate-half layout (the frequencies repeated twice), computed in f32
// exactly as transformers' LlamaRotaryEmbedding does (linear, llama3 and yarn scaling applied to
// inv_freq, yarn's attention factor to the tables), row-major. The caller rounds them to the model dtype.
struct RopeTables {
  std::vector<float> cos, sin;
};
RopeTables ComputeRopeTables(const LlamaConfig& c, int64_t positions);
// inv_freq [head_dim / 2] after rope scaling (exposed for tests).
std::vector<float> RopeInvFreq(const LlamaConfig& c);
// The factor transformers multiplies cos and sin by (yarn's attention_factor; 1 otherwise).
float RopeAttentionScaling(const LlamaConfig& c);

}  // namespace opfuse::llama
