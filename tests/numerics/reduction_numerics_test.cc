// Numerics of the last-axis reductions (sum, max, mean, argmax): CPU reference vs a double
// reference written here, for f32/bf16/f16 and (sum, max, argmax) i32/i64, over shapes with odd
// widths; the reduced axis is kept with size 1. argmax returns the first index of the maximum
// (ties are common in bf16, so the rule is checked, not assumed away).
#include <cmath>

#include <fmt/format.h>

#include "numerics_harness.h"

namespace opfuse::test {
namespace {

const std::vector<std::vector<int64_t>> kShapes = {{1}, {7}, {3, 5}, {4, 33}, {2, 3, 17}, {2, 130}, {5, 1}};

std::vector<double> RefReduce(OpKind op, const HostTensor& x) {
  const int64_t cols = x.shape.back(), rows = x.numel() / cols;
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0, best = -INFINITY;
    int64_t arg = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double v = x.get(r * cols + c);
      sum += v;
      if (v > best) {
        best = v;
        arg = c;
      }
    }
    switch (op) {
      case OpKind::kSum: out.push_back(sum); break;
      case OpKind::kMean: out.push_back(sum / static_cast<double>(cols)); break;
      case OpKind::kMax: out.push_back(best); break;
      default: out.push_back(static_cast<double>(arg));
    }
  }
  return out;
}

std::vector<int64_t> Reduced(std::vector<int64_t> s) {
  s.back() = 1;
  return s;
}

NUMERICS_TEST(ReductionNumerics, Float, OpKind::kSum, OpKind::kMax, OpKind::kMean, OpKind::kArgmax) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  for (OpKind op : {OpKind::kSum, OpKind::kMax, OpKind::kMean, OpKind::kArgmax})
    for (DType dt : FloatDTypes())
      for (const auto& shape : kShapes) {
        const std::string what = fmt::format("{} {}{}", OpName(op), DTypeName(dt), ShapeStr(shape));
        HostTensor x = Rand(dt, shape, rng, -2, 2);
        auto out = RunOp(op, {x});
        ASSERT_EQ(out.size(), 1u) << what;
        const auto ref = RefReduce(op, x);
        if (op == OpKind::kArgmax) {
          ASSERT_EQ(out[0].dtype, DType::kI64) << what;
          ExpectExact(out[0], Reduced(shape), ref, what);
        } else {
          ASSERT_EQ(out[0].dtype, dt) << what;
          ExpectClose(out[0], Reduced(shape), ref, what);
        }
      }
}

NUMERICS_TEST(ReductionNumerics, Int, OpKind::kSum, OpKind::kMax, OpKind::kArgmax) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  for (OpKind op : {OpKind::kSum, OpKind::kMax, OpKind::kArgmax})
    for (DType dt : {DType::kI32, DType::kI64})
      for (const auto& shape : kShapes) {
        const std::string what = fmt::format("{} {}{}", OpName(op), DTypeName(dt), ShapeStr(shape));
        HostTensor x = Rand(dt, shape, rng, -1000, 1000);
        auto out = RunOp(op, {x});
        ASSERT_EQ(out.size(), 1u) << what;
        ASSERT_EQ(out[0].dtype, op == OpKind::kArgmax ? DType::kI64 : dt) << what;
        ExpectExact(out[0], Reduced(shape), RefReduce(op, x), what);
      }
}

// Ties: the first index of the maximum wins.
NUMERICS_TEST(ReductionNumerics, ArgmaxTiesPickFirst, OpKind::kArgmax) {
  HostTensor x(DType::kBF16, {2, 5});
  const double vals[] = {0.5, 2.0, -1.0, 2.0, 1.0, 3.0, 3.0, 3.0, -3.0, 3.0};
  for (int i = 0; i < 10; ++i) x.set(i, vals[i]);
  auto out = RunOp(OpKind::kArgmax, {x});
  ASSERT_EQ(out.size(), 1u);
  ExpectExact(out[0], {2, 1}, {1.0, 0.0}, "argmax ties");
}

}  // namespace
}  // namespace opfuse::test
