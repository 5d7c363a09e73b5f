// Every rewrite preserves what the graph computes: each pattern's primitive graph and its
// rewritten form run on the CPU reference with the same fresh signed random inputs, in f32 (tight
// bound) and bf16 (the primitives round every intermediate to bf16, the fused op does not).
#include <cmath>

#include "pass_test_util.h"
#include "runtime/cpu/cpu_executor.h"

namespace opfuse::testing {
namespace {

struct Case {
  const char* name;
  const char* body;  // after the graph line; DT is replaced by the dtype
};

const Case kCases[] = {
    {"swiglu", "input gate: DT[T, 96]\ninput up: DT[T, 96]\ng = silu(gate)\nout = mul(up, g)\noutput out\n"},
    {"geglu", "input gate: DT[T, 96]\ninput up: DT[T, 96]\ng = gelu_tanh(gate)\nout = mul(g, up)\noutput out\n"},
    {"rms_norm",
     "input x: DT[T, 96]\nparam w: DT[96]\neps = constant() {value=1e-05}\nsq = mul(x, x)\nms = mean(sq)\n"
     "mse = add(ms, eps)\ninv = rsqrt(mse)\nn = mul(x, inv)\ny = mul(n, w)\noutput y\n"},
    {"add_rms_norm",
     "input x: DT[T, 96]\ninput r: DT[T, 96]\nparam w: DT[96]\neps = constant() {value=1e-05}\nh = add(x, r)\n"
     "sq = mul(h, h)\nms = mean(sq)\nmse = add(ms, eps)\ninv = rsqrt(mse)\nn = mul(h, inv)\ny = mul(n, w)\n"
     "z = exp(h)\noutput y, z\n"},
    {"layer_norm",
     "input x: DT[T, 96]\nparam w: DT[96]\nparam b: DT[96]\neps = constant() {value=1e-05}\nmu = mean(x)\n"
     "d = sub(x, mu)\ndd = mul(d, d)\nvar = mean(dd)\nve = add(var, eps)\ninv = rsqrt(ve)\nn = mul(d, inv)\n"
     "y = mul(n, w)\nz = add(y, b)\noutput z\n"},
    {"softmax",
     "input x: DT[T, 4, 16, 16]\ninput mask: DT[16, 16]\nc = constant() {value=0.25}\nxs = mul(x, c)\n"
     "y = add(xs, mask)\nm = max(y)\nd = sub(y, m)\ne = exp(d)\ns = sum(e)\np = div(e, s)\noutput p\n"},
    {"rope",
     "input x: DT[T, 4, 32]\ninput cos: DT[T, 1, 32]\ninput sin: DT[T, 1, 32]\n"
     "lo = slice(x) {axis=2, start=0, end=16}\nhi = slice(x) {axis=2, start=16, end=32}\nnh = neg(hi)\n"
     "rot = concat(nh, lo) {axis=2}\na = mul(x, cos)\nb = mul(rot, sin)\ny = add(a, b)\noutput y\n"},
};

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

TEST(PatternNumerics, RewriteComputesTheSame) {
  for (const auto& c : kCases) {
    for (const char* dt : {"f32", "bf16"}) {
      SCOPED_TRACE(std::string(c.name) + " " + dt);
      PipelineRun r = RunText(std::string("graph ") + c.name + "\n" + Replace(c.body, "DT", dt));
      ASSERT_EQ(r.Kind(std::string("pattern:") + c.name).size(), 1u) << r.Dump();
      const Bindings b{{"T", 5}};
      for (uint64_t seed : {1, 2}) {
        auto inputs = RandomInputs(r.original, b, seed);
        auto want = RunGraphCpu(r.original, inputs, {b, false});
        auto got = RunGraphCpu(r.g, inputs, {b, false});
        ASSERT_TRUE(want.ok()) << want.status().ToString();
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        for (const auto& [name, t] : *want) {
          const HostTensor& u = got->at(name);
          ASSERT_EQ(t.shape, u.shape);
          double num = 0, den = 0, max_err = 0, max_ref = 0;
          for (int64_t i = 0; i < t.numel(); ++i) {
            const double a = t.get(i), v = u.get(i);
            ASSERT_TRUE(std::isfinite(v)) << name << "[" << i << "]";
            num += (a - v) * (a - v);
            den += a * a;
            max_err = std::max(max_err, std::fabs(a - v));
            max_ref = std::max(max_ref, std::fabs(a));
          }
          ASSERT_GT(den, 0) << name << " is all zeros";
          // bf16 keeps 8 mantissa bits (relative step 2^-8 = 0.4%); the primitive path rounds each of
          // up to 9 intermediates, so a few steps of difference are expected, not more.
          const bool f32 = std::string(dt) == "f32";
          EXPECT_LT(std::sqrt(num / den), f32 ? 1e-5 : 1.5e-2) << name;
          EXPECT_LT(max_err / max_ref, f32 ? 1e-5 : 3e-2) << name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace opfuse::testing
