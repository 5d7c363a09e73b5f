// Numerics of the views (reshape, transpose, slice, concat) and the source op (constant): exact
// comparisons, since views move data without arithmetic, for every dtype (floats, ints, bool),
// with references computed here from coordinates.
#include <cmath>

#include <fmt/format.h>

#include "numerics_harness.h"

namespace opfuse::test {
namespace {

const std::vector<DType> kAllDTypes = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kBool};

HostTensor Any(DType dt, const std::vector<int64_t>& s, std::mt19937_64& rng) {
  return dt == DType::kBool ? RandBool(s, rng) : Rand(dt, s, rng, -1000, 1000);
}

DimList Dims(std::initializer_list<int64_t> v) {
  DimList l;
  for (auto x : v) l.push_back(Dim(x));
  return l;
}

std::vector<int64_t> Coords(int64_t i, const std::vector<int64_t>& s) {
  std::vector<int64_t> c(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    c[d] = i % s[d];
    i /= s[d];
  }
  return c;
}

int64_t Flat(const std::vector<int64_t>& c, const std::vector<int64_t>& s) {
  int64_t i = 0;
  for (size_t d = 0; d < s.size(); ++d) i = i * s[d] + c[d];
  return i;
}

NUMERICS_TEST(ViewNumerics, Reshape, OpKind::kReshape) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  struct Case { std::vector<int64_t> in; DimList attr; std::vector<int64_t> out; };
  const std::vector<Case> cases = {{{2, 3, 4}, Dims({6, 4}), {6, 4}}, {{4, 6}, Dims({4, -1, 3}), {4, 2, 3}},
                                   {{7}, Dims({1, 7}), {1, 7}},        {{3, 5}, Dims({15}), {15}}};
  for (DType dt : kAllDTypes)
    for (const auto& c : cases) {
      const std::string what = fmt::format("reshape {}{} -> {}", DTypeName(dt), ShapeStr(c.in), ShapeStr(c.out));
      HostTensor x = Any(dt, c.in, rng);
      auto out = RunOp(OpKind::kReshape, {x}, {{"shape", c.attr}});
      ASSERT_EQ(out.size(), 1u) << what;
      ExpectExact(out[0], c.out, Values(x), what);
    }
}

NUMERICS_TEST(ViewNumerics, Transpose, OpKind::kTranspose) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  struct Case { std::vector<int64_t> in, perm; };
  const std::vector<Case> cases = {{{2, 3}, {1, 0}}, {{2, 3, 4}, {2, 0, 1}}, {{2, 3, 4, 5}, {0, 2, 1, 3}},
                                   {{5}, {0}},       {{3, 1, 7}, {1, 2, 0}}, {{4, 33}, {1, 0}}};
  for (DType dt : kAllDTypes)
    for (const auto& c : cases) {
      const std::string what = fmt::format("transpose {}{} perm {}", DTypeName(dt), ShapeStr(c.in), ShapeStr(c.perm));
      HostTensor x = Any(dt, c.in, rng);
      DimList perm;
      std::vector<int64_t> oshape;
      for (auto p : c.perm) {
        perm.push_back(Dim(p));
        oshape.push_back(c.in[p]);
      }
      auto out = RunOp(OpKind::kTranspose, {x}, {{"perm", perm}});
      ASSERT_EQ(out.size(), 1u) << what;
      std::vector<double> ref(static_cast<size_t>(x.numel()));
      for (int64_t i = 0; i < x.numel(); ++i) {
        const auto oc = Coords(i, oshape);
        std::vector<int64_t> ic(c.in.size());
        for (size_t d = 0; d < oc.size(); ++d) ic[c.perm[d]] = oc[d];
        ref[i] = x.get(Flat(ic, c.in));
      }
      ExpectExact(out[0], oshape, ref, what);
    }
}

NUMERICS_TEST(ViewNumerics, Slice, OpKind::kSlice) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  struct Case { std::vector<int64_t> in; int64_t axis, start; std::optional<int64_t> end; int64_t lo, hi; };
  const std::vector<Case> cases = {{{4, 7}, 1, 2, 5, 2, 5},      {{4, 7}, 0, -3, std::nullopt, 1, 4},
                                   {{4, 7}, -1, 0, -1, 0, 6},    {{2, 3, 8}, 2, 4, 8, 4, 8},
                                   {{2, 3, 8}, 1, 1, 2, 1, 2},   {{9}, 0, 0, 9, 0, 9}};
  for (DType dt : kAllDTypes)
    for (const auto& c : cases) {
      const std::string what = fmt::format("slice {}{} axis {} start {} end {}", DTypeName(dt), ShapeStr(c.in), c.axis,
                                           c.start, c.end ? std::to_string(*c.end) : "-");
      HostTensor x = Any(dt, c.in, rng);
      Attrs attrs{{"axis", c.axis}, {"start", c.start}};
      if (c.end) attrs["end"] = *c.end;
      auto out = RunOp(OpKind::kSlice, {x}, attrs);
      ASSERT_EQ(out.size(), 1u) << what;
      const size_t axis = static_cast<size_t>(c.axis < 0 ? c.axis + static_cast<int64_t>(c.in.size()) : c.axis);
      std::vector<int64_t> oshape = c.in;
      oshape[axis] = c.hi - c.lo;
      std::vector<double> ref;
      for (int64_t i = 0; i < Numel(oshape); ++i) {
        auto oc = Coords(i, oshape);
        oc[axis] += c.lo;
        ref.push_back(x.get(Flat(oc, c.in)));
      }
      ExpectExact(out[0], oshape, ref, what);
    }
}

NUMERICS_TEST(ViewNumerics, Concat, OpKind::kConcat) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  struct Case { std::vector<std::vector<int64_t>> in; int64_t axis; };
  const std::vector<Case> cases = {{{{2, 3}, {2, 4}}, 1},
                                   {{{1, 5}, {3, 5}, {2, 5}}, 0},
                                   {{{2, 3, 4}, {2, 3, 1}}, -1},
                                   {{{2, 1, 4}, {2, 2, 4}}, 1},
                                   {{{6}}, 0}};
  for (DType dt : kAllDTypes)
    for (const auto& c : cases) {
      const size_t axis = static_cast<size_t>(c.axis < 0 ? c.axis + static_cast<int64_t>(c.in[0].size()) : c.axis);
      std::vector<HostTensor> in;
      std::vector<int64_t> oshape = c.in[0];
      oshape[axis] = 0;
      std::string shapes;
      for (const auto& s : c.in) {
        in.push_back(Any(dt, s, rng));
        oshape[axis] += s[axis];
        shapes += ShapeStr(s);
      }
      const std::string what = fmt::format("concat {} {} axis {}", DTypeName(dt), shapes, c.axis);
      auto out = RunOp(OpKind::kConcat, in, {{"axis", c.axis}});
      ASSERT_EQ(out.size(), 1u) << what;
      std::vector<double> ref;
      for (int64_t i = 0; i < Numel(oshape); ++i) {
        auto oc = Coords(i, oshape);
        size_t k = 0;
        while (oc[axis] >= in[k].shape[axis]) oc[axis] -= in[k++].shape[axis];
        ref.push_back(in[k].get(Flat(oc, in[k].shape)));
      }
      ExpectExact(out[0], oshape, ref, what);
    }
}

NUMERICS_TEST(SourceNumerics, Constant, OpKind::kConstant) {
  OPFUSE_SEED_TRACE();
  auto rng = TestRng();
  std::uniform_real_distribution<double> u(-100, 100);
  for (DType dt : kAllDTypes)
    for (int rep = 0; rep < 4; ++rep) {
      double value = IsFloat(dt) ? u(rng) : std::round(u(rng));
      if (dt == DType::kBool) value = rep % 2;
      const std::string what = fmt::format("constant {} value {}", DTypeName(dt), value);
      auto out = RunOp(OpKind::kConstant, {}, {{"value", value}, {"dtype", std::string(DTypeName(dt))}});
      ASSERT_EQ(out.size(), 1u) << what;
      ASSERT_EQ(out[0].dtype, dt) << what;
      ExpectExact(out[0], {}, {IsFloat(dt) ? RoundTo(dt, value) : value}, what);
    }
}

}  // namespace
}  // namespace opfuse::test
