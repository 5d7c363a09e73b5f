// Library ops (matmul, attention, embedding): opaque to the fuser; cuBLASLt / hand-written
// kernels on CUDA, straightforward loops (f32 accumulation) on the CPU.
//
// CPU references: matmul converts a and b to f32 buffers once; with b [K, N] it runs a tiled
// i-k-j loop whose inner loop is an 8-wide axpy (each output sums its products in ascending k);
// with transpose_b (b [N, K], the Hugging Face weight layout) every output is an 8-lane dot
// product of two contiguous rows. f32 accumulation, deterministic order in both.
// attention: per query head, scores and softmax in double, GQA (query head h reads kv head
// h / (Hq / Hkv)), causal aligned to the end (query i sees keys j <= i + S - T), default scale
// 1/sqrt(D); a query that sees no key gets zeros. kv_attention: every pos[b] checked first (an
// out-of-range one is an InvalidArgument naming b, pos and S, and nothing is written), the new rows
// copied into the caches, then per sequence the same double-precision loop over keys
// [0, pos[b] + t] of the cache (only the rows in use are converted). embedding: row copies; an id outside
// [0, vocab) is an InvalidArgument naming the id and its position — never a silent clamp.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "ops/cpu_util.h"
#include "ops/op_def.h"

namespace opfuse {
namespace {

bool DimsMayMatch(const Dim& a, const Dim& b) { return a == b; }

StatusOr<std::vector<TensorType>> InferLibrary(const Node& n, const std::vector<TensorType>& in) {
  switch (n.op) {
    case OpKind::kMatmul: {
      const TensorType &a = in[0], &b = in[1];
      if (a.dtype != b.dtype) return NodeError(n, fmt::format("dtype mismatch: a is {}, b is {}", DTypeName(a.dtype), DTypeName(b.dtype)));
      if (!IsFloat(a.dtype)) return NodeError(n, fmt::format("dtype mismatch: matmul needs float, got {}", DTypeName(a.dtype)));
      if (a.shape.empty()) return NodeError(n, "shape mismatch: a must have rank >= 1");
      if (b.shape.size() != 2) return NodeError(n, fmt::format("shape mismatch: b must be 2-d, got {}", ShapeToString(b.shape)));
      const bool tb = AttrInt(n.attrs, "transpose_b", 0) != 0;
      const Dim& k_b = tb ? b.shape[1] : b.shape[0];
      const Dim& n_b = tb ? b.shape[0] : b.shape[1];
      if (!DimsMayMatch(a.shape.back(), k_b))
        return NodeError(n, fmt::format("shape mismatch: a {} and b {}{} disagree on K", ShapeToString(a.shape), ShapeToString(b.shape), tb ? " (transpose_b=1)" : ""));
      if (in.size() == 3) {
        if (in[2].dtype != a.dtype) return NodeError(n, "dtype mismatch: bias dtype differs from a");
        if (in[2].shape.size() != 1 || !(in[2].shape[0] == n_b))
          return NodeError(n, fmt::format("shape mismatch: bias must be [{}], got {}", n_b.ToString(), ShapeToString(in[2].shape)));
      }
      TensorType out = a;
      out.shape.back() = n_b;
      return std::vector<TensorType>{out};
    }
    case OpKind::kAttention: {
      const TensorType &q = in[0], &k = in[1], &v = in[2];
      for (const auto* t : {&k, &v})
        if (t->dtype != q.dtype) return NodeError(n, "dtype mismatch: q, k, v must share a dtype");
      if (!IsFloat(q.dtype)) return NodeError(n, "dtype mismatch: attention needs float");
      if (q.shape.size() != 3 || k.shape.size() != 3 || v.shape.size() != 3)
        return NodeError(n, fmt::format("shape mismatch: q, k, v must be [tokens, heads, head_dim], got {}, {}, {}",
                                        ShapeToString(q.shape), ShapeToString(k.shape), ShapeToString(v.shape)));
      if (!(k.shape == v.shape)) return NodeError(n, fmt::format("shape mismatch: k {} and v {} differ", ShapeToString(k.shape), ShapeToString(v.shape)));
      if (!(q.shape[2] == k.shape[2])) return NodeError(n, "shape mismatch: q and k head_dim differ");
      if (q.shape[1].is_static() && k.shape[1].is_static() && (k.shape[1].value == 0 || q.shape[1].value % k.shape[1].value))
        return NodeError(n, fmt::format("shape mismatch: {} query heads not a multiple of {} kv heads", q.shape[1].value, k.shape[1].value));
      return std::vector<TensorType>{q};
    }
    case OpKind::kKvAttention: {
      // q[B,T,Hq,D], k/v[B,T,Hkv,D], k_cache/v_cache[B,S,Hkv,D], pos[B] i32.
      static const char* const kName[] = {"q", "k", "v", "k_cache", "v_cache", "pos"};
      const TensorType &q = in[0], &k = in[1], &kc = in[3], &pos = in[5];
      for (int i = 0; i < 5; ++i) {
        if (!IsFloat(in[i].dtype))
          return NodeError(n, fmt::format("dtype mismatch: {} must be float, got {}", kName[i], DTypeName(in[i].dtype)));
        if (in[i].dtype != q.dtype)
          return NodeError(n, fmt::format("dtype mismatch: {} is {} but q is {} (q, k, v, k_cache, v_cache share a dtype)",
                                          kName[i], DTypeName(in[i].dtype), DTypeName(q.dtype)));
        if (in[i].shape.size() != 4)
          return NodeError(n, fmt::format("shape mismatch: {} must be 4-d ([batch, {}, heads, head_dim]), got {}", kName[i],
                                          i < 3 ? "tokens" : "cache_len", ShapeToString(in[i].shape)));
      }
      if (pos.dtype != DType::kI32)
        return NodeError(n, fmt::format("dtype mismatch: pos must be i32, got {}", DTypeName(pos.dtype)));
      if (pos.shape.size() != 1)
        return NodeError(n, fmt::format("shape mismatch: pos must be [batch], got {}", ShapeToString(pos.shape)));
      for (int i = 1; i < 6; ++i)
        if (!(in[i].shape[0] == q.shape[0]))
          return NodeError(n, fmt::format("shape mismatch: batch of {} {} differs from q {}", kName[i],
                                          ShapeToString(in[i].shape), ShapeToString(q.shape)));
      for (int i : {1, 2})
        if (!(in[i].shape[1] == q.shape[1]))
          return NodeError(n, fmt::format("shape mismatch: tokens of {} {} differ from q {}", kName[i],
                                          ShapeToString(in[i].shape), ShapeToString(q.shape)));
      for (int i = 1; i < 5; ++i)
        if (!(in[i].shape[3] == q.shape[3]))
          return NodeError(n, fmt::format("shape mismatch: head_dim of {} {} differs from q {}", kName[i],
                                          ShapeToString(in[i].shape), ShapeToString(q.shape)));
      for (int i = 2; i < 5; ++i)
        if (!(in[i].shape[2] == k.shape[2]))
          return NodeError(n, fmt::format("shape mismatch: kv heads of {} {} differ from k {}", kName[i],
                                          ShapeToString(in[i].shape), ShapeToString(k.shape)));
      if (!(in[4].shape[1] == kc.shape[1]))
        return NodeError(n, fmt::format("shape mismatch: v_cache {} and k_cache {} differ in length",
                                        ShapeToString(in[4].shape), ShapeToString(kc.shape)));
      const Dim &hq = q.shape[2], &hkv = k.shape[2];
      if (hq.is_static() && hkv.is_static() && (hkv.value == 0 || hq.value % hkv.value))
        return NodeError(n, fmt::format("shape mismatch: {} query heads not a multiple of {} kv heads", hq.value, hkv.value));
      const Dim &t = q.shape[1], &s = kc.shape[1];
      if (t.is_static() && s.is_static() && t.value > s.value)
        return NodeError(n, fmt::format("shape mismatch: {} new tokens do not fit a cache of length {}", t.value, s.value));
      return std::vector<TensorType>{q};
    }
    case OpKind::kEmbedding: {
      const TensorType &table = in[0], &ids = in[1];
      if (table.shape.size() != 2) return NodeError(n, fmt::format("shape mismatch: table must be [vocab, dim], got {}", ShapeToString(table.shape)));
      if (!IsInt(ids.dtype)) return NodeError(n, fmt::format("dtype mismatch: ids must be i32 or i64, got {}", DTypeName(ids.dtype)));
      TensorType out{table.dtype, ids.shape};
      out.shape.push_back(table.shape[1]);
      return std::vector<TensorType>{out};
    }
    default:
      return NodeError(n, "not a library op");
  }
}

using In = std::vector<const HostTensor*>;
using Out = std::vector<HostTensor*>;

// 4-wide float vectors (GCC/Clang vector extensions; SSE/NEON width, so no ABI questions), two
// per step. Unaligned loads and stores go through memcpy.
typedef float V4 __attribute__((vector_size(16)));
inline V4 Load4(const float* p) { V4 v; std::memcpy(&v, p, sizeof v); return v; }
inline void Store4(float* p, V4 v) { std::memcpy(p, &v, sizeof v); }

// c[0, n) += a * b[0, n)
inline void Axpy(float* c, const float* b, float a, int64_t n) {
  const V4 av = {a, a, a, a};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    Store4(c + j, Load4(c + j) + av * Load4(b + j));
    Store4(c + j + 4, Load4(c + j + 4) + av * Load4(b + j + 4));
  }
  for (; j < n; ++j) c[j] += a * b[j];
}

// sum a[k] * b[k]: eight interleaved partial sums, then the tail (a fixed, deterministic order).
inline float Dot(const float* a, const float* b, int64_t n) {
  V4 acc0 = {}, acc1 = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    acc0 += Load4(a + k) * Load4(b + k);
    acc1 += Load4(a + k + 4) * Load4(b + k + 4);
  }
  const V4 acc = acc0 + acc1;
  float s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; k < n; ++k) s += a[k] * b[k];
  return s;
}

Status CpuMatmul(const Node& n, const In& in, const Out& out) {
  const HostTensor &a = *in[0], &b = *in[1];
  const HostTensor* bias = in.size() > 2 ? in[2] : nullptr;
  HostTensor& y = *out[0];
  const bool tb = AttrInt(n.attrs, "transpose_b", 0) != 0;
  const int64_t K = a.shape.back();
  int64_t M = 1;
  for (size_t d = 0; d + 1 < a.shape.size(); ++d) M *= a.shape[d];
  const int64_t kb = tb ? b.shape[1] : b.shape[0], N = tb ? b.shape[0] : b.shape[1];
  if (kb != K)
    return NodeError(n, fmt::format("shape mismatch: a has K={} but b has K={}", K, kb));
  if (y.numel() != M * N) return Internal(fmt::format("{}: output has {} elements, expected {}", NodeLabel(n), y.numel(), M * N));
  const std::vector<float> A = ReadF32(a), B = ReadF32(b);
  std::vector<float> C(static_cast<size_t>(M * N), 0.0f);
  if (bias) {
    const std::vector<float> bv = ReadF32(*bias);
    for (int64_t m = 0; m < M; ++m) std::copy(bv.begin(), bv.end(), C.begin() + m * N);
  }
  if (tb) {
    // b is [N, K]: every output is a dot product of two contiguous rows. Blocks of b rows stay in
    // cache while every row of a passes over them.
    const int64_t nb = std::max<int64_t>(1, (256 * 1024) / std::max<int64_t>(1, K * 4));
    for (int64_t n0 = 0; n0 < N; n0 += nb) {
      const int64_t n1 = std::min(N, n0 + nb);
      for (int64_t m = 0; m < M; ++m) {
        const float* arow = A.data() + m * K;
        float* c = C.data() + m * N;
        for (int64_t j = n0; j < n1; ++j) c[j] += Dot(arow, B.data() + j * K, K);
      }
    }
  } else {
    // b is [K, N]: i-k-j with a contiguous axpy inner loop, tiled so a b tile stays in cache.
    constexpr int64_t kMB = 16, kKB = 128, kNB = 512;
    for (int64_t m0 = 0; m0 < M; m0 += kMB) {
      const int64_t m1 = std::min(M, m0 + kMB);
      for (int64_t k0 = 0; k0 < K; k0 += kKB) {
        const int64_t k1 = std::min(K, k0 + kKB);
        for (int64_t n0 = 0; n0 < N; n0 += kNB) {
          const int64_t n1 = std::min(N, n0 + kNB);
          for (int64_t m = m0; m < m1; ++m) {
            float* c = C.data() + m * N;
            const float* arow = A.data() + m * K;
            for (int64_t k = k0; k < k1; ++k) Axpy(c + n0, B.data() + k * N + n0, arow[k], n1 - n0);
          }
        }
      }
    }
  }
  WriteF32(y, C.data());
  return Status::Ok();
}

Status CpuAttention(const Node& n, const In& in, const Out& out) {
  const HostTensor &q = *in[0], &k = *in[1], &v = *in[2];
  HostTensor& y = *out[0];
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2];
  const int64_t S = k.shape[0], Hkv = k.shape[1];
  if (k.shape[2] != D || v.shape != k.shape)
    return NodeError(n, "shape mismatch: q, k, v head dims differ");
  if (Hkv == 0 || Hq % Hkv)
    return NodeError(n, fmt::format("shape mismatch: {} query heads not a multiple of {} kv heads", Hq, Hkv));
  const int64_t group = Hq / Hkv;
  const bool causal = AttrInt(n.attrs, "causal", 1) != 0;
  const double scale = AttrFloat(n.attrs, "scale", D > 0 ? 1.0 / std::sqrt(static_cast<double>(D)) : 1.0);
  const std::vector<float> Q = ReadF32(q), Kf = ReadF32(k), V = ReadF32(v);
  std::vector<float> O(static_cast<size_t>(T * Hq * D), 0.0f);
  std::vector<double> p(static_cast<size_t>(S)), acc(static_cast<size_t>(D));
  for (int64_t h = 0; h < Hq; ++h) {
    const int64_t kvh = h / group;
    for (int64_t i = 0; i < T; ++i) {
      const int64_t visible = causal ? std::min(S, std::max<int64_t>(0, i + S - T + 1)) : S;
      float* o = O.data() + (i * Hq + h) * D;
      if (visible == 0) continue;  // no key to attend to: zeros
      const float* qi = Q.data() + (i * Hq + h) * D;
      double mx = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) {
        const float* kj = Kf.data() + (j * Hkv + kvh) * D;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(qi[d]) * kj[d];
        p[j] = dot * scale;
        mx = std::max(mx, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < visible; ++j) sum += (p[j] = std::exp(p[j] - mx));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < visible; ++j) {
        const float* vj = V.data() + (j * Hkv + kvh) * D;
        for (int64_t d = 0; d < D; ++d) acc[d] += p[j] * vj[d];
      }
      for (int64_t d = 0; d < D; ++d) o[d] = static_cast<float>(acc[d] / sum);
    }
  }
  WriteF32(y, O.data());
  return Status::Ok();
}

std::string Dims(const std::vector<int64_t>& s) { return ShapeToString(Shape(s.begin(), s.end())); }

// Elements [off, off + count) of t as floats (f32/bf16 without a per-element dtype switch).
std::vector<float> ReadF32Range(const HostTensor& t, int64_t off, int64_t count) {
  std::vector<float> out(static_cast<size_t>(std::max<int64_t>(count, 0)));
  if (t.dtype == DType::kF32) {
    if (count > 0) std::memcpy(out.data(), t.data.data() + off * 4, static_cast<size_t>(count) * 4);
  } else if (t.dtype == DType::kBF16) {
    const uint8_t* p = t.data.data() + off * 2;
    for (int64_t i = 0; i < count; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = BF16ToFloat(h);
    }
  } else {
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(t.get(off + i));
  }
  return out;
}

// kv_attention: checks every pos first (nothing is written when one is out of range), writes the
// new k/v rows into the caches (out[1], out[2]: the writable state, see CpuFn), then attends each
// query over its cache prefix (the last `window` positions of it when the attr is set) in double,
// exactly like CpuAttention.
Status CpuKvAttention(const Node& n, const In& in, const Out& out) {
  const HostTensor &q = *in[0], &k = *in[1], &v = *in[2], &pos = *in[5];
  if (out.size() != 3)
    return Internal(fmt::format("{}: expected the output and the two writable caches, got {} tensors", NodeLabel(n), out.size()));
  HostTensor &y = *out[0], &kc = *out[1], &vc = *out[2];
  if (q.shape.size() != 4 || k.shape.size() != 4 || kc.shape.size() != 4 || pos.shape.size() != 1 ||
      k.shape != v.shape || kc.shape != vc.shape || pos.dtype != DType::kI32)
    return NodeError(n, "shape mismatch: expects q[B,T,Hq,D], k/v[B,T,Hkv,D], caches[B,S,Hkv,D], pos[B] i32");
  const int64_t B = q.shape[0], T = q.shape[1], Hq = q.shape[2], D = q.shape[3];
  const int64_t S = kc.shape[1], Hkv = kc.shape[2];
  if (k.shape != std::vector<int64_t>{B, T, Hkv, D} || kc.shape[0] != B || kc.shape[3] != D || pos.shape[0] != B)
    return NodeError(n, fmt::format("shape mismatch: q {}, k {}, k_cache {}, pos {} disagree", Dims(q.shape),
                                    Dims(k.shape), Dims(kc.shape), Dims(pos.shape)));
  if (Hkv == 0 || Hq % Hkv)
    return NodeError(n, fmt::format("shape mismatch: {} query heads not a multiple of {} kv heads", Hq, Hkv));
  std::vector<int64_t> p(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    p[b] = pos.get_int(b);
    if (p[b] < 0 || p[b] + T > S)
      return NodeError(n, fmt::format("sequence {}: pos {} + {} new token{} does not fit the cache (S = {})", b, p[b], T,
                                      T == 1 ? "" : "s", S));
  }
  const int64_t row = Hkv * D;  // one token of one sequence in k/v and the caches
  for (int64_t b = 0; b < B; ++b) {
    CopyElements(k, b * T * row, kc, (b * S + p[b]) * row, T * row);
    CopyElements(v, b * T * row, vc, (b * S + p[b]) * row, T * row);
  }
  const int64_t group = Hq / Hkv;
  const double scale = AttrFloat(n.attrs, "scale", D > 0 ? 1.0 / std::sqrt(static_cast<double>(D)) : 1.0);
  // Sliding window (Mistral, Qwen2/3 sliding layers): the query at position p sees keys j with
  // p - window < j <= p; 0 = every earlier key.
  const int64_t window = AttrInt(n.attrs, "window", 0);
  const std::vector<float> Q = ReadF32(q);
  std::vector<float> O(static_cast<size_t>(B * T * Hq * D), 0.0f);
  std::vector<double> w, acc(static_cast<size_t>(D));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = p[b] + T;  // cache rows this sequence's queries may see
    const std::vector<float> Kf = ReadF32Range(kc, b * S * row, len * row), V = ReadF32Range(vc, b * S * row, len * row);
    w.resize(static_cast<size_t>(len));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kvh = h / group, visible = p[b] + t + 1;
        const int64_t first = window > 0 ? std::max<int64_t>(0, visible - window) : 0;
        const float* qi = Q.data() + ((b * T + t) * Hq + h) * D;
        double mx = -INFINITY;
        for (int64_t j = first; j < visible; ++j) {
          const float* kj = Kf.data() + j * row + kvh * D;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(qi[d]) * kj[d];
          w[j] = dot * scale;
          mx = std::max(mx, w[j]);
        }
        double sum = 0;
        for (int64_t j = first; j < visible; ++j) sum += (w[j] = std::exp(w[j] - mx));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = first; j < visible; ++j) {
          const float* vj = V.data() + j * row + kvh * D;
          for (int64_t d = 0; d < D; ++d) acc[d] += w[j] * vj[d];
        }
        float* o = O.data() + ((b * T + t) * Hq + h) * D;
        for (int64_t d = 0; d < D; ++d) o[d] = static_cast<float>(acc[d] / sum);
      }
  }
  WriteF32(y, O.data());
  return Status::Ok();
}

Status CpuEmbedding(const Node& n, const In& in, const Out& out) {
  const HostTensor &table = *in[0], &ids = *in[1];
  HostTensor& y = *out[0];
  const int64_t V = table.shape[0], D = table.shape[1];
  for (int64_t p = 0; p < ids.numel(); ++p) {
    const int64_t id = ids.get_int(p);
    if (id < 0 || id >= V)
      return NodeError(n, fmt::format("id {} at position {} is out of range [0, {})", id, p, V));
    CopyElements(table, id * D, y, p * D, D);
  }
  return Status::Ok();
}

}  // namespace

void RegisterLibraryOps(OpDefTable& t) {
  t[static_cast<int>(OpKind::kMatmul)].cpu = CpuMatmul;
  t[static_cast<int>(OpKind::kAttention)].cpu = CpuAttention;
  t[static_cast<int>(OpKind::kEmbedding)].cpu = CpuEmbedding;
  t[static_cast<int>(OpKind::kKvAttention)].cpu = CpuKvAttention;
  t[static_cast<int>(OpKind::kKvAttention)].mutated_inputs = {3, 4};  // k_cache, v_cache
  t[static_cast<int>(OpKind::kMatmul)].attrs = {{"transpose_b", AttrRule::kFlag}};
  t[static_cast<int>(OpKind::kAttention)].attrs = {{"causal", AttrRule::kFlag}, {"scale", AttrRule::kFinite}};
  t[static_cast<int>(OpKind::kKvAttention)].attrs = {{"scale", AttrRule::kFinite}, {"window", AttrRule::kNonNegativeInt}};
  for (OpKind op : {OpKind::kMatmul, OpKind::kAttention, OpKind::kKvAttention, OpKind::kEmbedding})
    t[static_cast<int>(op)].infer = InferLibrary;
}

}  // namespace opfuse
