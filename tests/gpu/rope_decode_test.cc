// Regression (docs/BENCHMARKS.md, issue 5): `opfuse profile` on an H200 reported that the library
// rope variant of the k-projection rope at decode — x [1, T, 4, 64] (rows 4 and 8), cos/sin
// [1, T, 1, 64] — failed its check run with a wrong slice shape. Root cause: that group is under
// min_tensor_elements, so the executor ran it op by op through add_decomposed, whose scratch graph
// listed every input twice (Graph::AddValue already appends to inputs): x's slot was mapped to cos
// and sin was left an unwritten scratch value. Here: every variant, with the default config (the
// size rule sends the group down the decomposition) and with min_tensor_elements = 0 (the library
// / JIT kernel itself), f32 and bf16, against the CPU reference on poisoned outputs (RunHost).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "../jit_cases.h"
#include "opfuse/graph.h"
#include "runtime/cpu/cpu_executor.h"
#include "ir/host_tensor.h"

#ifdef OPFUSE_WITH_CUDA
#include "gpu/gpu_test_util.h"
#include "runtime/cuda/executor.h"

namespace opfuse {
namespace {

struct RopeCase {
  int64_t T;
  DType dtype;
  cuda::Variant variant;
  bool size_rule;  // default min_tensor_elements (1024): this group is below it
};

std::string Name(const RopeCase& c) {
  return fmt::format("T{}_{}_{}_{}", c.T, DTypeName(c.dtype), cuda::VariantName(c.variant), c.size_rule ? "default" : "nosize");
}

class RopeDecodeTest : public testing_gpu::WithGpu<::testing::TestWithParam<RopeCase>> {};

TEST_P(RopeDecodeTest, MatchesCpuReference) {
  const RopeCase& c = GetParam();
  const std::string dt = DTypeName(c.dtype);
  auto g = ParseGraph(fmt::format("graph rope_k\ninput x: {0}[1, {1}, 4, 64]\ninput cos: {0}[1, {1}, 1, 64]\n"
                                  "input sin: {0}[1, {1}, 1, 64]\ny = rope(x, cos, sin)\noutput y\n",
                                  dt, c.T));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const uint64_t seed = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  auto inputs = RandomInputs(*g, {}, seed);
  auto ref = RunGraphCpu(*g, inputs);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();

  cuda::ExecutorOptions o;
  o.variant = c.variant;
  if (!c.size_rule) o.config.min_tensor_elements = 0;
  auto ex = cuda::CudaExecutable::Create(*g, o);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  std::string steps;
  for (const auto& s : (*ex)->steps()) steps += s.name + " ";
  std::printf("%s: steps %s\n", Name(c).c_str(), steps.c_str());
  for (const auto& f : (*ex)->fallbacks()) std::printf("fallback: %s\n", f.c_str());
  if (!c.size_rule && c.variant == cuda::Variant::kLibrary) {
    ASSERT_EQ((*ex)->steps().size(), 1u) << steps;
    EXPECT_EQ((*ex)->steps()[0].kind, "library");
  }
  if (c.size_rule || c.variant == cuda::Variant::kUnfused) {
    EXPECT_GE((*ex)->steps().size(), 5u) << steps;  // op by op: the decomposition this bug was in
  }

  auto out = (*ex)->RunHost(inputs);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const HostTensor& y = out->at("y");
  const HostTensor& r = ref->at("y");
  ASSERT_EQ(y.shape, r.shape);
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_FALSE(std::isnan(y.get(i))) << "NaN (poison left) at " << i;
  EXPECT_LE(testing_cases::RelErr(y, r), testing_cases::Bound(c.dtype)) << Name(c);
}

std::vector<RopeCase> Cases() {
  std::vector<RopeCase> out;
  for (int64_t T : {1, 2})
    for (DType dt : {DType::kF32, DType::kBF16})
      for (auto v : {cuda::Variant::kUnfused, cuda::Variant::kLibrary, cuda::Variant::kJit, cuda::Variant::kAuto})
        for (bool size_rule : {true, false}) out.push_back({T, dt, v, size_rule});
  return out;
}

INSTANTIATE_TEST_SUITE_P(KDecode, RopeDecodeTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<RopeCase>& i) { return Name(i.param); });

}  // namespace
}  // namespace opfuse
#endif  // OPFUSE_WITH_CUDA
