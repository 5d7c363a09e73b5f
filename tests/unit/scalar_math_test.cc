// The scalar math table (src/ops/scalar_math.def, expanded by src/ops/scalar_math.h): it covers every
// elementwise op of ops.def, the JIT calls the table's function for each op, the embedded JIT
// preamble carries the same table and compiles with NVRTC, and the host side keeps the accuracy
// it promises (checked against double-precision formulas). The device side's bit-for-bit agreement
// of library and JIT kernels is tests/gpu/scalar_math_agree_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include <fmt/format.h>

#include "jit/nvrtc_compiler.h"
#include "ops/scalar_ops.h"
#include "opfuse/graph.h"

extern const char kOpfuseJitPreamble[];

namespace opfuse {
namespace {

bool InTable(OpKind op) { return op != OpKind::kWhere && CudaScalarExpr(op) != nullptr; }

TEST(ScalarMath, TableCoversEveryElementwiseOp) {
  for (int i = 0; i < kNumOps; ++i) {
    const OpKind op = static_cast<OpKind>(i);
    const auto kind = GetOpInfo(op).kind;
    const bool elementwise = (kind == FusionKind::kElementwise || kind == FusionKind::kBroadcast) && op != OpKind::kWhere;
    EXPECT_EQ(InTable(op), elementwise) << OpName(op);
  }
}

TEST(ScalarMath, JitCallsTheTableFunctionNamedAfterTheOp) {
  const std::string preamble = kOpfuseJitPreamble;
  for (int i = 0; i < kNumOps; ++i) {
    const OpKind op = static_cast<OpKind>(i);
    if (!InTable(op)) continue;
    const std::string fn = fmt::format("fz::op_{}(", OpName(op));
    EXPECT_NE(std::string(CudaScalarExpr(op)).find(fn), std::string::npos) << CudaScalarExpr(op);
    // the preamble holds the table itself, not a copy: the expansion macro and the op's entry
    EXPECT_NE(preamble.find(fmt::format(", {}, ", OpName(op))), std::string::npos) << OpName(op);
  }
  EXPECT_NE(preamble.find("#include"), std::string::npos);  // only the system-header lines NVRTC skips
  EXPECT_EQ(preamble.find("#include \""), std::string::npos) << "a project include was not inlined";
  EXPECT_NE(preamble.find("OPFUSE_SCALAR_UNARY_F(Silu, silu, fdiv(x, 1.0f + exp(-x)))"), std::string::npos);
}

// A kernel calling every table function compiles with NVRTC against the preamble alone.
TEST(ScalarMath, PreambleCompilesWithNvrtc) {
  if (!jit::NvrtcAvailable()) GTEST_SKIP() << "built without NVRTC";
  std::string src = kOpfuseJitPreamble;
  src += "extern \"C\" __global__ void all_ops(const float* a, const float* b, float* y) {\n  const int i = threadIdx.x;\n";
  int k = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const OpKind op = static_cast<OpKind>(i);
    if (!InTable(op)) continue;
    std::string e = CudaScalarExpr(op);
    for (const auto& [ph, v] : {std::pair<std::string, std::string>{"$0", "a[i]"}, {"$1", "b[i]"}})
      for (size_t p = e.find(ph); p != std::string::npos; p = e.find(ph, p + 1)) e.replace(p, ph.size(), v);
    src += fmt::format("  y[{} * blockDim.x + i] = {};\n", k++, e);
  }
  src += "}\n";
  auto out = jit::CompileCuda(src, "all_ops", "sm_90");
  ASSERT_TRUE(out.ok()) << out.status().message();
}

float Ulps(float got, double want) {
  const float w = static_cast<float>(want);
  if (got == w) return 0;
  return static_cast<float>(std::fabs(got - want) / std::fabs(std::nextafter(w, INFINITY) - w));
}

// The host primitives are the accurate ones: silu and sigmoid with an IEEE divide, gelu through erfc
// (no cancellation in the negative tail), over a seeded sweep of signed magnitudes.
TEST(ScalarMath, HostActivationsAreAccurate) {
  std::mt19937 rng(20261126);
  std::uniform_real_distribution<double> ex(-8.0, 4.5);
  float worst_silu = 0, worst_sig = 0;
  double worst_gelu_rel = 0;
  for (int n = 0; n < 20000; ++n) {
    const float x = static_cast<float>(std::exp2(ex(rng)) * ((n & 1) ? -1 : 1));
    const double xd = x;
    worst_silu = std::max(worst_silu, Ulps(ScalarUnary(OpKind::kSilu, x), xd / (1 + std::exp(-xd))));
    worst_sig = std::max(worst_sig, Ulps(ScalarUnary(OpKind::kSigmoid, x), 1 / (1 + std::exp(-xd))));
    const double g = 0.5 * xd * std::erfc(-xd / std::sqrt(2.0));
    if (std::fabs(g) > 1e-30) worst_gelu_rel = std::max(worst_gelu_rel, std::fabs(ScalarUnary(OpKind::kGelu, x) - g) / std::fabs(g));
  }
  EXPECT_LE(worst_silu, 4.0f);
  EXPECT_LE(worst_sig, 4.0f);
  // gelu: the f32 rounding of x / sqrt 2 alone costs ~2 z^2 ulp of erfc(z); relative 2e-5 holds
  // wherever the result is above 1e-30 (x > -11), while 1 + erf(z) in f32 has cancelled to 0
  // (relative error 1) below x = -5.8.
  EXPECT_LE(worst_gelu_rel, 2e-5);
  const double g6 = 0.5 * -6.0 * std::erfc(6.0 / std::sqrt(2.0));
  EXPECT_LE(std::fabs(ScalarUnary(OpKind::kGelu, -6.0f) - g6) / std::fabs(g6), 2e-5);
  EXPECT_GE(std::fabs(0.5f * -6.0f * (1.0f + std::erf(-6.0f * 0.70710678f)) - g6) / std::fabs(g6), 0.1);
}

TEST(ScalarMath, FlooredModAndIntegerRules) {
  EXPECT_EQ(ScalarBinary(OpKind::kMod, -7.0f, 3.0f), 2.0f);
  EXPECT_EQ(ScalarBinary(OpKind::kMod, 7.0f, -3.0f), -2.0f);
  EXPECT_EQ(ScalarBinaryInt(OpKind::kMod, -7, 3), 2);
  EXPECT_EQ(ScalarBinaryInt(OpKind::kMod, 7, 0), 0);
  EXPECT_EQ(ScalarBinaryInt(OpKind::kDiv, 7, 0), 0);
  EXPECT_EQ(ScalarBinaryInt(OpKind::kDiv, -7, 2), -3);  // C truncation
  EXPECT_EQ(ScalarUnaryInt(OpKind::kRelu, -4), 0);
  EXPECT_EQ(ScalarUnaryInt(OpKind::kAbs, -4), 4);
  EXPECT_EQ(ScalarBinary(OpKind::kLessThan, 1.0f, 2.0f), 1.0f);
  EXPECT_EQ(ScalarBinaryInt(OpKind::kNotEqual, 3, 3), 0);
  // relu of -0 and NaN is +0, as the select x > 0 ? x : 0 gives (fmaxf would differ on both sides)
  const float r = ScalarUnary(OpKind::kRelu, -0.0f);
  EXPECT_FALSE(std::signbit(r));
  EXPECT_EQ(ScalarUnary(OpKind::kRelu, NAN), 0.0f);
  EXPECT_TRUE(std::isnan(ScalarUnary(OpKind::kWhere, 1.0f)));  // not a table op
}

}  // namespace
}  // namespace opfuse
