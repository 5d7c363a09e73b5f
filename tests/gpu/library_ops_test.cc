// Library kernels of the unfused path (src/kernels/{elementwise,reduction,view,embedding}.cu) against
// the CPU reference, one node at a time.
//
// Design: every op of these families (walked from ops.def) must report HasLibraryKernel and have
// at least one case here, or a host-side test fails. Each case is a one-node graph in .ofg text;
// the runner makes fresh signed random inputs (RandomInputs with a std::random_device seed,
// printed), shapes them for the op (positive for log/sqrt, coarse for comparisons and argmax so
// ties and equality happen, signed integers, NaNs for max/argmax), computes RunGraphCpu, uploads,
// poisons the outputs (0xFF bytes, then a second run with 0x5A bytes so an unwritten integer that
// happens to equal -1 cannot hide), plans with PlanLibraryNode, launches, and compares:
// bit-exact ops (views, embedding, max/argmax, where, casts, comparisons, + - * / mod min max,
// sqrt/recip, neg/abs/relu — IEEE f32 on both sides) must match exactly; transcendental ops, rsqrt
// and sum/mean get per-dtype bounds per element (rtol * (|ref| + rms(ref))) and norm-wise. NaN
// where the reference has none, all-zero references (a useless case) and modified inputs fail.
// Every case runs with cudaMalloc'd (256-byte aligned) pointers and again with every input and
// output offset by one element. Shapes: decode (1 row), prefill-ish (513 rows), odd widths (1,
// 77, 1001), each broadcast form, general n-d broadcast, weak f32 scalars on bf16 tensors.
//
// Host-only tests (run without a GPU): op coverage, FastDivmod exactness, planner choices
// (vector width, launch shape) on a hand-filled DeviceInfo, and clean errors for unsupported
// combinations. LibraryOpsBandwidth times the large cases against a 1 GiB copy measured in the same
// run, with a bound per case at about half of what the kernel reaches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "jit_cases.h"
#include "opfuse/graph.h"
#include "fake_device.h"
#include "runtime/cpu/cpu_executor.h"
#include "ir/host_tensor.h"

#ifdef OPFUSE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/fast_divmod.cuh"
#include "kernels/library.h"
#include "gpu/gpu_test_util.h"
#include "cuda/device.h"
#endif

namespace opfuse {
namespace {

#ifndef OPFUSE_WITH_CUDA

TEST(LibraryOps, BuiltWithoutCuda) { GTEST_SKIP() << "built without OPFUSE_CUDA"; }

#else

using kernels::TensorRef;

// ------------------------------------------------------------------ cases
// Input shaping flags of a case.
constexpr unsigned kPositive = 1;       // float inputs -> |x| + 0.05 (log, sqrt, ...)
constexpr unsigned kPositiveFirst = 2;  // only the first input positive (pow's base)
constexpr unsigned kCoarse = 4;         // floats rounded to multiples of 0.25: ties and equality happen
constexpr unsigned kScale = 8;          // floats x 100 (casts to integers)
constexpr unsigned kNaN = 16;           // NaN in some elements of the first float input
constexpr unsigned kHuge = 32;          // floats x 3e9, integers x 1e12 (saturating casts)
constexpr unsigned kAllowZero = 64;     // an all-zero reference is legitimate

struct Case {
  std::string name;
  OpKind op;
  std::string text;
  unsigned flags = 0;
  bool exact = false;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string Ty(DType t, const std::vector<int64_t>& s) { return fmt::format("{}[{}]", DTypeName(t), fmt::join(s, ", ")); }
std::string Dims(const std::vector<int64_t>& s) {
  if (s.empty()) return "s";
  return fmt::format("{}", fmt::join(s, "x"));
}

// A one-node graph: inputs (name, type), y = op(inputs) {attrs}.
std::string OneNode(OpKind op, const std::vector<std::pair<std::string, std::string>>& inputs, const std::string& attrs = "") {
  std::string t = "graph t\n";
  std::vector<std::string> names;
  for (const auto& [n, ty] : inputs) {
    t += fmt::format("input {}: {}\n", n, ty);
    names.push_back(n);
  }
  t += fmt::format("y = {}({})", OpName(op), fmt::join(names, ", "));
  if (!attrs.empty()) t += " {" + attrs + "}";
  return t + "\noutput y\n";
}

bool IsExactOp(OpKind op) {
  switch (op) {
    case OpKind::kExp: case OpKind::kExp2: case OpKind::kLog: case OpKind::kLog2: case OpKind::kSin:
    case OpKind::kCos: case OpKind::kTanh: case OpKind::kSigmoid: case OpKind::kSilu: case OpKind::kGelu:
    case OpKind::kGeluTanh: case OpKind::kPow: case OpKind::kSum: case OpKind::kMean: case OpKind::kRsqrt:
      return false;
    default:
      return true;
  }
}

bool InFamilies(OpKind op) {
  const auto k = GetOpInfo(op).kind;
  return k == FusionKind::kElementwise || k == FusionKind::kBroadcast || k == FusionKind::kReduction ||
         k == FusionKind::kView || op == OpKind::kEmbedding;
}

constexpr DType kFloats[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr DType kAll[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kBool};

std::vector<Case> BuildCases() {
  std::vector<Case> cs;
  auto add = [&](std::string name, OpKind op, std::string text, unsigned flags = 0) {
    for (char& ch : name)
      if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    cs.push_back({std::move(name), op, std::move(text), flags, IsExactOp(op)});
  };
  const std::vector<std::vector<int64_t>> unary_shapes = {{1, 1}, {1, 77}, {513, 1001}, {64, 2048}};

  // ---- unary
  for (int i = 0; i < kNumOps; ++i) {
    const OpKind op = static_cast<OpKind>(i);
    if (GetOpInfo(op).kind != FusionKind::kElementwise || op == OpKind::kCast) continue;
    const bool positive = op == OpKind::kLog || op == OpKind::kLog2 || op == OpKind::kSqrt || op == OpKind::kRsqrt;
    for (DType t : kFloats)
      for (const auto& s : unary_shapes)
        add(fmt::format("{}_{}_{}", OpName(op), DTypeName(t), Dims(s)), op, OneNode(op, {{"x", Ty(t, s)}}),
            (positive ? kPositive : 0u) | (s[1] == 1 ? kAllowZero : 0u));
    if (!(GetOpInfo(op).flags & kFloatOnly))
      for (DType t : {DType::kI32, DType::kI64})
        add(fmt::format("{}_{}_513x77", OpName(op), DTypeName(t)), op, OneNode(op, {{"x", Ty(t, {513, 77})}}));
  }
  // ---- cast: every dtype pair
  for (DType from : kAll)
    for (DType to : kAll)
      add(fmt::format("cast_{}_to_{}", DTypeName(from), DTypeName(to)), OpKind::kCast,
          OneNode(OpKind::kCast, {{"x", Ty(from, {513, 77})}}, fmt::format("dtype={}", DTypeName(to))), kScale);
  add("cast_saturate_f32_to_i32", OpKind::kCast, OneNode(OpKind::kCast, {{"x", Ty(DType::kF32, {129, 33})}}, "dtype=i32"), kHuge | kNaN);
  add("cast_saturate_i64_to_i32", OpKind::kCast, OneNode(OpKind::kCast, {{"x", Ty(DType::kI64, {129, 33})}}, "dtype=i32"), kHuge);
  add("cast_nan_bf16_to_i64", OpKind::kCast, OneNode(OpKind::kCast, {{"x", Ty(DType::kBF16, {7, 100})}}, "dtype=i64"), kScale | kNaN);

  // ---- binary: every (op, dtype) on the basic forms; all forms on a few ops
  struct Form { const char* name; std::vector<int64_t> a, b; };
  const std::vector<Form> basic = {
      {"same", {513, 77}, {513, 77}},     {"same_vec", {64, 1024}, {64, 1024}}, {"row", {513, 77}, {77}},
      {"row_vec", {33, 1024}, {1024}},    {"col", {513, 77}, {513, 1}},         {"scalar", {513, 77}, {}},
      {"decode", {1, 2048}, {1, 2048}},
  };
  const std::vector<Form> extra = {
      {"row_rev", {77}, {513, 77}},         {"col_rev", {513, 1}, {513, 77}},   {"scalar_rev", {}, {1, 1001}},
      {"nd", {9, 3, 8}, {3, 1}},            {"outer", {4, 1, 8}, {1, 5, 1}},    {"nd_vec", {6, 4, 64}, {6, 1, 64}},
      {"rank5", {2, 3, 1, 4, 5}, {3, 2, 1, 5}}, {"col_vec", {40, 2048}, {40, 1}},
  };
  for (int i = 0; i < kNumOps; ++i) {
    const OpKind op = static_cast<OpKind>(i);
    if (GetOpInfo(op).kind != FusionKind::kBroadcast || op == OpKind::kWhere) continue;
    const bool compare = GetOpInfo(op).flags & kBoolOut;
    const bool float_only = GetOpInfo(op).flags & kFloatOnly;
    const unsigned fl = (op == OpKind::kPow ? kPositiveFirst : 0u) | (compare ? kCoarse : 0u);
    const bool all_forms = op == OpKind::kAdd || op == OpKind::kSub || op == OpKind::kDiv || op == OpKind::kLessThan ||
                           op == OpKind::kMod || op == OpKind::kPow;
    for (DType t : kAll) {
      if (float_only && !IsFloat(t)) continue;
      if (t == DType::kBool && !compare) continue;
      std::vector<Form> forms = basic;
      if (all_forms) forms.insert(forms.end(), extra.begin(), extra.end());
      for (const auto& f : forms)
        add(fmt::format("{}_{}_{}", OpName(op), DTypeName(t), f.name), op,
            OneNode(op, {{"a", Ty(t, f.a)}, {"b", Ty(t, f.b)}}), fl);
    }
  }
  // weak f32 scalars on f16/bf16 tensors
  for (DType t : {DType::kBF16, DType::kF16}) {
    add(fmt::format("mul_{}_weak_f32_scalar", DTypeName(t)), OpKind::kMul,
        OneNode(OpKind::kMul, {{"a", Ty(t, {513, 77})}, {"b", "f32[]"}}));
    add(fmt::format("sub_weak_f32_scalar_{}", DTypeName(t)), OpKind::kSub,
        OneNode(OpKind::kSub, {{"a", "f32[]"}, {"b", Ty(t, {64, 1024})}}));
    add(fmt::format("less_than_{}_weak_f32_scalar", DTypeName(t)), OpKind::kLessThan,
        OneNode(OpKind::kLessThan, {{"a", Ty(t, {513, 77})}, {"b", "f32[]"}}), kCoarse);
  }
  // ---- where
  for (DType t : kAll) {
    add(fmt::format("where_{}_same", DTypeName(t)), OpKind::kWhere,
        OneNode(OpKind::kWhere, {{"c", Ty(DType::kBool, {513, 77})}, {"a", Ty(t, {513, 77})}, {"b", Ty(t, {513, 77})}}));
    add(fmt::format("where_{}_same_vec", DTypeName(t)), OpKind::kWhere,
        OneNode(OpKind::kWhere, {{"c", Ty(DType::kBool, {64, 512})}, {"a", Ty(t, {64, 512})}, {"b", Ty(t, {64, 512})}}));
    add(fmt::format("where_{}_bcast", DTypeName(t)), OpKind::kWhere,
        OneNode(OpKind::kWhere, {{"c", Ty(DType::kBool, {513, 1})}, {"a", Ty(t, {77})}, {"b", Ty(t, {513, 77})}}));
    add(fmt::format("where_{}_row_vec", DTypeName(t)), OpKind::kWhere,
        OneNode(OpKind::kWhere, {{"c", Ty(DType::kBool, {8, 256})}, {"a", Ty(t, {32, 8, 256})}, {"b", Ty(t, {256})}}));
    add(fmt::format("where_{}_scalar", DTypeName(t)), OpKind::kWhere,
        OneNode(OpKind::kWhere, {{"c", Ty(DType::kBool, {513, 77})}, {"a", Ty(t, {513, 77})}, {"b", Ty(t, {})}}));
  }
  add("where_bf16_weak_f32_scalar", OpKind::kWhere,
      OneNode(OpKind::kWhere, {{"c", Ty(DType::kBool, {513, 77})}, {"a", Ty(DType::kBF16, {513, 77})}, {"b", "f32[]"}}));

  // ---- reductions
  // {1, 32000}, {16, 4096}, {3, 5001}: split over a cluster per row (uneven slices, scalar loads for the
  // last); {40, 4104}: too many rows for clusters, a block per row.
  const std::vector<std::vector<int64_t>> red_shapes = {{1, 2048}, {1, 32000}, {513, 77}, {513, 1001}, {16, 4096},
                                                        {5000, 128}, {3, 1}, {2, 3, 50}, {1, 1000}, {3, 5001}, {40, 4104}};
  for (OpKind op : {OpKind::kSum, OpKind::kMax, OpKind::kMean, OpKind::kArgmax})
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64}) {
      if (op == OpKind::kMean && !IsFloat(t)) continue;
      for (const auto& s : red_shapes) {
        unsigned fl = (op == OpKind::kArgmax || op == OpKind::kMax) ? kCoarse : 0u;
        if (op == OpKind::kArgmax && s.back() == 1) fl |= kAllowZero;
        add(fmt::format("{}_{}_{}", OpName(op), DTypeName(t), Dims(s)), op, OneNode(op, {{"x", Ty(t, s)}}), fl);
      }
    }
  for (DType t : kFloats)
    for (OpKind op : {OpKind::kMax, OpKind::kArgmax})
      for (const auto& s : std::vector<std::vector<int64_t>>{{513, 1001}, {2, 32000}, {64, 256}})
        add(fmt::format("{}_{}_{}_nan", OpName(op), DTypeName(t), Dims(s)), op, OneNode(op, {{"x", Ty(t, s)}}),
            kCoarse | kNaN);

  // ---- views
  struct Tr { std::vector<int64_t> s; std::vector<int64_t> perm; const char* name; };
  const std::vector<Tr> trs = {
      {{513, 77}, {1, 0}, "2d"},           {{4, 33, 65}, {0, 2, 1}, "last_two"},  {{2, 3, 4, 5}, {2, 0, 3, 1}, "general"},
      {{6, 7, 16}, {1, 0, 2}, "inner_kept"}, {{3, 1, 5}, {2, 1, 0}, "unit_dim"}, {{9, 64}, {0, 1}, "identity"},
      {{5, 8, 3, 64}, {0, 2, 1, 3}, "heads"}, {{64, 2048}, {1, 0}, "wide"},      {{2, 1, 3, 1, 4, 5}, {5, 3, 4, 1, 0, 2}, "rank6"},
  };
  for (DType t : {DType::kF32, DType::kBF16, DType::kI64, DType::kBool})
    for (const auto& tr : trs)
      add(fmt::format("transpose_{}_{}", DTypeName(t), tr.name), OpKind::kTranspose,
          OneNode(OpKind::kTranspose, {{"x", Ty(t, tr.s)}}, fmt::format("perm=[{}]", fmt::join(tr.perm, ", "))));
  struct Sl { std::vector<int64_t> s; std::string attrs; const char* name; };
  const std::vector<Sl> sls = {
      {{513, 77}, "axis=1, start=3, end=-2", "neg_end"},  {{9, 64}, "axis=0, start=1, end=7", "rows"},
      {{5, 100}, "axis=-1, start=-10", "neg_start"},      {{4, 10, 33}, "axis=1, start=2, end=-3", "mid_axis"},
      {{1, 2048}, "axis=1, start=1024, end=2048", "decode_vec"}, {{16, 96}, "axis=1, start=32, end=64", "aligned"},
  };
  for (DType t : {DType::kF32, DType::kBF16, DType::kBool, DType::kI64})
    for (const auto& sl : sls)
      add(fmt::format("slice_{}_{}", DTypeName(t), sl.name), OpKind::kSlice, OneNode(OpKind::kSlice, {{"x", Ty(t, sl.s)}}, sl.attrs));
  for (DType t : {DType::kF32, DType::kBF16, DType::kI32, DType::kBool}) {
    add(fmt::format("concat3_{}_axis0", DTypeName(t)), OpKind::kConcat,
        OneNode(OpKind::kConcat, {{"a", Ty(t, {3, 77})}, {"b", Ty(t, {5, 77})}, {"c", Ty(t, {1, 77})}}, "axis=0"));
    add(fmt::format("concat3_{}_axis1", DTypeName(t)), OpKind::kConcat,
        OneNode(OpKind::kConcat, {{"a", Ty(t, {513, 7})}, {"b", Ty(t, {513, 64})}, {"c", Ty(t, {513, 1})}}, "axis=1"));
    add(fmt::format("concat3_{}_mid", DTypeName(t)), OpKind::kConcat,
        OneNode(OpKind::kConcat, {{"a", Ty(t, {4, 2, 32})}, {"b", Ty(t, {4, 6, 32})}, {"c", Ty(t, {4, 8, 32})}}, "axis=1"));
    std::vector<std::pair<std::string, std::string>> many;
    for (int k = 0; k < 11; ++k) many.push_back({fmt::format("x{}", k), Ty(t, {17, 1 + k})});
    add(fmt::format("concat11_{}_axis_neg1", DTypeName(t)), OpKind::kConcat, OneNode(OpKind::kConcat, many, "axis=-1"));
  }
  for (DType t : {DType::kF32, DType::kBF16, DType::kBool})
    add(fmt::format("reshape_{}", DTypeName(t)), OpKind::kReshape,
        OneNode(OpKind::kReshape, {{"x", Ty(t, {513, 77})}}, "shape=[77, 513]"));

  // ---- embedding
  struct Emb { DType table; int64_t v, d; DType ids; std::vector<int64_t> ids_shape; const char* name; };
  const std::vector<Emb> embs = {
      {DType::kBF16, 1000, 2048, DType::kI32, {7}, "bf16_d2048_i32"},   {DType::kF32, 500, 77, DType::kI64, {2, 9}, "f32_d77_i64"},
      {DType::kF16, 300, 64, DType::kI32, {1}, "f16_decode_i32"},       {DType::kBF16, 64, 1, DType::kI64, {33}, "bf16_d1_i64"},
      {DType::kF32, 1000, 1001, DType::kI32, {3, 5}, "f32_d1001_i32"},  {DType::kI32, 50, 16, DType::kI64, {40}, "i32_table_i64"},
      {DType::kBF16, 2000, 4096, DType::kI64, {1}, "bf16_decode_d4096"},
  };
  for (const auto& e : embs)
    add(fmt::format("embedding_{}", e.name), OpKind::kEmbedding,
        OneNode(OpKind::kEmbedding, {{"table", Ty(e.table, {e.v, e.d})}, {"ids", Ty(e.ids, e.ids_shape)}}));
  return cs;
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cs = BuildCases();
  return cs;
}

// ------------------------------------------------------------------ host-only tests

TEST(LibraryOpsHost, EveryFamilyOpHasAKernelAndACase) {
  std::set<OpKind> covered;
  for (const auto& c : Cases()) covered.insert(c.op);
  int n = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const OpKind op = static_cast<OpKind>(i);
    if (!InFamilies(op)) continue;
    ++n;
    EXPECT_TRUE(kernels::HasLibraryKernel(op)) << OpName(op);
    EXPECT_TRUE(covered.count(op)) << OpName(op) << " has no case in library_ops_test.cc";
  }
  EXPECT_GE(n, 42);  // 18 unary + 15 broadcast + 4 reductions + 4 views + embedding
  std::set<std::string> names;
  for (const auto& c : Cases()) EXPECT_TRUE(names.insert(c.name).second) << "duplicate case " << c.name;
}

// fusion::HasFusedLibraryKernel (the schedule pass's "library" variant) assumes every composite op
// has its fused library kernel.
TEST(LibraryOpsHost, EveryCompositeHasALibraryKernel) {
  int n = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const OpKind op = static_cast<OpKind>(i);
    if (GetOpInfo(op).kind != FusionKind::kComposite) continue;
    ++n;
    EXPECT_TRUE(kernels::HasLibraryKernel(op)) << OpName(op);
  }
  EXPECT_GE(n, 7);
}

TEST(LibraryOpsHost, FastDivmodIsExact) {
  std::mt19937_64 rng(std::random_device{}());
  const uint32_t lim = static_cast<uint32_t>(kernels::kFastIndexLimit);
  std::vector<uint32_t> divisors = {1, 2, 3, 5, 7, 8, 77, 1001, 1024, 2048, 32000, 65535, 65536, 1u << 20, (1u << 30) + 1,
                                    lim - 1, lim};
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + static_cast<uint32_t>(rng() % lim));
  for (uint32_t d : divisors) {
    const kernels::FastDivmod f(d);
    std::vector<uint32_t> ns = {0, 1, d - 1, d, d + 1, lim - 1, lim, lim / d * d, lim / d * d - 1};
    for (int i = 0; i < 500; ++i) ns.push_back(static_cast<uint32_t>(rng() % (uint64_t{lim} + 1)));
    for (uint32_t n : ns) {
      if (n > lim) continue;
      uint32_t q, r;
      f.DivMod(n, q, r);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(r, n % d) << n << " % " << d;
    }
  }
}

using testing_device::FakeH200;  // tests/fake_device.h

// Plans the single node of `text` on fake pointers (never dereferenced): `misalign` bytes added to
// every pointer.
StatusOr<std::vector<cuda::KernelLaunch>> PlanFake(const std::string& text, int64_t misalign = 0,
                                                   std::function<void(std::vector<TensorRef>&, std::vector<TensorRef>&)> edit = {}) {
  auto g = ParseGraph(text);
  if (!g.ok()) return g.status();
  const Node& n = g->nodes.at(0);
  std::vector<TensorRef> in, out;
  uintptr_t next = 0x100000;
  auto ref = [&](int v) {
    const auto& ty = g->values[v].type;
    TensorRef r;
    r.dtype = ty.dtype;
    for (const auto& d : ty.shape) r.shape.push_back(d.value);
    r.data = reinterpret_cast<void*>(next + misalign);
    next += 0x10000000;
    return r;
  };
  for (int v : n.inputs) in.push_back(ref(v));
  for (int v : n.outputs) out.push_back(ref(v));
  if (edit) edit(in, out);
  return kernels::PlanLibraryNode(n, in, out, FakeH200());
}

std::string LaunchNames(const std::vector<cuda::KernelLaunch>& ls) {
  std::string s;
  for (const auto& l : ls) s += (s.empty() ? "" : ",") + l.name();
  return s;
}

void ExpectPlan(const std::string& text, const std::string& want_substr, int64_t misalign = 0, size_t launches = 1) {
  auto p = PlanFake(text, misalign);
  ASSERT_TRUE(p.ok()) << p.status().ToString() << "\n" << text;
  EXPECT_EQ(p->size(), launches) << LaunchNames(*p);
  EXPECT_NE(LaunchNames(*p).find(want_substr), std::string::npos) << LaunchNames(*p) << " lacks " << want_substr;
  for (const auto& l : *p) {
    EXPECT_GT(l.block().x * l.block().y, 0u);
    EXPECT_LE(l.block().x * l.block().y * l.block().z, 1024u);
    EXPECT_LE(l.grid().x, 132u * 16);  // one wave of blocks at most, grid-stride beyond
  }
}

TEST(LibraryOpsHost, PlannerPicksVectorsAndShapes) {
  const std::string add_big = OneNode(OpKind::kAdd, {{"a", "bf16[16384, 2048]"}, {"b", "bf16[16384, 2048]"}});
  ExpectPlan(add_big, "ew_add_bf16_flat_v8");
  ExpectPlan(add_big, "ew_add_bf16_flat_v1", 2);  // one element off: scalar loads
  ExpectPlan(OneNode(OpKind::kAdd, {{"a", "f32[513, 1024]"}, {"b", "f32[1024]"}}), "ew_add_f32_nd2_v4");
  ExpectPlan(OneNode(OpKind::kAdd, {{"a", "f32[513, 77]"}, {"b", "f32[77]"}}), "ew_add_f32_nd2_v1");
  ExpectPlan(OneNode(OpKind::kMul, {{"a", "bf16[513, 1024]"}, {"b", "bf16[513, 1]"}}), "ew_mul_bf16_nd2_v8_ib");
  ExpectPlan(OneNode(OpKind::kMul, {{"a", "bf16[513, 1024]"}, {"b", "bf16[513, 1]"}}), "ew_mul_bf16_nd2_v1", 2);
  ExpectPlan(OneNode(OpKind::kMul, {{"a", "bf16[513, 77]"}, {"b", "f32[]"}}), "ew_mul_bf16_flat_v8");
  ExpectPlan(OneNode(OpKind::kAdd, {{"a", "f32[4, 1, 8]"}, {"b", "f32[1, 5, 1]"}}), "ew_add_f32_nd3");
  ExpectPlan(OneNode(OpKind::kLessThan, {{"a", "f32[64, 64]"}, {"b", "f32[64, 64]"}}), "ew_less_than_f32_flat_v4");
  ExpectPlan(OneNode(OpKind::kWhere, {{"c", "bool[64, 64]"}, {"a", "bf16[64, 64]"}, {"b", "bf16[64, 64]"}}), "ew_where_bf16_flat_v8");
  ExpectPlan(OneNode(OpKind::kCast, {{"x", "f32[64, 64]"}}, "dtype=bf16"), "ew_cast_f32_to_bf16_flat_v4");
  ExpectPlan(OneNode(OpKind::kExp, {{"x", "bf16[16384, 2048]"}}), "ew_exp_bf16_flat_v8");
  ExpectPlan(OneNode(OpKind::kSum, {{"x", "bf16[16384, 2048]"}}), "red_sum_bf16_warprow_v8");
  ExpectPlan(OneNode(OpKind::kSum, {{"x", "f32[1, 32000]"}}), "red_sum_f32_clusterrow_v4");
  ExpectPlan(OneNode(OpKind::kArgmax, {{"x", "bf16[16, 32000]"}}), "red_argmax_bf16_clusterrow_v8");
  ExpectPlan(OneNode(OpKind::kArgmax, {{"x", "bf16[17, 32000]"}}), "red_argmax_bf16_blockrow_v8");  // 17 x 8 > 132 SMs
  ExpectPlan(OneNode(OpKind::kSum, {{"x", "f32[1, 4095]"}}), "red_sum_f32_blockrow_v1");
  ExpectPlan(OneNode(OpKind::kArgmax, {{"x", "f32[513, 77]"}}), "red_argmax_f32_warprow_v1");
  ExpectPlan(OneNode(OpKind::kTranspose, {{"x", "bf16[64, 2048]"}}, "perm=[1, 0]"), "view_transpose_bf16_tiled2");
  ExpectPlan(OneNode(OpKind::kTranspose, {{"x", "bf16[5, 8, 3, 64]"}}, "perm=[0, 2, 1, 3]"), "view_transpose_bf16_permute4_u16");
  ExpectPlan(OneNode(OpKind::kTranspose, {{"x", "f32[3, 1, 64]"}}, "perm=[1, 0, 2]"), "view_transpose_f32_copy_u16");
  ExpectPlan(OneNode(OpKind::kSlice, {{"x", "bf16[16, 96]"}}, "axis=1, start=32, end=64"), "view_slice_bf16_u16");
  ExpectPlan(OneNode(OpKind::kSlice, {{"x", "bf16[513, 77]"}}, "axis=1, start=3, end=-2"), "view_slice_bf16_u2");
  ExpectPlan(OneNode(OpKind::kReshape, {{"x", "f32[64, 64]"}}, "shape=[4096]"), "view_reshape_f32_u16");
  ExpectPlan(OneNode(OpKind::kConcat, {{"a", "f32[3, 8]"}, {"b", "f32[5, 8]"}, {"c", "f32[1, 8]"}}, "axis=0"), "view_concat3_f32_u16.16.16");
  {
    std::vector<std::pair<std::string, std::string>> many;
    for (int k = 0; k < 11; ++k) many.push_back({fmt::format("x{}", k), "f32[17, 4]"});
    ExpectPlan(OneNode(OpKind::kConcat, many, "axis=-1"), "view_concat11_f32", 0, 2);  // 8 copies per launch
  }
  ExpectPlan(OneNode(OpKind::kEmbedding, {{"t", "bf16[32000, 4096]"}, {"i", "i64[7]"}}), "embedding_bf16_ids_i64_u16");
  ExpectPlan(OneNode(OpKind::kEmbedding, {{"t", "f32[100, 77]"}, {"i", "i32[7]"}}), "embedding_f32_ids_i32_u4");
}

void ExpectError(const std::string& what, const StatusOr<std::vector<cuda::KernelLaunch>>& p) {
  ASSERT_FALSE(p.ok()) << what << " planned: " << LaunchNames(*p);
  const auto code = p.status().code();
  EXPECT_TRUE(code == StatusCode::kUnimplemented || code == StatusCode::kInvalidArgument) << what << ": " << p.status().ToString();
  EXPECT_FALSE(p.status().message().empty()) << what;
}

TEST(LibraryOpsHost, UnsupportedCombinationsErrorCleanly) {
  using Refs = std::vector<TensorRef>;
  // Graphs that verify, with the TensorRefs then edited into combinations the graph could not express.
  ExpectError("exp on i32", PlanFake(OneNode(OpKind::kExp, {{"x", "f32[4, 8]"}}), 0,
                                     [](Refs& in, Refs& out) { in[0].dtype = out[0].dtype = DType::kI32; }));
  ExpectError("neg on bool", PlanFake(OneNode(OpKind::kNeg, {{"x", "i32[4, 8]"}}), 0,
                                      [](Refs& in, Refs& out) { in[0].dtype = out[0].dtype = DType::kBool; }));
  ExpectError("add on bool", PlanFake(OneNode(OpKind::kAdd, {{"a", "i32[4, 8]"}, {"b", "i32[4, 8]"}}), 0,
                                      [](Refs& in, Refs& out) { in[0].dtype = in[1].dtype = out[0].dtype = DType::kBool; }));
  ExpectError("pow on i64", PlanFake(OneNode(OpKind::kPow, {{"a", "f32[4, 8]"}, {"b", "f32[4, 8]"}}), 0,
                                     [](Refs& in, Refs& out) { in[0].dtype = in[1].dtype = out[0].dtype = DType::kI64; }));
  ExpectError("add f32 + bf16 tensor", PlanFake(OneNode(OpKind::kAdd, {{"a", "f32[4, 8]"}, {"b", "f32[4, 8]"}}), 0,
                                                [](Refs& in, Refs&) { in[1].dtype = DType::kBF16; }));
  ExpectError("add shape mismatch", PlanFake(OneNode(OpKind::kAdd, {{"a", "f32[4, 8]"}, {"b", "f32[4, 8]"}}), 0,
                                             [](Refs& in, Refs&) { in[1].shape = {3, 8}; }));
  ExpectError("where with f32 condition", PlanFake(OneNode(OpKind::kWhere, {{"c", "bool[4]"}, {"a", "f32[4]"}, {"b", "f32[4]"}}), 0,
                                                   [](Refs& in, Refs&) { in[0].dtype = DType::kF32; }));
  ExpectError("comparison with f32 output", PlanFake(OneNode(OpKind::kEqual, {{"a", "f32[4]"}, {"b", "f32[4]"}}), 0,
                                                     [](Refs&, Refs& out) { out[0].dtype = DType::kF32; }));
  ExpectError("cast attr disagrees", PlanFake(OneNode(OpKind::kCast, {{"x", "f32[4]"}}, "dtype=bf16"), 0,
                                              [](Refs&, Refs& out) { out[0].dtype = DType::kF16; }));
  ExpectError("sum of bool", PlanFake(OneNode(OpKind::kSum, {{"x", "i32[4, 8]"}}), 0,
                                      [](Refs& in, Refs& out) { in[0].dtype = out[0].dtype = DType::kBool; }));
  ExpectError("mean of i32", PlanFake(OneNode(OpKind::kMean, {{"x", "f32[4, 8]"}}), 0,
                                      [](Refs& in, Refs& out) { in[0].dtype = out[0].dtype = DType::kI32; }));
  ExpectError("argmax into i32", PlanFake(OneNode(OpKind::kArgmax, {{"x", "f32[4, 8]"}}), 0,
                                          [](Refs&, Refs& out) { out[0].dtype = DType::kI32; }));
  ExpectError("transpose converting", PlanFake(OneNode(OpKind::kTranspose, {{"x", "f32[4, 8]"}}, "perm=[1, 0]"), 0,
                                               [](Refs&, Refs& out) { out[0].dtype = DType::kBF16; }));
  ExpectError("concat converting", PlanFake(OneNode(OpKind::kConcat, {{"a", "f32[4, 8]"}, {"b", "f32[4, 8]"}}, "axis=0"), 0,
                                            [](Refs& in, Refs&) { in[1].dtype = DType::kF16; }));
  ExpectError("slice past the end", PlanFake(OneNode(OpKind::kSlice, {{"x", "f32[4, 8]"}}, "axis=1, start=2, end=6"), 0,
                                             [](Refs&, Refs& out) { out[0].shape = {4, 7}; }));
  ExpectError("embedding with f32 ids", PlanFake(OneNode(OpKind::kEmbedding, {{"t", "f32[10, 8]"}, {"i", "i32[3]"}}), 0,
                                                 [](Refs& in, Refs&) { in[1].dtype = DType::kF32; }));
  // Rank 9 that cannot coalesce (alternating broadcast dims): beyond the n-d kernels.
  ExpectError("broadcast rank 9", PlanFake(OneNode(OpKind::kAdd, {{"a", "f32[2, 1, 2, 1, 2, 1, 2, 1, 2]"},
                                                                  {"b", "f32[1, 2, 1, 2, 1, 2, 1, 2, 1]"}})));
  ExpectError("transpose rank 9", PlanFake(OneNode(OpKind::kTranspose, {{"x", "f32[2, 2, 2, 2, 2, 2, 2, 2, 2]"}},
                                                   "perm=[8, 7, 6, 5, 4, 3, 2, 1, 0]")));
  // Ops of other families are not this file's: PlanLibraryNode says so, no crash.
  auto m = PlanFake(OneNode(OpKind::kMatmul, {{"a", "f32[4, 8]"}, {"b", "f32[8, 4]"}}));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
}

// ------------------------------------------------------------------ GPU runner

bool AllZero(const HostTensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (t.get(i) != 0.0) return false;
  return true;
}

double Rtol(DType t) {
  switch (t) {
    case DType::kBF16: return 8e-3;
    case DType::kF16: return 1e-3;
    default: return 1e-5;
  }
}

void Shape(HostTensor& t, unsigned flags, bool first_float, std::mt19937_64& rng) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (IsFloat(t.dtype)) {
      double v = t.get(i);
      if ((flags & kPositive) || ((flags & kPositiveFirst) && first_float)) v = std::fabs(v) + 0.05;
      if (flags & kCoarse) v = std::round(v * 4) / 4;
      if (flags & kScale) v *= 100;
      if (flags & kHuge) v *= 3e9;
      if ((flags & kNaN) && first_float && (rng() % 97 == 0)) v = std::nan("");
      t.set(i, v);
    } else if (IsInt(t.dtype)) {
      int64_t v = t.get_int(i) - 8;  // signed: [-8, 8)
      if (flags & kHuge) v *= int64_t{1000000000000};
      t.set(i, static_cast<double>(v));
    }
  }
}

class LibraryOpsGpu : public testing_gpu::WithGpu<::testing::TestWithParam<Case>> {};

struct DevMem {
  std::vector<void*> ptrs;
  ~DevMem() {
    for (void* p : ptrs) cudaFree(p);
  }
};

void RunCase(const Case& c, const cuda::DeviceInfo& dev, bool unaligned) {
  auto g = ParseGraph(c.text);
  ASSERT_TRUE(g.ok()) << g.status().ToString() << "\n" << c.text;
  ASSERT_EQ(g->nodes.size(), 1u);
  const Node& node = g->nodes[0];
  // Fresh inputs; redrawn (at most 10 times) when the reference comes out all zeros — e.g. a
  // comparison against a scalar that no element passes — since such a case would test nothing.
  std::map<std::string, HostTensor> inputs;
  std::map<std::string, HostTensor> outputs;
  for (int attempt = 0;; ++attempt) {
    const uint64_t seed = std::random_device{}();
    std::printf("[ seed     ] %s%s %llu\n", c.name.c_str(), unaligned ? " unaligned" : "", static_cast<unsigned long long>(seed));
    inputs = RandomInputs(*g, {}, seed);
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
    bool first_float = true;
    for (int v : node.inputs) {
      HostTensor& t = inputs.at(g->values[v].name);
      if (node.op == OpKind::kEmbedding && v == node.inputs[1]) continue;  // ids stay in range
      Shape(t, c.flags, first_float && IsFloat(t.dtype), rng);
      if (IsFloat(t.dtype)) first_float = false;
    }
    auto ref = RunGraphCpu(*g, inputs);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    outputs = std::move(*ref);
    if ((c.flags & kAllowZero) || !AllZero(outputs.at("y"))) break;
    ASSERT_LT(attempt, 9) << "the reference is all zeros for 10 draws: the case tests nothing";
  }
  SCOPED_TRACE(::testing::Message() << c.name << (unaligned ? " unaligned" : " aligned") << " (seed printed above)");
  const HostTensor& want = outputs.at("y");
  // Absolute error allowed per output element of sum/mean: f32 accumulation of the row against the
  // reference's double, bounded by ~log2(cols) roundings of the row's sum of magnitudes.
  std::vector<double> red_atol;
  if ((node.op == OpKind::kSum || node.op == OpKind::kMean) && IsFloat(want.dtype)) {
    const HostTensor& x = inputs.at(g->values[node.inputs[0]].name);
    const int64_t cols = x.cols();
    for (int64_t r = 0; r < x.rows(); ++r) {
      double mag = 0;
      for (int64_t k = 0; k < cols; ++k) mag += std::fabs(x.get(r * cols + k));
      if (node.op == OpKind::kMean) mag /= std::max<int64_t>(cols, 1);
      red_atol.push_back(4.0 * std::log2(double(cols) + 2) * 6e-8 * mag);
    }
  }

  DevMem mem;
  std::vector<TensorRef> in_refs;
  std::vector<std::pair<void*, const HostTensor*>> uploaded;
  for (int v : node.inputs) {
    const HostTensor& h = inputs.at(g->values[v].name);
    const size_t off = unaligned ? DTypeSize(h.dtype) : 0;
    void* p = nullptr;
    ASSERT_CUDA(cudaMalloc(&p, h.data.size() + off + 16));
    mem.ptrs.push_back(p);
    char* dp = static_cast<char*>(p) + off;
    if (!h.data.empty()) ASSERT_CUDA(cudaMemcpy(dp, h.data.data(), h.data.size(), cudaMemcpyHostToDevice));
    in_refs.push_back({dp, h.dtype, h.shape});
    uploaded.push_back({dp, &h});
  }
  const size_t out_off = unaligned ? DTypeSize(want.dtype) : 0;
  void* op = nullptr;
  ASSERT_CUDA(cudaMalloc(&op, want.data.size() + out_off + 16));
  mem.ptrs.push_back(op);
  char* dout = static_cast<char*>(op) + out_off;
  std::vector<TensorRef> out_refs{{dout, want.dtype, want.shape}};

  auto launches = kernels::PlanLibraryNode(node, in_refs, out_refs, dev);
  ASSERT_TRUE(launches.ok()) << launches.status().ToString();
  ASSERT_FALSE(launches->empty());

  for (int poison : {0xFF, 0x5A}) {
    SCOPED_TRACE(::testing::Message() << "poison 0x" << std::hex << poison);
    ASSERT_CUDA(cudaMemset(dout, poison, want.data.size()));
    for (const auto& l : *launches) {
      Status st = l.Launch(nullptr);
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    ASSERT_CUDA(cudaGetLastError());
    ASSERT_CUDA(cudaDeviceSynchronize());
    HostTensor got(want.dtype, want.shape);
    if (!got.data.empty()) ASSERT_CUDA(cudaMemcpy(got.data.data(), dout, got.data.size(), cudaMemcpyDeviceToHost));

    const int64_t n = want.numel();
    if (want.dtype == DType::kBool) {
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_LE(got.data[i], 1) << "bool element " << i << " is byte " << int(got.data[i]) << " (unwritten?)";
        ASSERT_EQ(got.data[i], want.data[i] ? 1 : 0) << "element " << i;
      }
    } else if (!IsFloat(want.dtype)) {
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got.get_int(i), want.get_int(i)) << "element " << i;
    } else {
      double ss = 0;
      int64_t finite = 0;
      for (int64_t i = 0; i < n; ++i)
        if (std::isfinite(want.get(i))) {
          ss += want.get(i) * want.get(i);
          ++finite;
        }
      const double rms = finite ? std::sqrt(ss / finite) : 0;
      const double rtol = Rtol(want.dtype);
      for (int64_t i = 0; i < n; ++i) {
        const double r = want.get(i), x = got.get(i);
        if (std::isnan(r)) {
          ASSERT_TRUE(std::isnan(x)) << "element " << i << ": want NaN, got " << x;
          continue;
        }
        ASSERT_FALSE(std::isnan(x)) << "element " << i << " is NaN (unwritten?), want " << r;
        if (c.exact) {
          ASSERT_EQ(x, r) << "element " << i << " (bit-exact op)";
        } else {
          const double tol = red_atol.empty() ? rtol * (std::fabs(r) + rms) : rtol * std::fabs(r) + red_atol[i];
          ASSERT_LE(std::fabs(x - r), tol) << "element " << i << ": got " << x << " want " << r;
        }
      }
      if (!c.exact && finite == n && red_atol.empty()) {
        EXPECT_LE(testing_cases::RelErr(got, want), 3 * rtol);
      }
    }
  }
  // Inputs untouched.
  for (const auto& [dp, h] : uploaded) {
    std::vector<uint8_t> back(h->data.size());
    if (!back.empty()) ASSERT_CUDA(cudaMemcpy(back.data(), dp, back.size(), cudaMemcpyDeviceToHost));
    ASSERT_TRUE(back == h->data) << "an input was modified";
  }
}

TEST_P(LibraryOpsGpu, Aligned) { RunCase(GetParam(), dev_, false); }
TEST_P(LibraryOpsGpu, Unaligned) { RunCase(GetParam(), dev_, true); }

INSTANTIATE_TEST_SUITE_P(Ops, LibraryOpsGpu, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// Out-of-range ids: the row becomes 0xFF bytes (NaN for float tables), other rows are exact.
class LibraryOpsGpuOnly : public testing_gpu::WithGpu<::testing::Test> {};

TEST_F(LibraryOpsGpuOnly, EmbeddingOutOfRangeIdsGiveNanRows) {
  for (DType ids_t : {DType::kI32, DType::kI64}) {
    for (DType tab_t : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(tab_t) << " table, " << DTypeName(ids_t) << " ids");
      const int64_t V = 10, D = 72;
      auto g = ParseGraph(OneNode(OpKind::kEmbedding, {{"t", Ty(tab_t, {V, D})}, {"i", Ty(ids_t, {5})}}));
      ASSERT_TRUE(g.ok());
      std::mt19937_64 rng(std::random_device{}());
      HostTensor table(tab_t, {V, D}), ids(ids_t, {5});
      FillRandom(table, rng);
      const int64_t id_values[5] = {3, -1, V, 0, V - 1};
      for (int i = 0; i < 5; ++i) ids.set(i, static_cast<double>(id_values[i]));
      DevMem mem;
      void *dt, *di, *dy;
      ASSERT_CUDA(cudaMalloc(&dt, table.data.size()));
      ASSERT_CUDA(cudaMalloc(&di, ids.data.size()));
      ASSERT_CUDA(cudaMalloc(&dy, 5 * D * DTypeSize(tab_t)));
      mem.ptrs = {dt, di, dy};
      ASSERT_CUDA(cudaMemcpy(dt, table.data.data(), table.data.size(), cudaMemcpyHostToDevice));
      ASSERT_CUDA(cudaMemcpy(di, ids.data.data(), ids.data.size(), cudaMemcpyHostToDevice));
      ASSERT_CUDA(cudaMemset(dy, 0, 5 * D * DTypeSize(tab_t)));
      auto l = kernels::PlanLibraryNode(g->nodes[0], {{dt, tab_t, {V, D}}, {di, ids_t, {5}}}, {{dy, tab_t, {5, D}}}, dev_);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      for (const auto& x : *l) ASSERT_TRUE(x.Launch(nullptr).ok());
      ASSERT_CUDA(cudaDeviceSynchronize());
      HostTensor got(tab_t, {5, D});
      ASSERT_CUDA(cudaMemcpy(got.data.data(), dy, got.data.size(), cudaMemcpyDeviceToHost));
      for (int r = 0; r < 5; ++r)
        for (int64_t c = 0; c < D; ++c) {
          const double x = got.get(r * D + c);
          if (id_values[r] < 0 || id_values[r] >= V) ASSERT_TRUE(std::isnan(x)) << "row " << r << " col " << c;
          else ASSERT_EQ(x, table.get(id_values[r] * D + c)) << "row " << r << " col " << c;
        }
    }
  }
}

// ------------------------------------------------------------------ bandwidth (prints only)

float TimeMs(const std::function<void()>& launch, int reps) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < reps; ++i) launch();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / reps;
}

TEST_F(LibraryOpsGpuOnly, LibraryOpsBandwidth) {
  // `min_of_copy`: the bound on GB/s as a fraction of the copy ceiling, about half of what each kernel
  // reaches (docs/BENCHMARKS.md: flat elementwise and reductions 85-97 %, broadcasts 48-51 %,
  // transpose 41 %, a 16-row argmax 17 %), so only a real regression fails.
  struct Bw { const char* name; std::string text; double min_of_copy; };
  const std::vector<Bw> cases = {
      {"add bf16 16384x2048", OneNode(OpKind::kAdd, {{"a", "bf16[16384, 2048]"}, {"b", "bf16[16384, 2048]"}}), 0.45},
      {"add row-bcast bf16", OneNode(OpKind::kAdd, {{"a", "bf16[16384, 2048]"}, {"b", "bf16[2048]"}}), 0.25},
      {"mul col-bcast bf16", OneNode(OpKind::kMul, {{"a", "bf16[16384, 2048]"}, {"b", "bf16[16384, 1]"}}), 0.25},
      {"mul f32-scalar bf16", OneNode(OpKind::kMul, {{"a", "bf16[16384, 2048]"}, {"b", "f32[]"}}), 0.4},
      {"exp bf16 16384x2048", OneNode(OpKind::kExp, {{"x", "bf16[16384, 2048]"}}), 0.4},
      {"sum bf16 16384x2048", OneNode(OpKind::kSum, {{"x", "bf16[16384, 2048]"}}), 0.4},
      {"argmax f32 16x128256", OneNode(OpKind::kArgmax, {{"x", "f32[16, 128256]"}}), 0.08},
      {"transpose bf16 16384x2048", OneNode(OpKind::kTranspose, {{"x", "bf16[16384, 2048]"}}, "perm=[1, 0]"), 0.2},
  };
  // Ceiling: a 1 GiB device-to-device copy (bytes read + written).
  double ceiling = 0;
  {
    const size_t n = size_t{1} << 30;
    void *s = nullptr, *d = nullptr;
    if (cudaMalloc(&s, n) == cudaSuccess && cudaMalloc(&d, n) == cudaSuccess) {
      cudaMemset(s, 1, n);
      std::vector<float> t;
      for (int i = 0; i < 7; ++i) t.push_back(TimeMs([&] { cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToDevice); }, 5));
      std::sort(t.begin(), t.end());
      ceiling = 2.0 * n / (t[t.size() / 2] * 1e-3) / 1e9;
    }
    cudaFree(s);
    cudaFree(d);
  }
  std::printf("[lib-bw] device %s; copy ceiling (1 GiB D2D, read+write) %.0f GB/s\n", dev_.ToString().c_str(), ceiling);
  std::mt19937 rng(7);
  for (const auto& c : cases) {
    auto g = ParseGraph(c.text);
    ASSERT_TRUE(g.ok());
    const Node& node = g->nodes[0];
    auto bytes_of = [&](int v) {
      const auto& ty = g->values[v].type;
      return static_cast<size_t>(*NumElements(ty.shape) * DTypeSize(ty.dtype));
    };
    size_t set_bytes = 0;
    for (int v : node.inputs) set_bytes += bytes_of(v);
    for (int v : node.outputs) set_bytes += bytes_of(v);
    const int sets = static_cast<int>(std::max<size_t>(1, std::min<size_t>(8, 2 * size_t(dev_.l2_bytes) / set_bytes + 1)));
    DevMem mem;
    std::vector<std::vector<cuda::KernelLaunch>> plans;
    for (int s = 0; s < sets; ++s) {
      std::vector<TensorRef> in, out;
      for (int v : node.inputs) {
        const size_t b = bytes_of(v);
        void* p = nullptr;
        ASSERT_CUDA(cudaMalloc(&p, b));
        mem.ptrs.push_back(p);
        // Random bit patterns of values in [-1, 1) (bf16: sign | 0x3F00 | mantissa; f32 likewise).
        std::vector<uint16_t> h(b / 2);
        for (auto& x : h) x = static_cast<uint16_t>((rng() & 0x8000u) | 0x3F00u | (rng() & 0x7Fu));
        ASSERT_CUDA(cudaMemcpy(p, h.data(), b, cudaMemcpyHostToDevice));
        const auto& ty = g->values[v].type;
        TensorRef r{p, ty.dtype, {}};
        for (const auto& d : ty.shape) r.shape.push_back(d.value);
        in.push_back(r);
      }
      for (int v : node.outputs) {
        void* p = nullptr;
        ASSERT_CUDA(cudaMalloc(&p, bytes_of(v)));
        mem.ptrs.push_back(p);
        const auto& ty = g->values[v].type;
        TensorRef r{p, ty.dtype, {}};
        for (const auto& d : ty.shape) r.shape.push_back(d.value);
        out.push_back(r);
      }
      auto l = kernels::PlanLibraryNode(node, in, out, dev_);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      plans.push_back(*l);
    }
    int si = 0;
    bool ok = true;
    auto launch = [&] {
      for (const auto& l : plans[si]) ok = ok && l.Launch(nullptr).ok();
      si = (si + 1) % sets;
    };
    for (int i = 0; i < 10; ++i) launch();
    ASSERT_CUDA(cudaDeviceSynchronize());
    ASSERT_TRUE(ok);
    std::vector<float> samples;
    for (int i = 0; i < 15; ++i) samples.push_back(TimeMs(launch, 20));
    std::sort(samples.begin(), samples.end());
    const double us = samples[samples.size() / 2] * 1e3;
    const double gbs = set_bytes / (us * 1e-6) / 1e9;
    std::printf("[lib-bw] %-28s %9.2f us  %7.0f GB/s  %5.1f%% of copy  (%s, %d input sets)\n", c.name, us, gbs,
                ceiling > 0 ? 100.0 * gbs / ceiling : 0.0, plans[0][0].name().c_str(), sets);
    ASSERT_GT(ceiling, 0) << "the copy ceiling could not be measured";
    EXPECT_GE(gbs, c.min_of_copy * ceiling) << c.name << ": " << gbs << " GB/s of a " << ceiling << " GB/s copy";
  }
  ASSERT_CUDA(cudaGetLastError());
}

#endif  // OPFUSE_WITH_CUDA

}  // namespace
}  // namespace opfuse
