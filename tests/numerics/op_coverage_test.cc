// DESIGN.md "One source of truth for ops": a test walks the op table (ops.def via kNumOps and
// GetOpInfo) and fails when an op has no numerics case — so adding a row to ops.def without a test
// breaks the build's tests. Cases register the ops they cover with NUMERICS_TEST (see
// numerics_harness.h); this test also checks that each registered name is a real gtest test in
// this binary (a registration cannot outlive its test), and that every op has a CPU reference.
#include <set>

#include <fmt/format.h>

#include "numerics_harness.h"
#include "ops/op_def.h"

namespace opfuse::test {
namespace {

std::set<std::string> AllTestNames() {
  std::set<std::string> names;
  const auto* ut = ::testing::UnitTest::GetInstance();
  for (int i = 0; i < ut->total_test_suite_count(); ++i) {
    const auto* suite = ut->GetTestSuite(i);
    for (int j = 0; j < suite->total_test_count(); ++j)
      names.insert(std::string(suite->name()) + "." + suite->GetTestInfo(j)->name());
  }
  return names;
}

TEST(OpCoverage, EveryOpInOpsDefHasANumericsCase) {
  std::map<OpKind, std::vector<std::string>> by_op;
  for (const auto& [test, ops] : CoverageRegistry())
    for (OpKind op : ops) by_op[op].push_back(test);
  std::vector<std::string> missing;
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = GetOpInfo(static_cast<OpKind>(i));
    ASSERT_EQ(static_cast<int>(info.op), i) << "ops table out of order at " << info.name;
    if (!by_op.count(info.op)) missing.push_back(info.name);
  }
  EXPECT_TRUE(missing.empty()) << "ops in include/opfuse/ops.def with no numerics case (add a NUMERICS_TEST in "
                               << "tests/numerics/ covering them): " << fmt::format("{}", fmt::join(missing, ", "));
  EXPECT_GE(CoverageRegistry().size(), 10u) << "suspiciously few numerics cases registered";
}

TEST(OpCoverage, RegisteredCasesAreRealTests) {
  const auto names = AllTestNames();
  ASSERT_FALSE(CoverageRegistry().empty());
  for (const auto& [test, ops] : CoverageRegistry()) {
    EXPECT_TRUE(names.count(test)) << "coverage registered for '" << test << "' but no such test exists";
    EXPECT_FALSE(ops.empty()) << test << " registers no op";
  }
}

TEST(OpCoverage, EveryOpHasInferenceAndACpuReference) {
  std::vector<std::string> no_infer, no_cpu;
  for (int i = 0; i < kNumOps; ++i) {
    const auto op = static_cast<OpKind>(i);
    if (!GetOpDef(op).infer) no_infer.push_back(OpName(op));
    if (!GetOpDef(op).cpu) no_cpu.push_back(OpName(op));
  }
  EXPECT_TRUE(no_infer.empty()) << "ops without shape inference: " << fmt::format("{}", fmt::join(no_infer, ", "));
  EXPECT_TRUE(no_cpu.empty()) << "ops without a CPU reference: " << fmt::format("{}", fmt::join(no_cpu, ", "));
}

TEST(OpCoverage, CompositeOpsHaveADecomposition) {
  std::vector<std::string> missing;
  for (int i = 0; i < kNumOps; ++i) {
    const auto op = static_cast<OpKind>(i);
    if (GetOpInfo(op).kind == FusionKind::kComposite && !GetOpDef(op).decompose) missing.push_back(OpName(op));
  }
  EXPECT_TRUE(missing.empty()) << "composite ops without OpDef::decompose: " << fmt::format("{}", fmt::join(missing, ", "));
}

}  // namespace
}  // namespace opfuse::test
