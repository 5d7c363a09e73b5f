// Numerics of the library ops (matmul, attention, embedding) vs double references written here:
// matmul with and without transpose_b and bias, batched and 1-d a, sizes crossing the CPU
// reference's tile edges (K > 128, N > 512, M > 16); attention with GQA, causal alignment to the
// end (T < S: decoding), non-causal, custom scale, odd head_dim; embedding for float and int
// tables with i32/i64 ids of several ranks (an exact row copy).
#include <cmath>

#include <fmt/format.h>

#include "numerics_harness.h"

namespace opfuse::test {
namespace {

NUMERICS_TEST(LibraryNumerics, Matmul, OpKind::kMatmul) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  struct Case { std::vector<int64_t> a; int64_t n; bool tb, bias; };
  const std::vector<Case> cases = {
      {{3, 5}, 7, false, false},     {{3, 5}, 7, true, false},     {{1, 33}, 3, false, true},
      {{17, 130}, 513, false, false}, {{17, 130}, 515, true, true}, {{2, 3, 16}, 9, false, true},
      {{8}, 6, true, false},          {{20, 1}, 3, false, false},   {{4, 64}, 64, true, false}};
  for (DType dt : FloatDTypes())
    for (const auto& c : cases) {
      const int64_t K = c.a.back(), N = c.n, M = Numel(c.a) / K;
      const std::string what = fmt::format("matmul {} a{} N={} transpose_b={} bias={}", DTypeName(dt), ShapeStr(c.a),
                                           N, c.tb, c.bias);
      HostTensor a = Rand(dt, c.a, rng), b = Rand(dt, c.tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}, rng),
                 bias = Rand(dt, {N}, rng);
      std::vector<HostTensor> in{a, b};
      if (c.bias) in.push_back(bias);
      auto out = RunOp(OpKind::kMatmul, in, {{"transpose_b", int64_t{c.tb}}});
      ASSERT_EQ(out.size(), 1u) << what;
      std::vector<int64_t> oshape = c.a;
      oshape.back() = N;
      std::vector<double> ref(static_cast<size_t>(M * N));
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double acc = c.bias ? bias.get(n) : 0.0;
          for (int64_t k = 0; k < K; ++k) acc += a.get(m * K + k) * (c.tb ? b.get(n * K + k) : b.get(k * N + n));
          ref[m * N + n] = acc;
        }
      ExpectClose(out[0], oshape, ref, what);
    }
}

NUMERICS_TEST(LibraryNumerics, Attention, OpKind::kAttention) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  struct Case { int64_t T, S, Hq, Hkv, D; int causal; double scale; };  // causal -1: attribute absent (default 1)
  const std::vector<Case> cases = {{1, 1, 1, 1, 4, -1, 0},  {5, 5, 4, 2, 8, -1, 0},  {3, 7, 4, 4, 16, 1, 0},
                                   {4, 6, 2, 1, 8, 0, 0},   {6, 6, 6, 3, 5, 1, 0.3}, {2, 9, 8, 2, 64, 1, 0},
                                   {1, 12, 4, 1, 32, 1, 0}, {7, 7, 2, 2, 3, 0, 0.5}};
  for (DType dt : FloatDTypes())
    for (const auto& c : cases) {
      const std::string what = fmt::format("attention {} T={} S={} Hq={} Hkv={} D={} causal={} scale={}", DTypeName(dt),
                                           c.T, c.S, c.Hq, c.Hkv, c.D, c.causal, c.scale);
      HostTensor q = Rand(dt, {c.T, c.Hq, c.D}, rng, -2, 2), k = Rand(dt, {c.S, c.Hkv, c.D}, rng, -2, 2),
                 v = Rand(dt, {c.S, c.Hkv, c.D}, rng);
      Attrs attrs;
      if (c.causal >= 0) attrs["causal"] = int64_t{c.causal};
      if (c.scale != 0) attrs["scale"] = c.scale;
      auto out = RunOp(OpKind::kAttention, {q, k, v}, attrs);
      ASSERT_EQ(out.size(), 1u) << what;
      const bool causal = c.causal != 0;
      const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D));
      std::vector<double> ref(static_cast<size_t>(c.T * c.Hq * c.D));
      for (int64_t h = 0; h < c.Hq; ++h) {
        const int64_t kvh = h / (c.Hq / c.Hkv);
        for (int64_t i = 0; i < c.T; ++i) {
          std::vector<double> p(static_cast<size_t>(c.S), 0.0);
          double mx = -INFINITY;
          for (int64_t j = 0; j < c.S; ++j) {
            if (causal && j > i + c.S - c.T) { p[j] = -INFINITY; continue; }
            double dot = 0;
            for (int64_t d = 0; d < c.D; ++d) dot += q.get((i * c.Hq + h) * c.D + d) * k.get((j * c.Hkv + kvh) * c.D + d);
            p[j] = dot * scale;
            mx = std::max(mx, p[j]);
          }
          double sum = 0;
          for (auto& x : p) sum += (x = std::exp(x - mx));
          for (int64_t d = 0; d < c.D; ++d) {
            double acc = 0;
            for (int64_t j = 0; j < c.S; ++j) acc += p[j] * v.get((j * c.Hkv + kvh) * c.D + d);
            ref[(i * c.Hq + h) * c.D + d] = acc / sum;
          }
        }
      }
      ExpectClose(out[0], {c.T, c.Hq, c.D}, ref, what);
    }
}

NUMERICS_TEST(LibraryNumerics, Embedding, OpKind::kEmbedding) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  for (DType tdt : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64})
    for (DType idt : {DType::kI32, DType::kI64})
      for (const std::vector<int64_t>& ishape : {std::vector<int64_t>{}, {5}, {2, 3}, {1, 1, 4}})
        for (const auto& [V, D] : {std::pair<int64_t, int64_t>{11, 7}, {3, 64}, {40, 1}}) {
          const std::string what = fmt::format("embedding table {}[{}, {}] ids {}{}", DTypeName(tdt), V, D,
                                               DTypeName(idt), ShapeStr(ishape));
          HostTensor table = Rand(tdt, {V, D}, rng, -100, 100), ids = Rand(idt, ishape, rng, 0, V - 1);
          ids.set(0, static_cast<double>(V - 1));  // the last row is reachable
          auto out = RunOp(OpKind::kEmbedding, {table, ids});
          ASSERT_EQ(out.size(), 1u) << what;
          ASSERT_EQ(out[0].dtype, tdt) << what;
          std::vector<int64_t> oshape = ishape;
          oshape.push_back(D);
          std::vector<double> ref;
          for (int64_t p = 0; p < ids.numel(); ++p)
            for (int64_t d = 0; d < D; ++d) ref.push_back(table.get(ids.get_int(p) * D + d));
          ExpectExact(out[0], oshape, ref, what);
        }
}

}  // namespace
}  // namespace opfuse::test
