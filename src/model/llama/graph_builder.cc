// Llama-family prefill/decode graphs (see graph_builder.h). One function builds both phases; the
// decode graph is the prefill graph with T = 1, positions taken from cache_pos and no gather of
// the last token (every sequence has exactly one).
#include "model/llama/graph_builder.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/llama/weights.h"

namespace opfuse::llama {

std::string CacheKeyName(int64_t layer) { return fmt::format("past.{}.key", layer); }
std::string CacheValueName(int64_t layer) { return fmt::format("past.{}.value", layer); }

std::vector<float> RopeInvFreq(const LlamaConfig& c) {
  const int64_t D = c.head_dim;
  std::vector<float> inv(D / 2);
  // transformers: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), all in f32.
  const float base = static_cast<float>(c.rope_theta);
  std::vector<float> pos_freq(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(D);
    pos_freq[i] = std::pow(base, e);
    inv[i] = 1.0f / pos_freq[i];
  }
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == RopeScalingType::kLinear) {
    for (auto& f : inv) f = f / static_cast<float>(rs.factor);
  } else if (rs.type == RopeScalingType::kLlama3) {
    // transformers' _compute_llama3_parameters, in its order of f32 tensor operations (Python
    // scalars meet f32 tensors as f32; `scalar / tensor` is torch's reciprocal(tensor) * scalar).
    const float factor = static_cast<float>(rs.factor), lo = static_cast<float>(rs.low_freq_factor);
    const float old_len = static_cast<float>(rs.original_max_position_embeddings);
    const float low_wavelen = static_cast<float>(rs.original_max_position_embeddings / rs.low_freq_factor);
    const float high_wavelen = static_cast<float>(rs.original_max_position_embeddings / rs.high_freq_factor);
    const float two_pi = static_cast<float>(2 * M_PI), spread = static_cast<float>(rs.high_freq_factor - rs.low_freq_factor);
    for (auto& f : inv) {
      const float wavelen = (1.0f / f) * two_pi;
      float out = wavelen > low_wavelen ? f / factor : f;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth = ((1.0f / wavelen) * old_len - lo) / spread;
        out = (1.0f - smooth) * out / factor + smooth * out;
      }
      f = out;
    }
  } else if (rs.type == RopeScalingType::kYarn) {
    // transformers' _compute_yarn_parameters: a linear ramp over the rotary dims between
    // interpolated (1 / (factor * pos_freq)) and extrapolated (1 / pos_freq) frequencies. The
    // correction range is computed in double (Python floats), the blend in f32 (torch tensors).
    const double dim = static_cast<double>(D), b = c.rope_theta;
    const double orig = static_cast<double>(rs.original_max_position_embeddings);
    auto correction_dim = [&](double rotations) { return dim * std::log(orig / (rotations * 2 * M_PI)) / (2 * std::log(b)); };
    double low = correction_dim(rs.beta_fast), high = correction_dim(rs.beta_slow);
    if (rs.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
    const float factor = static_cast<float>(rs.factor);
    for (int64_t i = 0; i < D / 2; ++i) {
      const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f, 1.0f);
      const float extrapolation = 1.0f - ramp;
      const float interp = 1.0f / (factor * pos_freq[i]);
      inv[i] = interp * (1.0f - extrapolation) + inv[i] * extrapolation;
    }
  }
  // kDynamic: the default frequencies (CheckContext keeps the context within max_position_embeddings,
  // where transformers' dynamic NTK does not rescale).
  return inv;
}

float RopeAttentionScaling(const LlamaConfig& c) {
  return c.rope_scaling.type == RopeScalingType::kYarn ? static_cast<float>(c.rope_scaling.attention_factor) : 1.0f;
}

RopeTables ComputeRopeTables(const LlamaConfig& c, int64_t positions) {
  const int64_t D = c.head_dim, H = D / 2;
  const std::vector<float> inv = RopeInvFreq(c);
  const float scale = RopeAttentionScaling(c);  // transformers: emb.cos() * attention_scaling, in f32
  RopeTables t;
  t.cos.resize(positions * D);
  t.sin.resize(positions * D);
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < H; ++i) {
      const float f = static_cast<float>(p) * inv[i];  // f32 product, as the HF matmul computes it
      const float cs = std::cos(f) * scale, sn = std::sin(f) * scale;
      t.cos[p * D + i] = t.cos[p * D + i + H] = cs;
      t.sin[p * D + i] = t.sin[p * D + i + H] = sn;
    }
  return t;
}

namespace {

DimList Dims(std::initializer_list<Dim> d) { return DimList(d); }

class Builder {
 public:
  Builder(const LlamaConfig& c, const GraphOptions& o, bool decode)
      : c_(c), o_(o), decode_(decode),
        b_(o.tp.world > 1 ? fmt::format("{}_tp{}_rank{}", decode ? "llama_decode" : "llama_prefill", o.tp.world, o.tp.rank)
                          : std::string(decode ? "llama_decode" : "llama_prefill")) {
    B_ = Dim(o.batch);
    T_ = decode ? Dim(1) : o.tokens ? Dim(*o.tokens) : Dim::Sym("T");
    S_ = o.cache_len > 0 ? o.cache_len : c.max_position_embeddings;
  }

  StatusOr<Graph> Build() {
    if (o_.batch < 1) return InvalidArgument(fmt::format("graph builder: batch must be >= 1, got {}", o_.batch));
    if (!decode_ && o_.tokens && *o_.tokens < 1)
      return InvalidArgument(fmt::format("graph builder: tokens must be >= 1, got {}", *o_.tokens));
    if (!decode_ && o_.batch > 1 && !o_.tokens)
      return InvalidArgument("graph builder: a prefill graph with batch > 1 needs a fixed token count (tokens)");
    if (!IsFloat(o_.dtype)) return InvalidArgument("graph builder: the model dtype must be f32, f16 or bf16");
    OPFUSE_RETURN_IF_ERROR(CheckContext(c_, S_.value));
    const int64_t world = o_.tp.world;
    OPFUSE_RETURN_IF_ERROR(CheckTensorParallel(c_, world));
    if (o_.tp.rank < 0 || o_.tp.rank >= world)
      return InvalidArgument(fmt::format("graph builder: rank {} out of range [0, {})", o_.tp.rank, world));
    const DType dt = o_.dtype;
    const int64_t H = c_.hidden_size, D = c_.head_dim;
    const int64_t Hq = LocalHeads(c_, world), Hkv = LocalKvHeads(c_, world);  // this rank's heads

    // Inputs first (engine-facing), then the caches, then params in HF order.
    const int ids = b_.Input("input_ids", DType::kI32, {B_, T_});
    const int positions = decode_ ? -1 : b_.Input("position_ids", DType::kI32, {B_, T_});
    const int cache_pos = b_.Input("cache_pos", DType::kI32, {B_});
    const int last_index = decode_ ? -1 : b_.Input("last_index", DType::kI32, {B_});
    std::vector<int> kc, vc;
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      kc.push_back(b_.Input(CacheKeyName(l), dt, {B_, S_, Hkv, D}));
      vc.push_back(b_.Input(CacheValueName(l), dt, {B_, S_, Hkv, D}));
    }
    for (const auto& e : RankTensors(c_, world)) {
      Shape s;
      for (int64_t d : e.shape) s.push_back(Dim(d));
      params_[e.name] = b_.Param(e.name, dt, s);
    }
    const int cos_table = b_.Param(kRopeCos, dt, {S_, D});
    const int sin_table = b_.Param(kRopeSin, dt, {S_, D});

    // Embeddings and the RoPE tables gathered for these positions, [B, T, 1, D] (shared by layers).
    int x = b_.Embedding({P("model.embed_tokens.weight"), ids});  // [B, T, H]
    const int pos_ids = decode_ ? b_.Reshape({cache_pos}, {{"shape", Dims({B_, Dim(1)})}}) : positions;
    const int cos = b_.Reshape({b_.Embedding({cos_table, pos_ids})}, {{"shape", Dims({B_, T_, Dim(1), Dim(D)})}});
    const int sin = b_.Reshape({b_.Embedding({sin_table, pos_ids})}, {{"shape", Dims({B_, T_, Dim(1), Dim(D)})}});

    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      const std::string p = fmt::format("model.layers.{}.", l);
      const int h = RmsNorm(x, P(p + "input_layernorm.weight"));
      const int q = Linear(h, p + "self_attn.q_proj", c_.attention_bias);
      const int k = Linear(h, p + "self_attn.k_proj", c_.attention_bias);
      const int v = Linear(h, p + "self_attn.v_proj", c_.attention_bias);
      int q4 = b_.Reshape({q}, {{"shape", Dims({B_, T_, Dim(Hq), Dim(D)})}});
      int k4 = b_.Reshape({k}, {{"shape", Dims({B_, T_, Dim(Hkv), Dim(D)})}});
      if (c_.qk_norm) {  // Qwen3: RMSNorm over each head's D values, before RoPE
        q4 = RmsNorm(q4, P(p + "self_attn.q_norm.weight"));
        k4 = RmsNorm(k4, P(p + "self_attn.k_norm.weight"));
      }
      const int v4 = b_.Reshape({v}, {{"shape", Dims({B_, T_, Dim(Hkv), Dim(D)})}});
      const int qr = Rope(q4, cos, sin, D);
      const int kr = Rope(k4, cos, sin, D);
      // A sliding window shorter than the cache limits the keys each query sees; one at least as
      // long as the cache changes nothing and is left out (so the graph is the full-attention one).
      const int64_t window = c_.layer_windows.empty() ? 0 : c_.layer_windows[l];
      Attrs attn_attrs = {{"scale", 1.0 / std::sqrt(static_cast<double>(D))}};
      if (window > 0 && window < S_.value) attn_attrs["window"] = window;
      const int attn = b_.KvAttention({qr, kr, v4, kc[l], vc[l], cache_pos}, attn_attrs);
      const int attn3 = b_.Reshape({attn}, {{"shape", Dims({B_, T_, Dim(Hq * D)})}});
      const int o = AllReduce(Linear(attn3, p + "self_attn.o_proj", c_.o_proj_bias));
      const int h1 = b_.Add({x, o});  // residual, then the post-attention norm: Add+RMSNorm
      const int hn = RmsNorm(h1, P(p + "post_attention_layernorm.weight"));
      const int gate = Linear(hn, p + "mlp.gate_proj", c_.mlp_bias);
      const int up = Linear(hn, p + "mlp.up_proj", c_.mlp_bias);
      const int act = b_.Mul({b_.Silu({gate}), up});  // SwiGLU
      const int down = AllReduce(Linear(act, p + "mlp.down_proj", c_.mlp_bias));
      x = b_.Add({h1, down});
    }
    int last = RmsNorm(x, P("model.norm.weight"));  // [B, T, H]
    if (decode_) {
      last = b_.Reshape({last}, {{"shape", Dims({B_, Dim(H)})}});
    } else {
      // The last token of each sequence: row b*T + len_b - 1 of the [B*T, H] hidden states.
      // [B*T] must be one dim: B = 1 (T may be symbolic) or a fixed T.
      const Dim rows = o_.batch == 1 ? T_ : Dim(o_.batch * *o_.tokens);
      const int flat = b_.Reshape({last}, {{"shape", Dims({rows, Dim(H)})}});
      last = b_.Embedding({flat, last_index});  // [B, H]
    }
    int logits = b_.Matmul({last, P(HeadWeightName(c_, world))}, {{"transpose_b", int64_t{1}}});  // [B, vocab / world]
    if (world > 1) logits = b_.AllGather({logits}, {{"world", world}, {"axis", int64_t{-1}}});  // [B, vocab]
    b_.Output(b_.Cast({logits}, {{"dtype", std::string("f32")}}), "logits");
    if (o_.with_argmax) {
      const int next = b_.Argmax({logits});  // [B, 1] i64
      b_.Output(b_.Cast({next}, {{"dtype", std::string("i32")}}), "next_token");
    }
    return b_.Build();
  }

 private:
  int P(const std::string& name) const { return params_.at(name); }

  // A row-parallel layer's partial output summed over the ranks (the identity at world 1: no op).
  int AllReduce(int x) { return o_.tp.world > 1 ? b_.AllReduce({x}, {{"world", o_.tp.world}}) : x; }

  int Linear(int x, const std::string& prefix, bool bias) {
    std::vector<int> in = {x, P(prefix + ".weight")};
    if (bias) in.push_back(P(prefix + ".bias"));
    return b_.Matmul(in, {{"transpose_b", int64_t{1}}});
  }

  // transformers' LlamaRMSNorm: x.to(float32), x * rsqrt(mean(x^2) + eps), .to(dtype), times the
  // weight. In f16/bf16 the casts are part of the traced form (the rms_norm / add_rms_norm patterns'
  // "f32 inside" variants match it); never_fuse then runs the normalisation in f32 as HF eager does.
  int RmsNorm(int x, int w) {
    const bool up = o_.dtype != DType::kF32;
    const int xs = up ? b_.Cast({x}, {{"dtype", std::string("f32")}}) : x;
    const int ms = b_.Mean({b_.Mul({xs, xs})});
    const int inv = b_.Rsqrt({b_.Add({ms, b_.Constant(c_.rms_norm_eps)})});
    int n = b_.Mul({xs, inv});
    if (up) n = b_.Cast({n}, {{"dtype", std::string(DTypeName(o_.dtype))}});
    return b_.Mul({n, w});
  }

  // apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, rotate_half = cat(-x2, x1).
  int Rope(int x, int cos, int sin, int64_t D) {
    const int lo = b_.Slice({x}, {{"axis", int64_t{3}}, {"start", int64_t{0}}, {"end", D / 2}});
    const int hi = b_.Slice({x}, {{"axis", int64_t{3}}, {"start", D / 2}, {"end", D}});
    const int rot = b_.Concat({b_.Neg({hi}), lo}, {{"axis", int64_t{3}}});
    return b_.Add({b_.Mul({x, cos}), b_.Mul({rot, sin})});
  }

  const LlamaConfig& c_;
  const GraphOptions& o_;
  const bool decode_;
  GraphBuilder b_;
  Dim B_, T_, S_;
  std::map<std::string, int> params_;
};

}  // namespace

StatusOr<Graph> BuildPrefillGraph(const LlamaConfig& c, const GraphOptions& o) {
  OPFUSE_RETURN_IF_ERROR(ValidateConfig(c));
  return Builder(c, o, false).Build();
}

StatusOr<Graph> BuildDecodeGraph(const LlamaConfig& c, const GraphOptions& o) {
  OPFUSE_RETURN_IF_ERROR(ValidateConfig(c));
  return Builder(c, o, true).Build();
}

}  // namespace opfuse::llama
