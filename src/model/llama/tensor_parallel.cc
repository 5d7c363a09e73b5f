// Tensor-parallel sharding of Llama-family weights (see tensor_parallel.h).
#include "model/llama/tensor_parallel.h"

#include <cstring>

#include <fmt/format.h>

namespace opfuse::llama {

namespace {

// The one table: a tensor name's suffix and how it splits; anything not listed is replicated.
struct ShardRow {
  const char* suffix;
  ShardKind kind;
};
constexpr ShardRow kShardTable[] = {
    {"self_attn.q_proj.weight", ShardKind::kRows},  {"self_attn.q_proj.bias", ShardKind::kRows},
    {"self_attn.k_proj.weight", ShardKind::kKvRows}, {"self_attn.k_proj.bias", ShardKind::kKvRows},
    {"self_attn.v_proj.weight", ShardKind::kKvRows}, {"self_attn.v_proj.bias", ShardKind::kKvRows},
    {"self_attn.o_proj.weight", ShardKind::kCols},  {"self_attn.o_proj.bias", ShardKind::kFirstRank},
    {"mlp.gate_proj.weight", ShardKind::kRows},     {"mlp.gate_proj.bias", ShardKind::kRows},
    {"mlp.up_proj.weight", ShardKind::kRows},       {"mlp.up_proj.bias", ShardKind::kRows},
    {"mlp.down_proj.weight", ShardKind::kCols},     {"mlp.down_proj.bias", ShardKind::kFirstRank},
    {"lm_head.weight", ShardKind::kRows},
};

// The [begin, end) rows of dim 0 rank `tp` holds of a tensor of `rows` rows.
std::pair<int64_t, int64_t> RowRange(const LlamaConfig& c, ShardKind k, int64_t rows, const TensorParallel& tp) {
  if (k == ShardKind::kKvRows && c.num_key_value_heads < tp.world) {
    const int64_t per_head = rows / c.num_key_value_heads;  // head_dim rows of a weight, or of a bias
    const int64_t head = tp.rank / (tp.world / c.num_key_value_heads);
    return {head * per_head, (head + 1) * per_head};
  }
  const int64_t part = rows / tp.world;
  return {tp.rank * part, (tp.rank + 1) * part};
}

HostTensor Shard(const LlamaConfig& c, ShardKind k, const HostTensor& full, const TensorParallel& tp) {
  if (k == ShardKind::kReplicated || tp.world == 1) return full;
  const size_t es = static_cast<size_t>(DTypeSize(full.dtype));
  if (k == ShardKind::kFirstRank) {
    HostTensor t(full.dtype, full.shape);  // zeros
    if (tp.rank == 0) t.data = full.data;
    return t;
  }
  if (k == ShardKind::kCols) {
    const int64_t rows = full.shape[0], cols = full.shape[1], part = cols / tp.world;
    HostTensor t(full.dtype, {rows, part});
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(t.data.data() + r * part * es, full.data.data() + (r * cols + tp.rank * part) * es, part * es);
    return t;
  }
  const int64_t rows = full.shape[0];
  const int64_t inner = rows ? full.numel() / rows : 0;
  const auto [b, e] = RowRange(c, k, rows, tp);
  std::vector<int64_t> shape = full.shape;
  shape[0] = e - b;
  HostTensor t(full.dtype, shape);
  std::memcpy(t.data.data(), full.data.data() + b * inner * es, (e - b) * inner * es);
  return t;
}

std::vector<int64_t> ShardShape(const LlamaConfig& c, ShardKind k, std::vector<int64_t> shape, int64_t world) {
  if (world == 1) return shape;
  switch (k) {
    case ShardKind::kRows: shape[0] /= world; break;
    case ShardKind::kKvRows: shape[0] = shape[0] / c.num_key_value_heads * LocalKvHeads(c, world); break;
    case ShardKind::kCols: shape[1] /= world; break;
    case ShardKind::kReplicated: case ShardKind::kFirstRank: break;
  }
  return shape;
}

}  // namespace

ShardKind ShardKindOf(const std::string& name) {
  for (const ShardRow& r : kShardTable)
    if (name.ends_with(r.suffix)) return r.kind;
  return ShardKind::kReplicated;
}

Status CheckTensorParallel(const LlamaConfig& c, int64_t world) {
  if (world < 1) return InvalidArgument(fmt::format("--tensor-parallel must be >= 1, got {}", world));
  auto multiple = [&](const char* what, int64_t v) -> Status {
    if (v % world == 0) return Status::Ok();
    return InvalidArgument(fmt::format("--tensor-parallel {}: {} {} is not a multiple of {}", world, what, v, world));
  };
  OPFUSE_RETURN_IF_ERROR(multiple("num_attention_heads", c.num_attention_heads));
  if (c.num_key_value_heads % world != 0 && world % c.num_key_value_heads != 0)
    return InvalidArgument(fmt::format("--tensor-parallel {}: num_key_value_heads {} neither divides nor is a multiple of {}",
                                       world, c.num_key_value_heads, world));
  OPFUSE_RETURN_IF_ERROR(multiple("intermediate_size", c.intermediate_size));
  OPFUSE_RETURN_IF_ERROR(multiple("vocab_size", c.vocab_size));
  return Status::Ok();
}

int64_t LocalHeads(const LlamaConfig& c, int64_t world) { return c.num_attention_heads / world; }
int64_t LocalKvHeads(const LlamaConfig& c, int64_t world) {
  return c.num_key_value_heads >= world ? c.num_key_value_heads / world : 1;
}

std::string HeadWeightName(const LlamaConfig& c, int64_t world) {
  return c.tie_word_embeddings && world == 1 ? "model.embed_tokens.weight" : "lm_head.weight";
}

std::vector<ExpectedTensor> RankTensors(const LlamaConfig& c, int64_t world) {
  std::vector<ExpectedTensor> out = ExpectedTensors(c);
  for (auto& e : out) e.shape = ShardShape(c, ShardKindOf(e.name), e.shape, world);
  if (c.tie_word_embeddings && world > 1)
    out.push_back({"lm_head.weight", {c.vocab_size / world, c.hidden_size}, WeightInit::kNormal});
  return out;
}

std::map<std::string, HostTensor> ShardParams(const LlamaConfig& c, const std::map<std::string, HostTensor>& full,
                                              const TensorParallel& tp) {
  std::map<std::string, HostTensor> out;
  for (const auto& [name, t] : full) out[name] = Shard(c, ShardKindOf(name), t, tp);
  if (c.tie_word_embeddings && tp.world > 1)
    out["lm_head.weight"] = Shard(c, ShardKind::kRows, full.at("model.embed_tokens.weight"), tp);
  return out;
}

}  // namespace opfuse::llama
