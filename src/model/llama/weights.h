// The tensors a Llama-family checkpoint must hold for a given LlamaConfig (HF names and shapes),
// the check of a loaded directory against them, and deterministic random weights for
// `opfuse init-weights` and runs without a model directory.
//
// Names follow transformers' {Llama,Mistral,Qwen2,Qwen3}ForCausalLM state dict:
//   model.embed_tokens.weight [vocab, hidden]
//   model.layers.N.input_layernorm.weight, .post_attention_layernorm.weight [hidden]
//   model.layers.N.self_attn.{q,k,v,o}_proj.weight  (Linear: [out, in]); {q,k,v}_proj.bias with
//     attention_bias, o_proj.bias with o_proj_bias; self_attn.{q,k}_norm.weight [head_dim] (Qwen3)
//   model.layers.N.mlp.{gate,up}_proj.weight [intermediate, hidden], down_proj.weight [hidden, intermediate]
//     (+ .bias of each with mlp_bias)
//   model.norm.weight [hidden]; lm_head.weight [vocab, hidden] unless tie_word_embeddings.
// The check reports every problem at once (missing, wrong shape, wrong dtype, unexpected), up to a
// limit, so one run tells the user what is wrong with a checkpoint.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/llama/config.h"
#include "model/safetensors.h"

namespace opfuse::llama {

enum class WeightInit { kNormal, kOnes, kZeros };

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  WeightInit init = WeightInit::kNormal;
};

std::vector<ExpectedTensor> ExpectedTensors(const LlamaConfig& c);

// The float dtype a config's torch_dtype names (float32 → F32, float16 → F16, bfloat16 → BF16);
// when the config names none, the dtype of `dir`'s weights (F32 without a directory).
StDType ConfigStDType(const LlamaConfig& c, const SafetensorsDir* dir = nullptr);

// Checks a loaded directory against ExpectedTensors(c): every expected tensor present with the
// exact shape and a float dtype, all weights in one dtype, nothing unexpected (a tied lm_head.weight
// of the right shape and the legacy rotary_emb.inv_freq buffers are accepted). InvalidArgument lists
// the problems ("3 problems: missing 'model.norm.weight'; ...").
Status CheckWeights(const LlamaConfig& c, const SafetensorsDir& dir);

// Writes DIR/config.json and DIR/model.safetensors with deterministic random weights: a normal
// distribution with std 0.02 (HF's initializer_range) for matrices, embeddings and biases, ones
// for norms. The values depend only on (seed, tensor name, element index), not on the order of
// writing. `progress(done_bytes, total_bytes)` is called after each tensor when set.
// The caller owns atomicity of the directory (see cli_init_weights.cc); the safetensors file itself
// is written atomically.
// The bytes WriteRandomWeights writes for tensor `e` (out.size() = its element count x the dtype
// size; dtype F32, F16 or BF16). The engine uses it for built-in configs without a directory.
// Large tensors are filled on `threads` threads (0: one per hardware thread, at least 1M elements
// each); the bytes are the same for every thread count (each thread starts its generator where a
// single one would be at its first element).
void FillRandomTensor(const ExpectedTensor& e, uint64_t seed, StDType dtype, std::span<uint8_t> out, int threads = 0);

Status WriteRandomWeights(const LlamaConfig& c, const std::string& dir, uint64_t seed, StDType dtype,
                          const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace opfuse::llama
