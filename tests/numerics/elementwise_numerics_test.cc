// Numerics of the elementwise ops (unary, cast, broadcast binary, comparisons, where): each op's CPU
// reference vs a double-precision reference written here, on fresh signed random inputs, for f32,
// bf16 and f16 (and i32/i64/bool where the op takes them), several shapes with odd widths and
// numpy broadcasting, outputs poisoned before the run. Inputs are drawn from each op's domain
// (positive for log/sqrt, divisors away from zero); comparisons use small integers stored in the
// float dtype so that ties (equal, less_equal) actually occur.
#include <algorithm>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "numerics_harness.h"

namespace opfuse::test {
namespace {

const std::vector<std::vector<int64_t>> kShapes = {{}, {1}, {7}, {3, 5}, {4, 33}, {2, 3, 17}, {1, 1, 130}};

// Pairs of operand shapes for broadcasting (a rank-0 operand is a weak scalar).
const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> kPairs = {
    {{1}, {1}},      {{7}, {7}},         {{4, 33}, {4, 33}}, {{4, 33}, {33}}, {{4, 1}, {1, 33}},
    {{2, 3, 17}, {3, 1}}, {{5, 7}, {}},  {{}, {6}},          {{3, 1, 5}, {1, 4, 1}}};

std::vector<int64_t> BroadcastShape(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// The operand element read for output element i (right-aligned, size-1 dims repeat).
int64_t SourceIndex(int64_t i, const std::vector<int64_t>& out, const std::vector<int64_t>& in) {
  std::vector<int64_t> coord(out.size());
  for (size_t d = out.size(); d-- > 0;) {
    coord[d] = i % out[d];
    i /= out[d];
  }
  int64_t idx = 0;
  const size_t off = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) idx = idx * in[d] + (in[d] == 1 ? 0 : coord[d + off]);
  return idx;
}

// ------------------------------------------------------------------ unary
double RefUnary(OpKind op, double x) {
  switch (op) {
    case OpKind::kNeg: return -x;
    case OpKind::kAbs: return std::fabs(x);
    case OpKind::kExp: return std::exp(x);
    case OpKind::kExp2: return std::pow(2.0, x);
    case OpKind::kLog: return std::log(x);
    case OpKind::kLog2: return std::log(x) / std::log(2.0);
    case OpKind::kSqrt: return std::sqrt(x);
    case OpKind::kRsqrt: return 1.0 / std::sqrt(x);
    case OpKind::kRecip: return 1.0 / x;
    case OpKind::kSin: return std::sin(x);
    case OpKind::kCos: return std::cos(x);
    case OpKind::kTanh: return std::tanh(x);
    case OpKind::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case OpKind::kSilu: return x / (1.0 + std::exp(-x));
    case OpKind::kGelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case OpKind::kGeluTanh: {
      const double k = std::sqrt(2.0 / M_PI);
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
    case OpKind::kRelu: return x > 0 ? x : 0.0;
    default: ADD_FAILURE() << "no reference for " << OpName(op); return 0;
  }
}

HostTensor UnaryInput(OpKind op, DType dt, const std::vector<int64_t>& shape, std::mt19937_64& rng) {
  switch (op) {
    case OpKind::kLog: case OpKind::kLog2: case OpKind::kSqrt: case OpKind::kRsqrt:
      return Rand(dt, shape, rng, 0.05, 3.0);
    case OpKind::kRecip:
      return RandSigned(dt, shape, rng, 0.25, 2.0);
    default:
      return Rand(dt, shape, rng, -3.0, 3.0);
  }
}

// gelu and gelu_tanh evaluate 0.5 * x * (1 + erf|tanh(...)) in f32: for negative x the sum
// cancels (1 + erf(-2) = 0.0047), so a one-element f32 case can reach a few 1e-5 of relative error.
double UnaryBound(OpKind op, DType dt) {
  if (dt == DType::kF32 && (op == OpKind::kGelu || op == OpKind::kGeluTanh)) return 1e-4;
  return RelBound(dt);
}

const std::vector<OpKind> kFloatUnary = {OpKind::kNeg,  OpKind::kAbs,     OpKind::kExp,  OpKind::kExp2,
                                         OpKind::kLog,  OpKind::kLog2,    OpKind::kSqrt, OpKind::kRsqrt,
                                         OpKind::kRecip, OpKind::kSin,    OpKind::kCos,  OpKind::kTanh,
                                         OpKind::kSigmoid, OpKind::kSilu, OpKind::kGelu, OpKind::kGeluTanh,
                                         OpKind::kRelu};

NUMERICS_TEST(ElementwiseNumerics, UnaryFloat, OpKind::kNeg, OpKind::kAbs, OpKind::kExp, OpKind::kExp2, OpKind::kLog,
              OpKind::kLog2, OpKind::kSqrt, OpKind::kRsqrt, OpKind::kRecip, OpKind::kSin, OpKind::kCos, OpKind::kTanh,
              OpKind::kSigmoid, OpKind::kSilu, OpKind::kGelu, OpKind::kGeluTanh, OpKind::kRelu) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  for (OpKind op : kFloatUnary)
    for (DType dt : FloatDTypes())
      for (const auto& shape : kShapes) {
        const std::string what = fmt::format("{} {}{}", OpName(op), DTypeName(dt), ShapeStr(shape));
        // Redraw the (rare, one-element) inputs whose exact result is zero — relu of a negative,
        // log2(1) — since a zero reference cannot catch a wrong result.
        HostTensor x;
        std::vector<double> ref;
        for (int attempt = 0; attempt < 50; ++attempt) {
          x = UnaryInput(op, dt, shape, rng);
          ref.clear();
          for (double v : Values(x)) ref.push_back(RefUnary(op, v));
          if (std::any_of(ref.begin(), ref.end(), [](double v) { return v != 0.0; })) break;
        }
        auto out = RunOp(op, {x});
        ASSERT_EQ(out.size(), 1u) << what;
        EXPECT_EQ(out[0].dtype, dt) << what;
        ExpectClose(out[0], shape, ref, UnaryBound(op, dt), what);
      }
}

NUMERICS_TEST(ElementwiseNumerics, UnaryInt, OpKind::kNeg, OpKind::kAbs, OpKind::kRelu) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  for (OpKind op : {OpKind::kNeg, OpKind::kAbs, OpKind::kRelu})
    for (DType dt : {DType::kI32, DType::kI64})
      for (const auto& shape : kShapes) {
        const std::string what = fmt::format("{} {}{}", OpName(op), DTypeName(dt), ShapeStr(shape));
        HostTensor x = Rand(dt, shape, rng, -100, 100);
        auto out = RunOp(op, {x});
        ASSERT_EQ(out.size(), 1u) << what;
        EXPECT_EQ(out[0].dtype, dt) << what;
        std::vector<double> ref;
        for (double v : Values(x)) ref.push_back(op == OpKind::kNeg ? -v : op == OpKind::kAbs ? std::fabs(v) : std::max(v, 0.0));
        ExpectExact(out[0], shape, ref, what);
      }
}

// ------------------------------------------------------------------ cast
NUMERICS_TEST(ElementwiseNumerics, CastAllPairs, OpKind::kCast) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  const std::vector<DType> all = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kBool};
  for (DType from : all)
    for (DType to : all)
      for (const auto& shape : {std::vector<int64_t>{9}, std::vector<int64_t>{3, 17}}) {
        const std::string what = fmt::format("cast {} -> {} {}", DTypeName(from), DTypeName(to), ShapeStr(shape));
        HostTensor x = from == DType::kBool ? RandBool(shape, rng) : Rand(from, shape, rng, -20, 20);
        if (IsFloat(from)) x.set(0, 0.0);  // zeros matter for casts to bool
        auto out = RunOp(OpKind::kCast, {x}, {{"dtype", std::string(DTypeName(to))}});
        ASSERT_EQ(out.size(), 1u) << what;
        ASSERT_EQ(out[0].dtype, to) << what;
        std::vector<double> ref;
        for (double v : Values(x)) {
          if (to == DType::kBool) ref.push_back(v != 0.0 ? 1.0 : 0.0);
          else if (IsInt(to)) ref.push_back(std::trunc(v));  // toward zero
          else ref.push_back(RoundTo(to, v));                 // one rounding to the target float type
        }
        ExpectExact(out[0], shape, ref, what);
      }
}

// ------------------------------------------------------------------ binary
double RefBinary(OpKind op, double a, double b) {
  switch (op) {
    case OpKind::kAdd: return a + b;
    case OpKind::kSub: return a - b;
    case OpKind::kMul: return a * b;
    case OpKind::kDiv: return a / b;
    case OpKind::kMaximum: return a > b ? a : b;
    case OpKind::kMinimum: return a < b ? a : b;
    case OpKind::kPow: return std::pow(a, b);
    case OpKind::kMod: {  // floored (Python's %): the result has the sign of b
      const double r = std::fmod(a, b);
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
    case OpKind::kLessThan: return a < b;
    case OpKind::kLessEqual: return a <= b;
    case OpKind::kGreaterThan: return a > b;
    case OpKind::kGreaterEqual: return a >= b;
    case OpKind::kEqual: return a == b;
    case OpKind::kNotEqual: return a != b;
    default: ADD_FAILURE() << "no reference for " << OpName(op); return 0;
  }
}

std::pair<HostTensor, HostTensor> BinaryInputs(OpKind op, DType dt, const std::vector<int64_t>& sa,
                                               const std::vector<int64_t>& sb, std::mt19937_64& rng) {
  // A rank-0 float operand is a weak scalar: give it f32 to exercise dtype adoption.
  const DType da = sa.empty() && IsFloat(dt) ? DType::kF32 : dt;
  const DType db = sb.empty() && IsFloat(dt) ? DType::kF32 : dt;
  switch (op) {
    case OpKind::kDiv:
    case OpKind::kMod:
      return {Rand(da, sa, rng, -3, 3), RandSigned(db, sb, rng, 0.25, 2.0)};
    case OpKind::kPow:
      return {Rand(da, sa, rng, 0.1, 2.0), Rand(db, sb, rng, -2, 2)};
    default:
      return {Rand(da, sa, rng, -2, 2), Rand(db, sb, rng, -2, 2)};
  }
}

NUMERICS_TEST(ElementwiseNumerics, BinaryFloat, OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv,
              OpKind::kMaximum, OpKind::kMinimum, OpKind::kPow, OpKind::kMod) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  for (OpKind op : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kMaximum, OpKind::kMinimum,
                    OpKind::kPow, OpKind::kMod})
    for (DType dt : FloatDTypes())
      for (const auto& [sa, sb] : kPairs) {
        const std::string what = fmt::format("{} {} {} x {}", OpName(op), DTypeName(dt), ShapeStr(sa), ShapeStr(sb));
        const auto so = BroadcastShape(sa, sb);
        std::vector<double> ref(static_cast<size_t>(Numel(so)));
        // Redraw the (rare, one-element) inputs whose exact result is all zero, e.g. a bf16 mod
        // with a multiple of b: a zero reference cannot catch a wrong result.
        HostTensor a, b;
        for (int attempt = 0; attempt < 50; ++attempt) {
          std::tie(a, b) = BinaryInputs(op, dt, sa, sb, rng);
          for (int64_t i = 0; i < Numel(so); ++i)
            ref[i] = RefBinary(op, a.get(SourceIndex(i, so, sa)), b.get(SourceIndex(i, so, sb)));
          if (std::any_of(ref.begin(), ref.end(), [](double v) { return v != 0.0; })) break;
        }
        auto out = RunOp(op, {a, b});
        ASSERT_EQ(out.size(), 1u) << what;
        // Both operands rank 0 -> the result is f32; otherwise the tensor operand's dtype.
        EXPECT_EQ(out[0].dtype, (sa.empty() && sb.empty()) ? DType::kF32 : dt) << what;
        ExpectClose(out[0], so, ref, what);
      }
}

NUMERICS_TEST(ElementwiseNumerics, Comparisons, OpKind::kLessThan, OpKind::kLessEqual, OpKind::kGreaterThan,
              OpKind::kGreaterEqual, OpKind::kEqual, OpKind::kNotEqual) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  for (OpKind op : {OpKind::kLessThan, OpKind::kLessEqual, OpKind::kGreaterThan, OpKind::kGreaterEqual, OpKind::kEqual,
                    OpKind::kNotEqual})
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64})
      for (const auto& [sa, sb] : kPairs) {
        if ((sa.empty() || sb.empty()) && !IsFloat(dt)) continue;  // int scalars are not weak
        const std::string what = fmt::format("{} {} {} x {}", OpName(op), DTypeName(dt), ShapeStr(sa), ShapeStr(sb));
        // Small integers in the dtype: ties happen, so equal / less_equal are really exercised.
        HostTensor a(dt, sa), b(dt, sb);
        std::uniform_int_distribution<int> u(-3, 3);
        for (int64_t i = 0; i < a.numel(); ++i) a.set(i, u(rng));
        for (int64_t i = 0; i < b.numel(); ++i) b.set(i, u(rng));
        auto out = RunOp(op, {a, b});
        ASSERT_EQ(out.size(), 1u) << what;
        ASSERT_EQ(out[0].dtype, DType::kBool) << what;
        const auto so = BroadcastShape(sa, sb);
        std::vector<double> ref(static_cast<size_t>(Numel(so)));
        for (int64_t i = 0; i < Numel(so); ++i)
          ref[i] = RefBinary(op, a.get(SourceIndex(i, so, sa)), b.get(SourceIndex(i, so, sb)));
        ExpectExact(out[0], so, ref, what);
      }
}

int64_t RefIntBinary(OpKind op, int64_t a, int64_t b) {
  switch (op) {
    case OpKind::kAdd: return a + b;
    case OpKind::kSub: return a - b;
    case OpKind::kMul: return a * b;
    case OpKind::kDiv: return b == 0 ? 0 : static_cast<int64_t>(std::trunc(static_cast<double>(a) / b));
    case OpKind::kMaximum: return std::max(a, b);
    case OpKind::kMinimum: return std::min(a, b);
    case OpKind::kMod:
      return b == 0 ? 0 : a - b * static_cast<int64_t>(std::floor(static_cast<double>(a) / b));
    default: ADD_FAILURE(); return 0;
  }
}

NUMERICS_TEST(ElementwiseNumerics, BinaryInt, OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv,
              OpKind::kMaximum, OpKind::kMinimum, OpKind::kMod) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  for (OpKind op : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kMaximum, OpKind::kMinimum,
                    OpKind::kMod})
    for (DType dt : {DType::kI32, DType::kI64})
      for (const auto& [sa, sb] : kPairs) {
        if (sa.empty() || sb.empty()) continue;
        const std::string what = fmt::format("{} {} {} x {}", OpName(op), DTypeName(dt), ShapeStr(sa), ShapeStr(sb));
        HostTensor a = Rand(dt, sa, rng, -50, 50), b = Rand(dt, sb, rng, -9, 9);  // b includes 0
        auto out = RunOp(op, {a, b});
        ASSERT_EQ(out.size(), 1u) << what;
        ASSERT_EQ(out[0].dtype, dt) << what;
        const auto so = BroadcastShape(sa, sb);
        std::vector<double> ref(static_cast<size_t>(Numel(so)));
        for (int64_t i = 0; i < Numel(so); ++i)
          ref[i] = static_cast<double>(RefIntBinary(op, a.get_int(SourceIndex(i, so, sa)), b.get_int(SourceIndex(i, so, sb))));
        ExpectExact(out[0], so, ref, what);
      }
}

NUMERICS_TEST(ElementwiseNumerics, Where, OpKind::kWhere) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  struct Case { std::vector<int64_t> c, a, b; };
  const std::vector<Case> cases = {{{4, 33}, {4, 33}, {4, 33}}, {{4, 1}, {4, 33}, {33}}, {{2, 3, 5}, {5}, {3, 1}},
                                   {{}, {7}, {7}}, {{6}, {1}, {6}}};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64})
    for (const auto& c : cases) {
      const std::string what = fmt::format("where {} {} {} {}", DTypeName(dt), ShapeStr(c.c), ShapeStr(c.a), ShapeStr(c.b));
      HostTensor cond = RandBool(c.c, rng), a = Rand(dt, c.a, rng, -5, 5), b = Rand(dt, c.b, rng, -5, 5);
      auto out = RunOp(OpKind::kWhere, {cond, a, b});
      ASSERT_EQ(out.size(), 1u) << what;
      ASSERT_EQ(out[0].dtype, dt) << what;
      const auto so = BroadcastShape(BroadcastShape(c.c, c.a), c.b);
      std::vector<double> ref(static_cast<size_t>(Numel(so)));
      for (int64_t i = 0; i < Numel(so); ++i)
        ref[i] = cond.get(SourceIndex(i, so, c.c)) != 0 ? a.get(SourceIndex(i, so, c.a)) : b.get(SourceIndex(i, so, c.b));
      ExpectExact(out[0], so, ref, what);  // a selection is exact
    }
}

}  // namespace
}  // namespace opfuse::test
