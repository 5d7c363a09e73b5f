// Implementation of numerics_harness.h: seeds, the coverage registry, random tensors, RunOp and
// the comparison helpers. RunOp deliberately bypasses the executor (it calls OpDef::cpu itself) so
// that poisoning and the written-element check are the test's own; executor behaviour has its own
// tests (executor_test.cc, llama_test.cc).
#include "numerics_harness.h"

#include <fmt/format.h>

#include "ops/op_def.h"

namespace opfuse::test {

uint64_t ProcessSeed() {
  static const uint64_t seed = [] {
    if (const char* env = std::getenv("OPFUSE_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(env, nullptr, 10));
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

namespace {
std::string CurrentTestName() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info ? std::string(info->test_suite_name()) + "." + info->name() : "";
}
}  // namespace

std::mt19937_64 TestRng() {
  const uint64_t h = std::hash<std::string>{}(CurrentTestName());
  return std::mt19937_64(ProcessSeed() ^ (h * 0x9E3779B97F4A7C15ull));
}

std::string SeedNote() {
  return fmt::format("seed {} (replay: OPFUSE_TEST_SEED={} --gtest_filter={})", ProcessSeed(), ProcessSeed(),
                     CurrentTestName());
}

std::map<std::string, std::vector<OpKind>>& CoverageRegistry() {
  static std::map<std::string, std::vector<OpKind>> r;
  return r;
}

bool RegisterCoverage(const char* test, std::initializer_list<OpKind> ops) {
  auto& v = CoverageRegistry()[test];
  v.insert(v.end(), ops.begin(), ops.end());
  return true;
}

const std::vector<DType>& FloatDTypes() {
  static const std::vector<DType> v{DType::kF32, DType::kBF16, DType::kF16};
  return v;
}

HostTensor Rand(DType dt, std::vector<int64_t> shape, std::mt19937_64& rng, double lo, double hi) {
  HostTensor t(dt, std::move(shape));
  if (IsFloat(dt)) {
    std::uniform_real_distribution<double> u(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, u(rng));
  } else if (dt == DType::kBool) {
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, static_cast<double>(rng() & 1));
  } else {
    std::uniform_int_distribution<int64_t> u(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, static_cast<double>(u(rng)));
  }
  return t;
}

HostTensor RandSigned(DType dt, std::vector<int64_t> shape, std::mt19937_64& rng, double lo, double hi) {
  HostTensor t(dt, std::move(shape));
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, (rng() & 1) ? u(rng) : -u(rng));
  return t;
}

HostTensor RandBool(std::vector<int64_t> shape, std::mt19937_64& rng) { return Rand(DType::kBool, std::move(shape), rng); }

std::vector<double> Values(const HostTensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.get(i);
  return v;
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string ShapeStr(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

double RoundTo(DType dt, double x) {
  HostTensor t(dt, {});
  t.set(0, x);
  return t.get(0);
}

StatusOr<std::vector<HostTensor>> TryRunOp(OpKind op, const std::vector<HostTensor>& inputs, const Attrs& attrs) {
  GraphBuilder b(std::string("single_") + OpName(op));
  std::vector<int> ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Shape s;
    for (auto d : inputs[i].shape) s.push_back(Dim(d));
    ids.push_back(b.Input(fmt::format("in{}", i), inputs[i].dtype, s));
  }
  const std::vector<int> outs = b.OpN(op, ids, attrs);
  for (int o : outs) b.Output(o);
  OPFUSE_ASSIGN_OR_RETURN(Graph g, b.Build());
  const Node* node = nullptr;
  for (const auto& n : g.nodes)
    if (n.op == op) node = &n;
  if (!node) return Internal("RunOp: node not found");
  std::vector<HostTensor> result;
  for (int v : node->outputs) {
    OPFUSE_ASSIGN_OR_RETURN(std::vector<int64_t> shape, BindShape(g.values[v].type.shape, {}));
    result.emplace_back(g.values[v].type.dtype, shape);
    Poison(result.back());
  }
  std::vector<const HostTensor*> in;
  for (const auto& t : inputs) in.push_back(&t);
  std::vector<HostTensor*> out;
  for (auto& t : result) out.push_back(&t);
  const std::vector<HostTensor> before = inputs;
  const OpDef& def = GetOpDef(op);
  if (!def.cpu) return Unimplemented(fmt::format("{} has no CPU reference", OpName(op)));
  OPFUSE_RETURN_IF_ERROR(def.cpu(*node, in, out));
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].data != before[i].data) return Internal(fmt::format("{} modified its input {}", OpName(op), i));
  return result;
}

std::vector<HostTensor> RunOp(OpKind op, const std::vector<HostTensor>& inputs, const Attrs& attrs) {
  auto r = TryRunOp(op, inputs, attrs);
  EXPECT_TRUE(r.ok()) << OpName(op) << ": " << r.status().ToString();
  if (!r.ok()) return {};
  return std::move(r).value();
}

double RelBound(DType dt) {
  switch (dt) {
    case DType::kF32: return 1e-5;
    case DType::kBF16: return 1e-2;
    case DType::kF16: return 2e-3;
    default: return 0.0;
  }
}

double RelError(const HostTensor& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (!std::isfinite(ref[i])) continue;
    const double d = out.get(i) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

void ExpectClose(const HostTensor& out, const std::vector<int64_t>& shape, const std::vector<double>& ref, double bound,
                 const std::string& what) {
  ASSERT_EQ(out.shape, shape) << what << ": output shape";
  ASSERT_EQ(static_cast<size_t>(out.numel()), ref.size()) << what << ": reference size";
  ASSERT_TRUE(IsFloat(out.dtype)) << what << ": ExpectClose on a non-float output";
  int64_t unwritten = 0, mismatched_special = 0, first_bad = -1;
  bool any_nonzero = false;
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double o = out.get(i), r = ref[i];
    if (r != 0.0) any_nonzero = true;
    if (std::isnan(o) && !std::isnan(r)) {
      ++unwritten;
      if (first_bad < 0) first_bad = i;
    } else if (!std::isfinite(r) && !(std::isnan(r) ? std::isnan(o) : o == r)) {
      ++mismatched_special;
      if (first_bad < 0) first_bad = i;
    }
  }
  EXPECT_TRUE(any_nonzero) << what << ": the reference is all zero (a test on zeros proves nothing)";
  EXPECT_EQ(unwritten, 0) << what << ": " << unwritten << " element(s) NaN where the reference is finite "
                          << "(unwritten/poisoned?), first at " << first_bad;
  EXPECT_EQ(mismatched_special, 0) << what << ": NaN/Inf positions differ from the reference, first at " << first_bad;
  const double err = RelError(out, ref);
  EXPECT_LE(err, bound) << what << ": relative error " << err << " > bound " << bound << " (" << DTypeName(out.dtype)
                        << ")";
}

void ExpectExact(const HostTensor& out, const std::vector<int64_t>& shape, const std::vector<double>& ref,
                 const std::string& what) {
  ASSERT_EQ(out.shape, shape) << what << ": output shape";
  ASSERT_EQ(static_cast<size_t>(out.numel()), ref.size()) << what << ": reference size";
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < out.numel(); ++i) {
    bool ok;
    if (out.dtype == DType::kBool) ok = out.data[i] <= 1 && out.data[i] == (ref[i] != 0.0 ? 1 : 0);
    else if (std::isnan(ref[i])) ok = std::isnan(out.get(i));
    else ok = out.get(i) == ref[i];
    if (!ok && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << out.numel() << " elements differ; first at " << first
                    << ": got " << (first >= 0 ? out.get(first) : 0) << " (raw byte "
                    << (first >= 0 && out.dtype == DType::kBool ? static_cast<int>(out.data[first]) : -1)
                    << "), want " << (first >= 0 ? ref[first] : 0);
}

}  // namespace opfuse::test
