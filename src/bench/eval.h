// `opfuse eval`: a KernelBench-style evaluator (issue 7; DESIGN.md "Tools", "Measuring"; seed 004's
// workflow: baseline first, then compiled / correct / speedup / fast_1 / fast_2 per candidate).
//
// Design:
//  * A problem is an .ofg file under eval/problems/ (static shapes): the reference graph, its
//    shapes and its dtype. It becomes an OpCase (bench/op_suite.h) — the same unit the op
//    benchmark measures — so the GPU side reuses RunOpBench (bench/cuda/op_runner.h) unchanged in
//    its rules: fresh signed random inputs on the device, poisoned outputs, CPU-reference check on
//    all rows (<= 64) or sampled rows, input-mutation check, L2 flush, rotated inputs, events /
//    graph replay, medians. Eval adds: check_trials (>= 5 independent input sets, fresh output
//    buffers each), all-zero outputs rejected, and a candidate kernel in place of an executor
//    variant (a user's .cu, docs/eval.md).
//  * How a graph's tensors become TensorSpecs: the problem's rows are dim 0 of its first output;
//    an `input` whose dim 0 equals them is row-leading (the check samples its rows), a `param`
//    never is (weights, K/V); an input feeding log/sqrt/rsqrt/recip/div/pow/mod is filled with
//    |x|+0.5; an integer input feeding embedding's ids holds ids below the table's rows. Graphs
//    with attention or a causal softmax are not row-independent: the check takes the last rows
//    (causal masks are aligned to the end, so that is exact).
//  * Baselines live in baseline_time.json: per problem and source — "opfuse_unfused" (opfuse's
//    op-by-op path, `opfuse eval baseline`), "torch_eager" and "torch_compile" (tools/eval_peer.py,
//    same device, same timing method) — with the device they were measured on; `eval run`
//    refuses a baseline from another device.
//  * Summary (per baseline source): fast_p = fraction of ALL selected problems that are correct and
//    faster than the baseline by more than p (fast_0 = correct); a failure or a missing baseline
//    counts as 0. The geometric-mean speedup is over the correct problems with that baseline.
//    A speedup over 10x is flagged for review (a wrong-but-passing kernel is likelier than magic)
//    and held out of fast_p and the geomean until the run is repeated with --accept-flagged.
//  * `--backend cpu` checks correctness only (opfuse's fused graph on the CPU executor, or a host
//    candidate in tests) with the same trial protocol, so CI exercises the harness without a GPU.
// Host-only; the CUDA pieces are bench/cuda/op_runner.h and bench/cuda/eval_candidate.h.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/op_suite.h"
#include "bench/report.h"
#include "ir/host_tensor.h"

namespace opfuse::bench {

inline constexpr int kEvalMinTrials = 5;
inline constexpr double kEvalReviewSpeedup = 10;
inline const char* const kBaselineSources[] = {"opfuse_unfused", "torch_eager", "torch_compile"};

struct EvalProblem {
  std::string name;         // file stem: "rms_norm_bf16_prefill"
  std::string path;         // where it was read from
  std::string description;  // the first comment line of the file
  OpCase c;                 // suite "eval", id "eval/<name>"
};

// One problem from .ofg text. InvalidArgument (naming the problem) for a graph that does not parse,
// has symbolic shapes, or inputs the harness cannot fill.
StatusOr<EvalProblem> ProblemFromText(const std::string& name, const std::string& text, const std::string& path);
// Every *.ofg of `dir`, sorted by name. NotFound for a missing dir or one without problems.
StatusOr<std::vector<EvalProblem>> LoadProblems(const std::string& dir);
// The named problems (comma-separated; "" = all), in the order given. InvalidArgument for an
// unknown or repeated name.
StatusOr<std::vector<EvalProblem>> SelectProblems(const std::vector<EvalProblem>& all, const std::string& names);
// {"schema": 1, "problems": [{"name", "path", "description", "case": CaseToJson}]}: what
// tools/eval_peer.py reads.
nlohmann::json ProblemsToJson(const std::vector<EvalProblem>& ps);

// ---------------------------------------------------------------- results
struct EvalResult {
  std::string problem, candidate;  // candidate: "opfuse:auto", "opfuse:unfused", a .cu file name
  bool compiled = false, correct = false;
  std::string error;   // why not compiled / not correct ("" when correct)
  std::string check;   // how it was checked ("5 trials, all 8 rows")
  std::string rule;    // the first check rule it broke (kRule*, op_suite.h), "" when correct
  double rel_err = kNaN;
  double runtime_us = kNaN;  // median device time (NaN on the CPU backend)
  std::string method;        // "events" | "graph xR"
  std::vector<std::string> kernels;
  std::map<std::string, double> baseline_us, speedup;  // by baseline source
  bool review = false;  // some speedup > kEvalReviewSpeedup
};

struct FastSummary {
  std::string against;  // baseline source
  int problems = 0, compiled = 0, correct = 0, with_baseline = 0;
  int review = 0;    // correct with a speedup > kEvalReviewSpeedup against this baseline
  int held_out = 0;  // of those, not counted in fast_p / geomean (no --accept-flagged)
  double fast_0 = 0, fast_1 = 0, fast_2 = 0;
  double geomean = kNaN;  // over correct problems with this baseline
};

// Fills baseline_us / speedup / review of each result from `baseline` (the file's JSON).
void ApplyBaseline(const nlohmann::json& baseline, std::vector<EvalResult>& results);
// A flagged result (speedup > kEvalReviewSpeedup) counts in fast_p and the geomean only with
// `accept_flagged` (the user re-ran with --accept-flagged after reviewing it).
std::vector<FastSummary> Summarize(const std::vector<EvalResult>& results, bool accept_flagged = false);
// The eval result file: {"schema": 1, "command", "date", "backend", "device", "candidate",
// "trials", "results": [...], "summary": [...]}.
// meta["accept_flagged"] (bool) is passed to Summarize.
nlohmann::json EvalToJson(const std::vector<EvalResult>& results, const nlohmann::json& meta);
std::string EvalMarkdown(const std::vector<EvalResult>& results, const std::string& primary, bool accept_flagged = false);

// ---------------------------------------------------------------- baseline_time.json
// {"schema": 1, "device": {"name", ...}, "problems": {name: {source: {"us", "method", "correct",
// "error"}}}, "runs": [{"source", "command", "date"}]}.
// Reads and validates; InvalidArgument for malformed JSON or schema, NotFound for a missing file.
StatusOr<nlohmann::json> ReadBaseline(const std::string& path);
// Merges the entries of `source` into `file` (created if empty), after checking that the device
// matches (InvalidArgument otherwise).
Status MergeBaseline(nlohmann::json& file, const std::string& source, const nlohmann::json& device,
                     const nlohmann::json& entries, const std::string& command);
// Atomic write (temp + rename).
Status WriteJsonFile(const std::string& path, const nlohmann::json& j);

// ---------------------------------------------------------------- the CPU backend
// A host candidate: writes every output (already allocated, poisoned with 0xFF) from the inputs,
// both in the problem's order.
using HostCandidate =
    std::function<Status(const std::vector<const HostTensor*>& inputs, const std::vector<HostTensor*>& outputs)>;
struct CpuEvalOptions {
  int trials = kEvalMinTrials;
  uint64_t seed = 0x0e7a1;
  // Builds the candidate of a problem; a failure is recorded as "not compiled". Default: opfuse's
  // fused graph (the fusion passes, then the CPU executor with fused groups in f32).
  std::function<StatusOr<HostCandidate>(const EvalProblem&)> make_candidate;
  std::string candidate_name = "opfuse:fused";
  std::function<void(int i, int n, const std::string& name)> on_start;
};
// Correctness only: per trial t fresh inputs (the op benchmark's fills with kEvalDists[t % 4]),
// fresh poisoned outputs, the candidate, the CPU reference on a copy of the inputs; rejects rel_err
// over ErrorBound, NaN (unwritten) elements, all-zero float outputs and modified inputs, each
// under its rule's name (kRule*).
StatusOr<std::vector<EvalResult>> RunEvalCpu(const std::vector<EvalProblem>& problems, const CpuEvalOptions& o);
// The default candidate of the CPU backend.
StatusOr<HostCandidate> OpfuseCpuCandidate(const EvalProblem& p);

// Host tensors of a problem's inputs with its fills and distribution `dist` (bench/fill_values.h,
// the same values the GPU fills give for the same seed), shared by the CPU backend and the tests.
std::vector<HostTensor> MakeProblemInputs(const OpCase& c, uint64_t seed, Dist dist = Dist::kUniform);

// The results of a RunOpBench report of eval problems, for `variant`.
std::vector<EvalResult> ResultsFromReport(const BenchReport& r, const std::vector<EvalProblem>& problems,
                                          const std::string& variant, const std::string& candidate_name);

}  // namespace opfuse::bench
