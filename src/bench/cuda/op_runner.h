// The GPU side of `opfuse bench ops`: runs every case of an OpSuite through the CUDA executor in
// each requested variant, checks each variant once against the CPU reference, times it with the
// rules of timing.h, and fills a BenchReport.
//
// Per case:
//  1. K rotated input sets (K x the rotated bytes >= 2x L2 when memory allows, K <= max_sets) are
//     allocated and filled on the device with fresh signed random values (|x|+0.5 where the case
//     says so, ids inside the table). The same inputs serve every variant.
//  2. The CPU reference (RunGraphCpu) runs once per case on all rows when rows <= 64, else on a
//     sample of 16 rows (row-independent ops: spread over the whole range; attention: the last 16
//     query rows over all S keys) downloaded from input set 0.
//  3. Per variant: CudaExecutable::Create (a failure is recorded as the variant's error, never
//     dropped); outputs poisoned with 0xFF (NaN), one Run, the sampled rows compared by relative
//     error with a per-dtype bound, the whole output scanned for NaN (unwritten elements), the
//     sampled input rows checked unmodified; then warm-up over every set, host time per call, and
//     device time (CUDA-graph replay of R calls for decode sizes, events per call for prefill).
//     A variant whose kernels equal another's is marked same_as.
//  4. A sticky CUDA error (illegal address...) ends the run: the report is marked incomplete.
//  5. Hooks for `opfuse eval` (src/bench/eval.h): check_trials > 1 checks every variant on that
//     many independent input sets (fresh signed random inputs and freshly allocated outputs per
//     trial, each against its own CPU reference; the first failing trial decides), reject_all_zero
//     rejects a float output that is entirely zero, eval_rules adds the checks the timed calls
//     cannot dodge (below), and `candidate` puts a kernel that is not an executor variant (a
//     user's NVRTC-compiled .cu) under the same check and timing as variant "candidate".
// Built with OPFUSE_CUDA only; the CLI reports "built without CUDA" otherwise.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "bench/op_suite.h"
#include "bench/report.h"
#include "bench/cuda/timing.h"
#include "runtime/cuda/executor.h"

namespace opfuse::bench {

// A kernel under test in place of an executor variant (opfuse eval --candidate).
struct CandidateKernel {
  double compile_ms = 0;
  std::vector<std::string> kernels;  // what one call launches, for the report
  // Enqueues one call on `stream` (a cudaStream_t) with device pointers in the case's
  // input/output order. Must not synchronise; work left on another stream is the candidate's bug
  // (the check reads the outputs after synchronising `stream` only).
  std::function<Status(const std::vector<void*>& inputs, const std::vector<void*>& outputs, void* stream)> launch;
};

struct OpBenchOptions {
  // Executor variants (cuda::ParseVariant: auto, unfused, library, jit) and, with `candidate`
  // set, "candidate".
  std::vector<std::string> variants = {"unfused", "library", "jit"};
  TimingOptions timing;
  uint64_t seed = 0x0f5e;
  int check_rows = 16;  // rows sampled for the CPU reference when a case has more than 64
  int check_trials = 1;  // independent input sets each variant is checked on (opfuse eval: >= 5)
  bool reject_all_zero = false;  // a float output that is all zeros fails the check
  // opfuse eval's rules that the timed calls cannot dodge (docs/eval.md "Rules"): check trial t
  // fills its inputs with kEvalDists[t % 4] and checks random rows; whole inputs are checksummed
  // after every checked call and after timing; every output is compared row by row with opfuse's
  // op-by-op path (itself checked against the CPU reference first); after timing, the outputs the
  // timed calls left are checked, then every timed input set is refilled in place with fresh values
  // and run once without poisoning, and checked again. The first broken rule is VariantResult::rule.
  bool eval_rules = false;
  // Builds variant "candidate" for a case; an error is recorded as the variant's error ("create: ...").
  std::function<StatusOr<CandidateKernel>(const OpCase&)> candidate;
  bool measure_copy = true;     // the copy-bandwidth ceiling (MBU); `opfuse eval` needs none
  std::string command;  // recorded in the report
  bool measure_gemm = true;     // the GEMM ceiling (MFU); `opfuse profile` needs only bandwidth
  bool measure_launch = false;  // Ceilings::launch_us (MeasureLaunchUs), for the profile's cost model
  // Per case: a copy of the case's bytes timed as its variants are (CaseResult::copy_same_us), the
  // bandwidth reference at that size; `bench ops` sets it unless --no-copy-reference.
  bool measure_copy_same = false;
  // Called before case i (0-based) of n starts.
  std::function<void(int i, int n, const std::string& id)> on_case_start;
  // Called after each case with the report so far (complete = false), e.g. to checkpoint it.
  std::function<void(const BenchReport& partial)> on_case_done;
};

// Unavailable("no CUDA device: ...") without a GPU. Errors of single cases/variants are recorded
// in the report, not returned.
StatusOr<BenchReport> RunOpBench(const OpSuite& suite, const OpBenchOptions& o);

// The executor options a named variant is measured with, by `bench ops` and by libopfuse_capi
// (tools/bench_peer.py --opfuse-lib), so both build the same kernels: for library / jit,
// min_tensor_elements 0 (the unprofiled guess that small groups do not pay for fusion must not
// turn them into the op-by-op path under that name: it did for the k rope at decode, rows 4 and 8,
// in `opfuse profile`); single-op cases (micro, gelu) get a generated kernel under jit.
cuda::ExecutorOptions BenchExecutorOptions(const FusionConfig& config, cuda::Variant variant);

}  // namespace opfuse::bench
