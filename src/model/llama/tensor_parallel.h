// Megatron-style tensor parallelism of a Llama-family model (docs/tensor_parallel.md): how each
// tensor of the checkpoint is split over `world` ranks, and the checks that a config splits.
//
// Design note: every rank runs the same graph (graph_builder.h with GraphOptions::tp) on its own
// shard, so the compiler sees one ordinary graph per rank with the communication as ops
// (all_reduce, all_gather). The split, per layer:
//   q_proj, gate_proj, up_proj        column-parallel: rows of the [out, in] weight (and the bias)
//   k_proj, v_proj                    by KV head: rows of whole heads; with fewer KV heads than
//                                     ranks, each head is replicated on world / Hkv ranks (rank r
//                                     holds head r / (world / Hkv)), as its query heads need it
//   o_proj, down_proj                 row-parallel: columns of the weight; the partial outputs are
//                                     summed by all_reduce before the residual add; a bias (o_proj,
//                                     MLP) is held by rank 0 only (zeros elsewhere), so the sum adds it once
//   lm_head (or the tied embedding)   vocabulary-parallel: rows; the logits are all_gathered
//   embeddings, norms, q/k norms      replicated
// The KV cache follows the KV heads (each rank caches its own). One table (ShardKindOf) says which
// tensor splits how; the shapes, the weights and the graph are all derived from it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/host_tensor.h"
#include "model/llama/config.h"
#include "model/llama/weights.h"

namespace opfuse::llama {

struct TensorParallel {
  int64_t rank = 0;
  int64_t world = 1;
};

enum class ShardKind {
  kReplicated,  // every rank holds the whole tensor
  kRows,        // dim 0 split in `world` equal parts
  kKvRows,      // dim 0 split by KV head (replicated heads when world > num_key_value_heads)
  kCols,        // dim 1 split in `world` equal parts
  kFirstRank,   // rank 0 holds it, the others zeros (row-parallel biases)
};
ShardKind ShardKindOf(const std::string& name);

// Ok when `c` splits over `world` ranks: heads a multiple of world, KV heads a multiple or a
// divisor of it, intermediate_size and vocab_size multiples of it. InvalidArgument naming the first
// quantity that does not ("--tensor-parallel 3: num_attention_heads 32 is not a multiple of 3").
Status CheckTensorParallel(const LlamaConfig& c, int64_t world);

int64_t LocalHeads(const LlamaConfig& c, int64_t world);    // query heads per rank
int64_t LocalKvHeads(const LlamaConfig& c, int64_t world);  // KV heads per rank (>= 1)

// The name of the LM head's weight in a rank's graph: lm_head.weight, also when the embeddings are
// tied and world > 1 (the rank's vocabulary rows of model.embed_tokens.weight); with world 1 and
// tied embeddings, model.embed_tokens.weight itself.
std::string HeadWeightName(const LlamaConfig& c, int64_t world);

// The params of rank `tp.rank`'s graph: every tensor of ExpectedTensors(c) with its shard shape,
// plus the tied head's own lm_head.weight where HeadWeightName says so.
std::vector<ExpectedTensor> RankTensors(const LlamaConfig& c, int64_t world);

// Rank `tp.rank`'s params from the full ones (every tensor of ExpectedTensors(c), plus anything
// else — the RoPE tables — which is replicated). The full map is left as it was.
std::map<std::string, HostTensor> ShardParams(const LlamaConfig& c, const std::map<std::string, HostTensor>& full,
                                              const TensorParallel& tp);

}  // namespace opfuse::llama
