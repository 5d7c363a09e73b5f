// Numerics of the composite ops' fused CPU references (rms_norm, add_rms_norm, layer_norm, softmax,
// swiglu, geglu, rope) vs double-precision references written here from the definitions in
// ops.def / composite_cpu.cc, for f32/bf16/f16, with and without the optional inputs, odd widths,
// masks (including -inf entries) and causal softmax over [.., Tq, Tk] with Tq <= Tk.
// add_rms_norm's reference rounds s = x + residual to the dtype first (its defined semantics).
#include <cmath>

#include <fmt/format.h>

#include "numerics_harness.h"

namespace opfuse::test {
namespace {

int64_t Cols(const std::vector<int64_t>& s) { return s.back(); }
int64_t Rows(const std::vector<int64_t>& s) { return Numel(s) / s.back(); }

// Element of `t` broadcast (right-aligned) to output index i of shape `out`.
double BGet(const HostTensor& t, int64_t i, const std::vector<int64_t>& out) {
  std::vector<int64_t> coord(out.size());
  for (size_t d = out.size(); d-- > 0;) {
    coord[d] = i % out[d];
    i /= out[d];
  }
  const size_t off = out.size() - t.shape.size();
  int64_t idx = 0;
  for (size_t d = 0; d < t.shape.size(); ++d) idx = idx * t.shape[d] + (t.shape[d] == 1 ? 0 : coord[d + off]);
  return t.get(idx);
}

// ------------------------------------------------------------------ norms
std::vector<double> RefRms(const std::vector<double>& x, const std::vector<int64_t>& s, const HostTensor* w, double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < Rows(s); ++r) {
    double ss = 0;
    for (int64_t c = 0; c < Cols(s); ++c) ss += x[r * Cols(s) + c] * x[r * Cols(s) + c];
    const double inv = 1.0 / std::sqrt(ss / Cols(s) + eps);
    for (int64_t c = 0; c < Cols(s); ++c) y[r * Cols(s) + c] = x[r * Cols(s) + c] * inv * (w ? w->get(c) : 1.0);
  }
  return y;
}

const std::vector<std::vector<int64_t>> kNormShapes = {{1, 8}, {3, 1}, {4, 33}, {2, 3, 64}, {5, 130}};

NUMERICS_TEST(CompositeNumerics, RmsNorm, OpKind::kRmsNorm) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  for (DType dt : FloatDTypes())
    for (const auto& s : kNormShapes)
      for (int variant = 0; variant < 3; ++variant) {  // no weight; weight; weight + explicit eps
        const std::string what = fmt::format("rms_norm {}{} variant {}", DTypeName(dt), ShapeStr(s), variant);
        HostTensor x = Rand(dt, s, rng, -2, 2), w = Rand(dt, {Cols(s)}, rng, -1.5, 1.5);
        Attrs attrs;
        double eps = 1e-6;
        if (variant == 2) attrs["eps"] = eps = 1e-2;
        auto out = variant == 0 ? RunOp(OpKind::kRmsNorm, {x}, attrs) : RunOp(OpKind::kRmsNorm, {x, w}, attrs);
        ASSERT_EQ(out.size(), 1u) << what;
        ExpectClose(out[0], s, RefRms(Values(x), s, variant ? &w : nullptr, eps), what);
      }
}

NUMERICS_TEST(CompositeNumerics, AddRmsNorm, OpKind::kAddRmsNorm) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  for (DType dt : FloatDTypes())
    for (const auto& s : kNormShapes) {
      const std::string what = fmt::format("add_rms_norm {}{}", DTypeName(dt), ShapeStr(s));
      HostTensor x = Rand(dt, s, rng, -2, 2), r = Rand(dt, s, rng, -2, 2), w = Rand(dt, {Cols(s)}, rng, -1.5, 1.5);
      auto out = RunOp(OpKind::kAddRmsNorm, {x, r, w}, {{"eps", 1e-5}});
      ASSERT_EQ(out.size(), 2u) << what;
      std::vector<double> sum(static_cast<size_t>(x.numel()));
      for (int64_t i = 0; i < x.numel(); ++i) sum[i] = RoundTo(dt, x.get(i) + r.get(i));
      ExpectClose(out[1], s, sum, what + " (s = x + residual)");
      ExpectClose(out[0], s, RefRms(sum, s, &w, 1e-5), what + " (y)");
    }
}

NUMERICS_TEST(CompositeNumerics, LayerNorm, OpKind::kLayerNorm) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  for (DType dt : FloatDTypes())
    for (const std::vector<int64_t>& s : {std::vector<int64_t>{4, 2}, {4, 33}, {2, 3, 64}, {5, 130}})
      for (int nin = 1; nin <= 3; ++nin) {
        const std::string what = fmt::format("layer_norm {}{} inputs {}", DTypeName(dt), ShapeStr(s), nin);
        HostTensor x = Rand(dt, s, rng, -2, 3), w = Rand(dt, {Cols(s)}, rng, -1.5, 1.5), b = Rand(dt, {Cols(s)}, rng, -1, 1);
        std::vector<HostTensor> in{x, w, b};
        in.resize(nin);
        auto out = RunOp(OpKind::kLayerNorm, in);
        ASSERT_EQ(out.size(), 1u) << what;
        std::vector<double> ref(static_cast<size_t>(x.numel()));
        for (int64_t r = 0; r < Rows(s); ++r) {
          double mean = 0, var = 0;
          for (int64_t c = 0; c < Cols(s); ++c) mean += x.get(r * Cols(s) + c);
          mean /= Cols(s);
          for (int64_t c = 0; c < Cols(s); ++c) var += std::pow(x.get(r * Cols(s) + c) - mean, 2);
          var /= Cols(s);
          for (int64_t c = 0; c < Cols(s); ++c) {
            double v = (x.get(r * Cols(s) + c) - mean) / std::sqrt(var + 1e-5);
            if (nin > 1) v *= w.get(c);
            if (nin > 2) v += b.get(c);
            ref[r * Cols(s) + c] = v;
          }
        }
        ExpectClose(out[0], s, ref, what);
      }
}

// ------------------------------------------------------------------ softmax
struct SoftmaxCase {
  std::vector<int64_t> x;
  std::vector<int64_t> mask;  // empty: no mask
  double scale;               // 0: attribute absent (1.0)
  int causal;
};

std::vector<double> RefSoftmax(const HostTensor& x, const HostTensor* mask, double scale, bool causal) {
  const auto& s = x.shape;
  const int64_t cols = Cols(s), rows = Rows(s), tq = s.size() >= 2 ? s[s.size() - 2] : 1;
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r % tq;
    std::vector<double> z(static_cast<size_t>(cols));
    double mx = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) {
      z[c] = x.get(r * cols + c) * scale + (mask ? BGet(*mask, r * cols + c, s) : 0.0);
      if (causal && c > i + (cols - tq)) z[c] = -INFINITY;
      mx = std::max(mx, z[c]);
    }
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(z[c] - mx);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = std::exp(z[c] - mx) / sum;
  }
  return y;
}

NUMERICS_TEST(CompositeNumerics, Softmax, OpKind::kSoftmax) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  const std::vector<SoftmaxCase> cases = {
      {{4, 33}, {}, 0, 0},       {{1, 1}, {}, 0, 0},        {{7}, {}, 2.0, 0},          {{4, 33}, {33}, 0, 0},
      {{2, 5, 7}, {5, 7}, 0.125, 0}, {{6, 6}, {}, 0, 1},    {{3, 9}, {}, 0.5, 1},       {{2, 4, 4}, {4, 4}, 0, 1},
      {{3, 2, 5}, {2, 1}, 1.5, 0}, {{1, 130}, {}, 0, 1}};
  for (DType dt : FloatDTypes())
    for (const auto& c : cases) {
      const std::string what = fmt::format("softmax {}{} mask {} scale {} causal {}", DTypeName(dt), ShapeStr(c.x),
                                           c.mask.empty() ? "-" : ShapeStr(c.mask), c.scale, c.causal);
      HostTensor x = Rand(dt, c.x, rng, -3, 3);
      std::vector<HostTensor> in{x};
      if (!c.mask.empty()) {
        HostTensor m = Rand(dt, c.mask, rng, -2, 0);
        // One masked-out key: the first key of the mask's last row, which sees every key even
        // when causal, so no row is ever fully masked.
        if (c.mask.back() > 1) m.set(m.numel() - c.mask.back(), -INFINITY);
        in.push_back(m);
      }
      Attrs attrs;
      if (c.scale != 0) attrs["scale"] = c.scale;
      if (c.causal) attrs["causal"] = int64_t{1};
      auto out = RunOp(OpKind::kSoftmax, in, attrs);
      ASSERT_EQ(out.size(), 1u) << what;
      ExpectClose(out[0], c.x, RefSoftmax(x, in.size() > 1 ? &in[1] : nullptr, c.scale != 0 ? c.scale : 1.0, c.causal), what);
      // Every row sums to 1 (within the dtype's rounding).
      const int64_t cols = Cols(c.x);
      for (int64_t r = 0; r < Rows(c.x); ++r) {
        double sum = 0;
        for (int64_t k = 0; k < cols; ++k) sum += out[0].get(r * cols + k);
        EXPECT_NEAR(sum, 1.0, 2 * RelBound(dt) + 1e-6) << what << " row " << r;
      }
    }
}

// ------------------------------------------------------------------ gated units
NUMERICS_TEST(CompositeNumerics, GatedUnits, OpKind::kSwiglu, OpKind::kGeglu) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  struct Variant { OpKind op; const char* approx; };
  for (Variant v : {Variant{OpKind::kSwiglu, nullptr}, Variant{OpKind::kGeglu, nullptr}, Variant{OpKind::kGeglu, "none"},
                    Variant{OpKind::kGeglu, "tanh"}})
    for (DType dt : FloatDTypes())
      for (const std::vector<int64_t>& s : {std::vector<int64_t>{1}, {7}, {4, 33}, {2, 3, 65}}) {
        const std::string what = fmt::format("{}{} {}{}", OpName(v.op), v.approx ? std::string(" ") + v.approx : "",
                                             DTypeName(dt), ShapeStr(s));
        // Gates in [-3, 3]: below -3 the f32 gelu formula's cancellation exceeds even the 1e-4
        // f32 bound on one-element cases (1 + erf(-4/sqrt(2)) = 6e-5).
        HostTensor g = Rand(dt, s, rng, -3, 3), u = Rand(dt, s, rng, -2, 2);
        Attrs attrs;
        if (v.approx) attrs["approximate"] = std::string(v.approx);
        auto out = RunOp(v.op, {g, u}, attrs);
        ASSERT_EQ(out.size(), 1u) << what;
        std::vector<double> ref;
        for (int64_t i = 0; i < g.numel(); ++i) {
          const double x = g.get(i);
          double act;
          if (v.op == OpKind::kSwiglu) act = x / (1.0 + std::exp(-x));
          else if (v.approx && std::string(v.approx) == "tanh")
            act = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
          else act = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
          ref.push_back(act * u.get(i));
        }
        // geglu in f32 shares gelu's cancellation for negative gates (see elementwise_numerics_test.cc).
        const double bound = dt == DType::kF32 && v.op == OpKind::kGeglu ? 1e-4 : RelBound(dt);
        ExpectClose(out[0], s, ref, bound, what);
      }
}

// ------------------------------------------------------------------ rope
NUMERICS_TEST(CompositeNumerics, Rope, OpKind::kRope) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  struct Case { std::vector<int64_t> x, cs; };
  const std::vector<Case> cases = {{{5, 2, 8}, {5, 1, 8}}, {{3, 34}, {3, 34}}, {{2, 4, 3, 16}, {4, 1, 16}},
                                   {{3, 2}, {2}}, {{7, 4, 64}, {7, 1, 64}}};
  for (DType dt : FloatDTypes())
    for (const auto& c : cases) {
      const std::string what = fmt::format("rope {} x{} cos/sin{}", DTypeName(dt), ShapeStr(c.x), ShapeStr(c.cs));
      HostTensor x = Rand(dt, c.x, rng, -2, 2);
      // Real rotation tables: cos/sin of random angles.
      HostTensor cs(dt, c.cs), sn(dt, c.cs);
      std::uniform_real_distribution<double> ang(-M_PI, M_PI);
      for (int64_t i = 0; i < cs.numel(); ++i) {
        const double a = ang(rng);
        cs.set(i, std::cos(a));
        sn.set(i, std::sin(a));
      }
      auto out = RunOp(OpKind::kRope, {x, cs, sn});
      ASSERT_EQ(out.size(), 1u) << what;
      const int64_t d = Cols(c.x), half = d / 2;
      std::vector<double> ref(static_cast<size_t>(x.numel()));
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t k = i % d;
        const double rot = k < half ? -x.get(i + half) : x.get(i - half);
        ref[i] = x.get(i) * BGet(cs, i, c.x) + rot * BGet(sn, i, c.x);
      }
      ExpectClose(out[0], c.x, ref, what);
    }
}

}  // namespace
}  // namespace opfuse::test
