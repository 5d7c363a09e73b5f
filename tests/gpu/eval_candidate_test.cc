// `opfuse eval` on the GPU: a user's .cu candidate (docs/eval.md ABI, tests/data/eval/*.cu) goes
// through the op runner's check with eval's rules, exactly as `opfuse eval run` sets them (5
// trials with a distribution each, fresh inputs/outputs, random check rows, whole-input checksums,
// the full output against the op-by-op path, the timed outputs and refilled sets after timing).
// Honest kernels pass and are timed; planted wrong kernels are rejected with the rule named —
// zeros, half the output, an input mutation, a read of the uninitialised output, work left on a
// side stream (the harness synchronises only its own stream), and one kernel per cheating class
// of issue 29: output sniffing, sampled-row filling, an input-independent output, memorised
// answers, input mutation outside the sampled rows, work skipped on repeat pointers, reduced
// precision. Kernels that do not compile or break the ABI are "create" errors, not crashes.
// Skips without a GPU.
#ifdef OPFUSE_WITH_CUDA
#include <cuda_runtime_api.h>

#include <cstring>
#include <functional>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
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

// How a test wraps the candidate's launch (the side-stream and memorisation tests).
using Wrap = std::function<CandidateKernel(CandidateKernel)>;

class EvalCandidateGpu : public testing_gpu::WithGpu<> {
 protected:
  // The variant result of `source` (labelled `label`) on `problem`, under `opfuse eval run`'s options.
  VariantResult RunSource(const std::string& source, const std::string& label, const std::string& problem, uint64_t seed,
                          const Wrap& wrap = nullptr) {
    auto all = LoadProblems(std::string(OPFUSE_SOURCE_DIR) + "/eval/problems");
    EXPECT_TRUE(all.ok());
    auto ps = SelectProblems(*all, problem);
    EXPECT_TRUE(ps.ok()) << problem;
    OpSuite suite;
    suite.cases = {ps->front().c};
    OpBenchOptions o;
    o.variants = {"candidate"};
    o.timing = TimingOptions::Quick();
    o.seed = seed;
    o.check_trials = kEvalMinTrials;
    o.reject_all_zero = true;
    o.eval_rules = true;
    o.measure_gemm = o.measure_copy = false;
    EXPECT_FALSE(source.empty()) << label;
    o.candidate = [&](const OpCase& c) -> StatusOr<CandidateKernel> {
      OPFUSE_ASSIGN_OR_RETURN(CandidateKernel k, LoadCandidate(source, label, c));
      return wrap ? wrap(std::move(k)) : k;
    };
    auto rep = RunOpBench(suite, o);
    EXPECT_TRUE(rep.ok()) << rep.status().ToString();
    if (!rep.ok()) return {};
    EXPECT_TRUE(rep->complete) << rep->aborted;
    EXPECT_EQ(rep->cases.size(), 1u);
    std::printf("[ eval ] %s on %s: correct=%d rule='%s' %s%s\n", label.c_str(), problem.c_str(),
                rep->cases.front().variants.front().correct.value_or(false), rep->cases.front().variants.front().rule.c_str(),
                rep->cases.front().variants.front().check_error.c_str(), rep->cases.front().variants.front().error.c_str());
    return rep->cases.front().variants.front();
  }
  VariantResult Run(const std::string& file, const std::string& problem = "gelu_f32_prefill", const Wrap& wrap = nullptr) {
    return RunSource(Slurp(file), file, problem, testing_gpu::FreshSeed(), wrap);
  }
  // The variant result of `file` on gelu_f32_prefill launched on a stream of its own.
  VariantResult RunOnSideStream(const std::string& file) {
    cudaStream_t side = nullptr;
    EXPECT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
    const VariantResult v = Run(file, "gelu_f32_prefill", [side](CandidateKernel k) {
      auto inner = k.launch;
      k.launch = [inner, side](const std::vector<void*>& in, const std::vector<void*>& out, void*) { return inner(in, out, side); };
      return k;
    });
    cudaStreamSynchronize(side);
    cudaStreamDestroy(side);
    return v;
  }
};

void ExpectRejectedBy(const VariantResult& v, const std::set<std::string>& rules) {
  EXPECT_EQ(v.error, "");
  EXPECT_FALSE(v.correct.value_or(true)) << "not rejected";
  EXPECT_TRUE(rules.count(v.rule)) << "rule '" << v.rule << "': " << v.check_error;
  EXPECT_EQ(v.check_error.rfind(v.rule + ": ", 0), 0u) << v.check_error;  // the message starts with the rule
}

void ExpectCorrect(const VariantResult& v) {
  EXPECT_EQ(v.error, "");
  ASSERT_TRUE(v.correct.has_value()) << v.check_error;
  EXPECT_TRUE(*v.correct) << v.check_error;
  EXPECT_EQ(v.rule, "");
  EXPECT_GT(v.us, 0);
}

TEST_F(EvalCandidateGpu, CorrectKernelPassesAndIsTimed) {
  const VariantResult v = Run("gelu_ok.cu");
  ExpectCorrect(v);
  EXPECT_EQ(v.kernels.size(), 1u);
}

TEST_F(EvalCandidateGpu, HonestKernelsPassEveryRule) {
  ExpectCorrect(Run("rms_norm_ok.cu", "rms_norm_bf16_prefill"));
  ExpectCorrect(Run("logsumexp_ok.cu", "logsumexp_bf16_prefill"));
  ExpectCorrect(Run("argmax_ok.cu", "argmax_f32_decode"));
}

TEST_F(EvalCandidateGpu, RejectsZeros) {
  const VariantResult v = Run("gelu_zeros.cu");
  ExpectRejectedBy(v, {kRuleReference});
  EXPECT_NE(v.check_error.find("are zero"), std::string::npos) << v.check_error;
}

TEST_F(EvalCandidateGpu, RejectsHalfTheOutput) {
  const VariantResult v = Run("gelu_half.cu");
  EXPECT_FALSE(v.correct.value_or(true));
  EXPECT_NE(v.check_error.find("1441792 of 2883584 elements NaN"), std::string::npos) << v.check_error;
}

TEST_F(EvalCandidateGpu, RejectsInputMutation) {
  const VariantResult v = Run("gelu_mutate.cu");
  ExpectRejectedBy(v, {kRuleInputs});  // named for the write, though its output is wrong too
  EXPECT_NE(v.check_error.find("input x was modified"), std::string::npos) << v.check_error;
}

TEST_F(EvalCandidateGpu, RejectsUninitialisedRead) {
  const VariantResult v = Run("gelu_uninit.cu");
  EXPECT_FALSE(v.correct.value_or(true));
  EXPECT_NE(v.check_error.find("NaN"), std::string::npos) << v.check_error;
}

TEST_F(EvalCandidateGpu, RejectsWorkOnASideStream) {
  const VariantResult v = RunOnSideStream("gelu_slow.cu");
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

// ---------------------------------------------------------------- one planted kernel per class

// Computes only where its output holds the poison, so the timed calls (on written outputs) do no work.
TEST_F(EvalCandidateGpu, RejectsOutputSniffing) {
  ExpectRejectedBy(Run("cheat_sniff.cu"), {kRuleTimedOutputs, kRuleAfterTiming});
}

// Computes only the 16 rows the check used to sample, fills the rest with plausible values.
TEST_F(EvalCandidateGpu, RejectsSampledRowFilling) {
  ExpectRejectedBy(Run("cheat_sampled_rows.cu", "rms_norm_bf16_prefill"), {kRuleReference, kRuleFullOutput});
}

// Never reads its input: the expected logsumexp of i.i.d. uniform rows, for every row.
TEST_F(EvalCandidateGpu, RejectsInputIndependentOutput) {
  const VariantResult v = Run("cheat_constant.cu", "logsumexp_bf16_prefill");
  ExpectRejectedBy(v, {kRuleReference, kRuleFullOutput});
  EXPECT_EQ(v.check_error.find("(uniform)"), std::string::npos) << "caught on the uniform trial? " << v.check_error;
}

// Correct rows, then writes into its own input rows outside the 16 the check used to sample.
TEST_F(EvalCandidateGpu, RejectsInputMutationOutsideSampledRows) {
  ExpectRejectedBy(Run("cheat_mutate_unsampled.cu", "rms_norm_bf16_prefill"), {kRuleInputs});
}

// Keeps a table of output pointers it has written and returns at once on a pointer it has seen.
TEST_F(EvalCandidateGpu, RejectsWorkSkippedOnRepeatPointers) {
  ExpectRejectedBy(Run("cheat_repeat_pointers.cu"), {kRuleAfterTiming});
}

// bf16 arithmetic and the tanh approximation for an f32 problem: rel_err ~3e-3 against a 2e-5 bound.
TEST_F(EvalCandidateGpu, RejectsReducedPrecision) {
  ExpectRejectedBy(Run("cheat_precision.cu"), {kRuleReference});
}

// Memorised answers: a run with seed S records every (input key, answer) pair the honest argmax
// produces (the key is the first 16 bytes of the logits; async copies into pinned memory, so the
// recording survives CUDA-graph capture). The memoriser is an NVRTC kernel with that table baked
// in: it reads only the key and writes the recorded answer (zeros when the key is unknown). Under
// the same seed it passes every rule — the inputs are a pure function of the seed — and under a
// fresh seed, as `opfuse eval run` draws by default, the reference rejects it.
TEST_F(EvalCandidateGpu, RejectsMemorisedAnswersUnderAFreshSeed) {
  constexpr int kRows = 8, kSlots = 1 << 14;
  struct Slot {
    uint64_t key[2];
    int64_t answer[kRows];
  };
  Slot* slots = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&slots), sizeof(Slot) * kSlots, cudaHostAllocDefault), cudaSuccess);
  std::memset(slots, 0, sizeof(Slot) * kSlots);
  int next = 0;
  const uint64_t seed = testing_gpu::FreshSeed();
  const VariantResult recorded =
      RunSource(Slurp("argmax_ok.cu"), "argmax_ok.cu (recording)", "argmax_f32_decode", seed, [&](CandidateKernel k) {
        auto inner = k.launch;
        k.launch = [inner, slots, &next](const std::vector<void*>& in, const std::vector<void*>& out, void* st) -> Status {
          OPFUSE_RETURN_IF_ERROR(inner(in, out, st));
          Slot* s = &slots[next++ % kSlots];
          auto stream = static_cast<cudaStream_t>(st);
          if (cudaMemcpyAsync(s->key, in[0], sizeof(s->key), cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
              cudaMemcpyAsync(s->answer, out[0], sizeof(s->answer), cudaMemcpyDeviceToHost, stream) != cudaSuccess)
            return Internal("recording copy failed");
          return Status::Ok();
        };
        return k;
      });
  ExpectCorrect(recorded);
  std::map<std::pair<uint64_t, uint64_t>, std::vector<int64_t>> table;
  for (int i = 0; i < std::min(next, kSlots); ++i)
    table[{slots[i].key[0], slots[i].key[1]}] = std::vector<int64_t>(slots[i].answer, slots[i].answer + kRows);
  cudaFreeHost(slots);
  ASSERT_GE(table.size(), static_cast<size_t>(kEvalMinTrials));
  std::string src =
      "// Memorised answers for argmax_f32_decode (logits f32[8, 32000] -> y i64[8, 1]): a lookup on the first 16 bytes.\n"
      "extern \"C\" __constant__ unsigned int opfuse_eval_launch[7] = {1, 1, 1, 8, 1, 1, 0};\n";
  src += fmt::format("#define N {}\n__constant__ unsigned long long keys[N][2] = {{", table.size());
  for (const auto& [key, ans] : table) src += fmt::format("{{{}ull, {}ull}},", key.first, key.second);
  src += "};\n__constant__ long long answers[N][8] = {";
  for (const auto& [key, ans] : table) src += fmt::format("{{{}}},", fmt::join(ans, ", "));
  src += R"(};
extern "C" __global__ void opfuse_eval_kernel(const float* logits, long long* y) {
  const unsigned long long* k = reinterpret_cast<const unsigned long long*>(logits);
  const unsigned long long k0 = k[0], k1 = k[1];
  long long a = 0;
  for (int i = 0; i < N; ++i)
    if (keys[i][0] == k0 && keys[i][1] == k1) a = answers[i][threadIdx.x];
  y[threadIdx.x] = a;
}
)";
  ExpectCorrect(RunSource(src, "memorised.cu (same seed)", "argmax_f32_decode", seed));
  const VariantResult fresh = RunSource(src, "memorised.cu (fresh seed)", "argmax_f32_decode", testing_gpu::FreshSeed());
  ExpectRejectedBy(fresh, {kRuleReference});
}

}  // namespace
}  // namespace opfuse::bench
#endif  // OPFUSE_WITH_CUDA
