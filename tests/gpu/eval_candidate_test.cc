// `opfuse eval` on the GPU: a user's .cu candidate (docs/eval.md ABI, tests/data/eval/*.cu) goes
// through the op runner's check with eval's rules (5 trials, fresh inputs/outputs, all-zero
// rejected). The correct GELU passes and is timed; planted wrong kernels are rejected with the
// reason named — zeros, half the output, an input mutation, a read of the uninitialised output,
// and work left on a side stream (the harness synchronises only its own stream). Kernels that do
// not compile or break the ABI are "create" errors, not crashes. Skips without a GPU.
#ifdef OPFUSE_WITH_CUDA
#include <cuda_runtime_api.h>

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "bench/cuda/eval_candidate.h"
#include "bench/cuda/op_runner.h"
#include "bench/eval.h"
#include "gpu/gpu_test_util.h"

namespace opfuse::bench {
namespace {

std::string Slurp(const std::string& name) {
  std::ifstream f(std::string(OPFUSE_SOURCE_DIR) + "/tests/data/eval/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class EvalCandidateGpu : public testing_gpu::WithGpu<> {
 protected:
  // The variant result of `file` on gelu_f32_prefill; `side_stream` launches it on a stream of its own.
  VariantResult Run(const std::string& file, bool side_stream = false) {
    auto all = LoadProblems(std::string(OPFUSE_SOURCE_DIR) + "/eval/problems");
    EXPECT_TRUE(all.ok());
    auto ps = SelectProblems(*all, "gelu_f32_prefill");
    EXPECT_TRUE(ps.ok());
    OpSuite suite;
    suite.cases = {ps->front().c};
    OpBenchOptions o;
    o.variants = {"candidate"};
    o.timing = TimingOptions::Quick();
    o.check_trials = kEvalMinTrials;
    o.reject_all_zero = true;
    o.measure_gemm = o.measure_copy = false;
    const std::string src = Slurp(file);
    EXPECT_FALSE(src.empty()) << file;
    cudaStream_t side = nullptr;
    if (side_stream) {
      EXPECT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
    }
    o.candidate = [&](const OpCase& c) -> StatusOr<CandidateKernel> {
      OPFUSE_ASSIGN_OR_RETURN(CandidateKernel k, LoadCandidate(src, file, c));
      if (side) {
        auto inner = k.launch;
        k.launch = [inner, side](const std::vector<void*>& in, const std::vector<void*>& out, void*) {
          return inner(in, out, side);
        };
      }
      return k;
    };
    auto rep = RunOpBench(suite, o);
    if (side) {
      cudaStreamSynchronize(side);
      cudaStreamDestroy(side);
    }
    EXPECT_TRUE(rep.ok()) << rep.status().ToString();
    EXPECT_TRUE(rep->complete) << rep->aborted;
    EXPECT_EQ(rep->cases.size(), 1u);
    return rep->cases.front().variants.front();
  }
};

TEST_F(EvalCandidateGpu, CorrectKernelPassesAndIsTimed) {
  const VariantResult v = Run("gelu_ok.cu");
  EXPECT_EQ(v.error, "");
  ASSERT_TRUE(v.correct.has_value()) << v.check_error;
  EXPECT_TRUE(*v.correct) << v.check_error;
  EXPECT_GT(v.us, 0);
  EXPECT_EQ(v.kernels.size(), 1u);
}

TEST_F(EvalCandidateGpu, RejectsZeros) {
  const VariantResult v = Run("gelu_zeros.cu");
  EXPECT_FALSE(v.correct.value_or(true));
  EXPECT_NE(v.check_error.find("are zero"), std::string::npos) << v.check_error;
}

TEST_F(EvalCandidateGpu, RejectsHalfTheOutput) {
  const VariantResult v = Run("gelu_half.cu");
  EXPECT_FALSE(v.correct.value_or(true));
  EXPECT_NE(v.check_error.find("1441792 of 2883584 elements NaN"), std::string::npos) << v.check_error;
}

TEST_F(EvalCandidateGpu, RejectsInputMutation) {
  const VariantResult v = Run("gelu_mutate.cu");
  EXPECT_FALSE(v.correct.value_or(true));
  EXPECT_NE(v.check_error.find("input x was modified"), std::string::npos) << v.check_error;
}

TEST_F(EvalCandidateGpu, RejectsUninitialisedRead) {
  const VariantResult v = Run("gelu_uninit.cu");
  EXPECT_FALSE(v.correct.value_or(true));
  EXPECT_NE(v.check_error.find("NaN"), std::string::npos) << v.check_error;
}

TEST_F(EvalCandidateGpu, RejectsWorkOnASideStream) {
  const VariantResult v = Run("gelu_slow.cu", /*side_stream=*/true);
  EXPECT_FALSE(v.correct.value_or(true));
  EXPECT_NE(v.check_error.find("NaN"), std::string::npos) << v.check_error;
}

TEST_F(EvalCandidateGpu, SlowButCorrectOnTheHarnessStreamPasses) {
  // The control for the side-stream test: the same kernel on the harness's stream is correct.
  const VariantResult v = Run("gelu_slow.cu");
  EXPECT_TRUE(v.correct.value_or(false)) << v.check_error << v.error;
}

TEST_F(EvalCandidateGpu, CompileAndAbiErrorsAreCreateErrors) {
  const VariantResult bad = Run("syntax_error.cu");
  EXPECT_EQ(bad.error.rfind("create: ", 0), 0u) << bad.error;
  EXPECT_NE(bad.error.find("NVRTC"), std::string::npos) << bad.error;
  const VariantResult abi = Run("bad_abi.cu");
  EXPECT_NE(abi.error.find("opfuse_eval_launch"), std::string::npos) << abi.error;
}

}  // namespace
}  // namespace opfuse::bench
#endif  // OPFUSE_WITH_CUDA
