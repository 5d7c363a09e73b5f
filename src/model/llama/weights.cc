// Expected tensors of a Llama-family checkpoint, the directory check, and the random-weight writer.
#include "model/llama/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "ir/host_tensor.h"

namespace opfuse::llama {

std::vector<ExpectedTensor> ExpectedTensors(const LlamaConfig& c) {
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), ff = c.intermediate_size;
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, WeightInit::kNormal});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    out.push_back({p + "input_layernorm.weight", {h}, WeightInit::kOnes});
    out.push_back({p + "self_attn.q_proj.weight", {q, h}, WeightInit::kNormal});
    out.push_back({p + "self_attn.k_proj.weight", {kv, h}, WeightInit::kNormal});
    out.push_back({p + "self_attn.v_proj.weight", {kv, h}, WeightInit::kNormal});
    if (c.attention_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q}, WeightInit::kNormal});
      out.push_back({p + "self_attn.k_proj.bias", {kv}, WeightInit::kNormal});
      out.push_back({p + "self_attn.v_proj.bias", {kv}, WeightInit::kNormal});
    }
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, WeightInit::kOnes});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, WeightInit::kOnes});
    }
    out.push_back({p + "self_attn.o_proj.weight", {h, q}, WeightInit::kNormal});
    if (c.o_proj_bias) out.push_back({p + "self_attn.o_proj.bias", {h}, WeightInit::kNormal});
    out.push_back({p + "post_attention_layernorm.weight", {h}, WeightInit::kOnes});
    out.push_back({p + "mlp.gate_proj.weight", {ff, h}, WeightInit::kNormal});
    out.push_back({p + "mlp.up_proj.weight", {ff, h}, WeightInit::kNormal});
    out.push_back({p + "mlp.down_proj.weight", {h, ff}, WeightInit::kNormal});
    if (c.mlp_bias) {
      out.push_back({p + "mlp.gate_proj.bias", {ff}, WeightInit::kNormal});
      out.push_back({p + "mlp.up_proj.bias", {ff}, WeightInit::kNormal});
      out.push_back({p + "mlp.down_proj.bias", {h}, WeightInit::kNormal});
    }
  }
  out.push_back({"model.norm.weight", {h}, WeightInit::kOnes});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}, WeightInit::kNormal});
  return out;
}

StDType ConfigStDType(const LlamaConfig& c, const SafetensorsDir* dir) {
  if (c.torch_dtype == "bfloat16") return StDType::kBF16;
  if (c.torch_dtype == "float16") return StDType::kF16;
  if (c.torch_dtype.empty() && dir) {
    // No dtype in the file: the checkpoint's own (CheckWeights ensures one float dtype), as
    // transformers 5's default dtype="auto" does.
    if (const auto* t = dir->Find("model.embed_tokens.weight"); t && t->info) return t->info->dtype;
  }
  return StDType::kF32;
}

namespace {
std::string ShapeStr(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }
bool IsFloatSt(StDType t) { return t == StDType::kF32 || t == StDType::kF16 || t == StDType::kBF16; }
}  // namespace

Status CheckWeights(const LlamaConfig& c, const SafetensorsDir& dir) {
  std::vector<std::string> problems;
  std::set<std::string> expected_names;
  std::map<StDType, std::string> dtypes_seen;  // dtype -> one tensor having it
  for (const auto& e : ExpectedTensors(c)) {
    expected_names.insert(e.name);
    const auto* t = dir.Find(e.name);
    if (!t) {
      problems.push_back(fmt::format("missing '{}' {}", e.name, ShapeStr(e.shape)));
      continue;
    }
    if (t->info->shape != e.shape)
      problems.push_back(fmt::format("'{}' has shape {}, expected {}", e.name, ShapeStr(t->info->shape), ShapeStr(e.shape)));
    if (!IsFloatSt(t->info->dtype))
      problems.push_back(fmt::format("'{}' has dtype {}, expected F32, F16 or BF16", e.name, StDTypeName(t->info->dtype)));
    else
      dtypes_seen.emplace(t->info->dtype, e.name);
  }
  for (const auto& [name, entry] : dir.tensors()) {
    if (expected_names.count(name)) continue;
    if (name.ends_with(".rotary_emb.inv_freq")) continue;  // a buffer older transformers saved; recomputed
    if (name == "lm_head.weight" && c.tie_word_embeddings) {
      if (entry.info->shape != std::vector<int64_t>{c.vocab_size, c.hidden_size})
        problems.push_back(fmt::format("'lm_head.weight' (tied) has shape {}, expected [{}, {}]", ShapeStr(entry.info->shape),
                                       c.vocab_size, c.hidden_size));
      continue;
    }
    problems.push_back(fmt::format("unexpected tensor '{}' {}", name, ShapeStr(entry.info->shape)));
  }
  if (dtypes_seen.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [d, n] : dtypes_seen) parts.push_back(fmt::format("{} (e.g. '{}')", StDTypeName(d), n));
    problems.push_back(fmt::format("mixed weight dtypes: {}", fmt::join(parts, ", ")));
  }
  if (problems.empty()) return Status::Ok();
  constexpr size_t kMaxListed = 8;
  std::string msg = fmt::format("weights do not match the config: {} problem{}: ", problems.size(), problems.size() == 1 ? "" : "s");
  for (size_t i = 0; i < problems.size() && i < kMaxListed; ++i) msg += (i ? "; " : "") + problems[i];
  if (problems.size() > kMaxListed) msg += fmt::format("; and {} more", problems.size() - kMaxListed);
  return InvalidArgument(msg);
}

namespace {

// SplitMix64: a tiny, fast, well-mixed generator; seeded per tensor from (seed, name hash). Its
// state moves by a constant per draw, so Skip(k) is where it would be k draws later.
struct SplitMix64 {
  static constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;
  uint64_t s;
  void Skip(uint64_t k) { s += k * kGamma; }  // mod 2^64, as the draws themselves
  uint64_t Next() {
    uint64_t z = (s += kGamma);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }  // (0, 1)
};

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

void Store(StDType t, uint8_t* p, float v) {
  switch (t) {
    case StDType::kF16: { uint16_t x = FloatToHalf(v); std::memcpy(p, &x, 2); break; }
    case StDType::kBF16: { uint16_t x = FloatToBF16(v); std::memcpy(p, &x, 2); break; }
    default: std::memcpy(p, &v, 4); break;
  }
}

}  // namespace

void FillRandomTensor(const ExpectedTensor& e, uint64_t seed, StDType dtype, std::span<uint8_t> out, int threads) {
  const int esize = StDTypeSize(dtype);
  const size_t n = out.size() / esize;
  if (e.init == WeightInit::kOnes || e.init == WeightInit::kZeros) {
    const float v = e.init == WeightInit::kOnes ? 1.0f : 0.0f;
    for (size_t k = 0; k < n; ++k) Store(dtype, out.data() + k * esize, v);
    return;
  }
  constexpr double kStd = 0.02;  // HF initializer_range
  const SplitMix64 start{seed * SplitMix64::kGamma ^ Fnv1a(e.name)};
  // Elements [k0, k1) (k0 even): pair k/2 takes draws k and k + 1 of the tensor's generator.
  auto fill = [&](size_t k0, size_t k1) {
    SplitMix64 rng = start;
    rng.Skip(k0);
    for (size_t k = k0; k < k1; k += 2) {
      // Box-Muller: two independent normals per pair of uniforms.
      const double r = std::sqrt(-2.0 * std::log(rng.Uniform())) * kStd;
      const double th = 6.283185307179586 * rng.Uniform();
      Store(dtype, out.data() + k * esize, static_cast<float>(r * std::cos(th)));
      if (k + 1 < n) Store(dtype, out.data() + (k + 1) * esize, static_cast<float>(r * std::sin(th)));
    }
  };
  constexpr size_t kMinPerThread = size_t{1} << 20;
  size_t t = threads > 0 ? static_cast<size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
  if (threads <= 0) t = std::min(t, std::max<size_t>(1, n / kMinPerThread));
  t = std::min(t, std::max<size_t>(1, n / 2));
  if (t <= 1) return fill(0, n);
  const size_t per = (n / t + 1) / 2 * 2;  // even: every chunk starts on a pair
  std::vector<std::thread> pool;
  for (size_t c = 0; c < t; ++c) {
    const size_t k0 = std::min(n, c * per), k1 = c + 1 == t ? n : std::min(n, (c + 1) * per);
    if (k0 < k1) pool.emplace_back(fill, k0, k1);
  }
  for (auto& th : pool) th.join();
}

Status WriteRandomWeights(const LlamaConfig& c, const std::string& dir, uint64_t seed, StDType dtype,
                          const std::function<void(uint64_t, uint64_t)>& progress) {
  if (!IsFloatSt(dtype)) return InvalidArgument(fmt::format("init-weights: dtype {} is not F32, F16 or BF16", StDTypeName(dtype)));
  const auto expected = ExpectedTensors(c);
  std::vector<StTensorSpec> specs;
  uint64_t total = 0;
  for (const auto& e : expected) {
    specs.push_back({e.name, dtype, e.shape});
    uint64_t n = StDTypeSize(dtype);
    for (auto d : e.shape) n *= d;
    total += n;
  }
  LlamaConfig written = c;
  written.torch_dtype = dtype == StDType::kBF16 ? "bfloat16" : dtype == StDType::kF16 ? "float16" : "float32";
  {
    const std::string cfg_path = dir + "/config.json";
    std::ofstream f(cfg_path, std::ios::binary | std::ios::trunc);
    if (!f) return InvalidArgument(fmt::format("cannot write {}", cfg_path));
    f << ConfigToJson(written).dump(2) << "\n";
    if (!f) return Internal(fmt::format("writing {} failed", cfg_path));
  }
  uint64_t done = 0;
  auto fill = [&](size_t i, std::span<uint8_t> out) -> Status {
    FillRandomTensor(expected[i], seed, dtype, out);
    done += out.size();
    if (progress) progress(done, total);
    return Status::Ok();
  };
  std::map<std::string, std::string> meta = {{"format", "pt"},
                                             {"opfuse_init", fmt::format("normal(0, 0.02), norms 1, seed {}", seed)}};
  return WriteSafetensors(dir + "/model.safetensors", specs, meta, fill);
}

}  // namespace opfuse::llama
