// Results of `opfuse bench ops` and the files they are written to: bench_report.json (everything),
// bench_metrics.json (one flat row per case x variant, like seed 003's metrics JSON), report.html
// (self-contained charts + the full table) and a markdown summary for the terminal.
//
// Design:
//  * One in-memory model (BenchReport) that the GPU runner fills, that round-trips through
//    bench_report.json, and that every other output is rendered from. So `opfuse bench report`
//    (host-only) can read a report written on the GPU machine, merge the PyTorch peer's timings
//    (peer.json from tools/bench_peer.py) and regenerate the HTML and metrics without a GPU.
//  * Only measurements are stored as inputs (µs, host µs, rel_err, ceilings, the same-size copy's µs);
//    every derived figure (GB/s, TFLOP/s, MBU, MFU, speedups, share of the same-size copy) is recomputed by DeriveMetrics from them and the case's
//    bytes/flops, so a merge or a rewrite can never leave stale ratios behind.
//  * A missing number is NaN in memory and null in JSON (never 0, which would read as "infinitely
//    fast" or "0% utilisation").
//  * Files are written atomically: every file goes to a temp name first and is renamed only when
//    all of them were written, so a failed or interrupted run never leaves a half-written report.
// Host-only (no CUDA); the HTML renderer lives in report_html.cc.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/op_suite.h"
#include "opfuse/status.h"

namespace opfuse::bench {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline bool Has(double v) { return std::isfinite(v); }

const std::vector<std::string>& VariantNames();  // unfused, library, jit

struct SampleStats {
  double median_us = kNaN, min_us = kNaN, p90_us = kNaN;
  int samples = 0;
};
// Median (mean of the two middle samples for an even count), min, p90 (nearest rank). Non-finite
// samples are dropped; an empty set gives NaNs and 0 samples.
SampleStats SummarizeSamples(std::vector<double> us);

struct VariantResult {
  std::string name;         // unfused | library | jit
  std::string error;        // why it could not be created / run / timed ("" = measured)
  std::string same_as;      // another variant that runs exactly the same kernels
  std::string method;       // "graph" (CUDA-graph replay) | "events"
  std::string note;         // executor fallbacks, capture problems: never silent
  std::vector<std::string> kernels;  // the steps one run executes
  int kernels_per_run = 0;
  // Of those, launched with programmatic dependent launch (opfuse's decode-size kernels): in a graph
  // replay their launch overlaps the call before (docs/bench.md "Decode sizes").
  int pdl_launches = 0;
  double compile_ms = kNaN;
  double us = kNaN, us_min = kNaN, us_p90 = kNaN;
  int samples = 0;
  double host_us = kNaN;                // host wall time per Run call
  std::optional<bool> correct;          // vs the CPU reference; nullopt = not checked
  double rel_err = kNaN;
  std::string check_error;              // why the check failed beyond rel_err (NaNs, input modified)
  std::string rule;                     // the first rule the check found broken (kRule*), "" = none
  // Derived by DeriveMetrics.
  double gbps = kNaN, tflops = kNaN, mbu = kNaN, mfu = kNaN;
  double speedup_vs_eager = kNaN, speedup_vs_compile = kNaN;  // torch µs / our µs
  bool measured() const { return error.empty() && Has(us); }
};

struct PeerResult {
  double eager_us = kNaN, compile_us = kNaN, eager_host_us = kNaN, compile_host_us = kNaN;
  std::string eager_error, compile_error;
  std::string impl;                // what the peer ran, e.g. "F.rms_norm" (optional)
  std::vector<std::string> flags;  // the peer's own correctness flags (optional): shown, never hidden
  // With tools/bench_peer.py --opfuse-lib: opfuse's fastest variant timed inside the peer's process by
  // its own timer (opfuse_<variant>_us there), beside compile_us: the same-process comparison.
  double opfuse_us = kNaN;
  std::string opfuse_variant;
};

struct CaseResult {
  std::string id, suite, op, dtype, phase;
  int64_t rows = 0, width = 0, bytes = 0, flops = 0;
  std::string check;  // how correctness was checked ("all 32 rows", "16 sampled rows")
  std::vector<VariantResult> variants;
  std::optional<PeerResult> peer;
  // Derived by DeriveMetrics: the fastest measured, correct variant.
  std::string best_variant;
  double best_us = kNaN, eager_over_best = kNaN, compile_over_best = kNaN;
  // peer compile_us / peer opfuse_us: both timed in the peer's process (NaN without --opfuse-lib).
  double compile_over_opfuse_one_process = kNaN;
  // The bandwidth reference at this size: a copy of the case's bytes (half read, half written) with
  // the ceiling's copy kernel, timed as the variants are (sets rule, flush, gate, events or graph
  // replay). NaN when not measured (bench ops --no-copy-reference; eval, profile).
  double copy_same_us = kNaN;
  std::string copy_same_method;
  // Derived: copy_same_us / best_us, the best variant's bandwidth as a fraction of that copy's.
  double best_of_copy_same = kNaN;
  const VariantResult* Find(const std::string& variant) const;
};
CaseResult CaseResultFor(const OpCase& c);

struct DeviceSummary {
  std::string name, arch, driver, runtime;
  int sm_count = 0;
  int64_t l2_bytes = 0, memory_bytes = 0;
};

struct Ceilings {
  double copy_gbps = kNaN;         // the MBU denominator: max of the two below
  double copy_kernel_gbps = kNaN;  // 16-byte-vector copy kernel, bytes read + written
  double memcpy_gbps = kNaN;       // cudaMemcpyAsync device to device, bytes read + written
  int64_t copy_bytes = 0;          // bytes copied per measurement (one direction)
  double launch_us = kNaN;         // device time of one empty kernel in a CUDA graph (measured when asked)
  // An empty kernel timed by the per-call event rule (gate, start event, one launch, end event): the
  // fixed cost inside every event-timed µs, so no prefill-size call can measure below it.
  double event_floor_us = kNaN;
  std::map<std::string, double> gemm_tflops;  // by dtype name: bf16, f16, f32, tf32
  int64_t gemm_m = 0, gemm_n = 0, gemm_k = 0;
  // The MFU denominator for a case dtype: its GEMM; f32 cases use the faster of f32 and tf32.
  double GemmFor(const std::string& dtype) const;
};

struct PeerInfo {
  std::string device, driver, torch, cuda, method;
  int matched = 0;
  std::vector<std::string> unmatched;  // peer ids that name no case of the report
};

struct BenchReport {
  int schema = 1;
  std::string tool = "opfuse bench ops";
  DeviceSummary device;
  std::string command, date, dtype;
  nlohmann::json timing = nlohmann::json::object();  // the timing options the run used
  Ceilings ceilings;
  std::optional<PeerInfo> peer;
  std::vector<CaseResult> cases;
  std::vector<SkippedCase> skipped;
  bool complete = true;
  std::string aborted;  // why a run stopped before its last case
  bool synthetic = false;  // made up for tests / a rendering check: never a measurement
};

// Recomputes every derived figure from the measurements (see the note on top).
void DeriveMetrics(BenchReport& r);

nlohmann::json ReportToJson(const BenchReport& r);
// InvalidArgument("bench_report.json: <what is wrong>") for a malformed document.
StatusOr<BenchReport> ReportFromJson(const nlohmann::json& j);
// {"schema": 1, "device", "ceilings", "rows": [{id, variant, op, suite, phase, dtype, rows, width,
//  bytes, flops, time_us, gbps, tflops, mbu, mfu, correct}]} — opfuse variants and torch peers.
nlohmann::json MetricsToJson(const BenchReport& r);
std::string RenderHtml(const BenchReport& r);
std::string MarkdownSummary(const BenchReport& r);

// Merges peer.json (tools/bench_peer.py) into `r`: InvalidArgument for a malformed document or,
// unless `allow_device_mismatch`, a peer measured on another device. Peer ids that match no case
// are listed in r.peer->unmatched and in `warnings`.
Status MergePeer(BenchReport& r, const nlohmann::json& peer, bool allow_device_mismatch,
                 std::vector<std::string>* warnings);

// Reads and parses a JSON file: NotFound when missing, InvalidArgument when unreadable or malformed.
StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);
// Writes `files` (name -> contents) into `dir`: each to a temp file first, then all renamed.
Status WriteFilesAtomic(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files);
// bench_report.json + bench_metrics.json + report.html (derived metrics recomputed first).
Status WriteReport(BenchReport r, const std::string& dir);
// "2026-11-22T10:31:07Z"
std::string UtcNow();

}  // namespace opfuse::bench
