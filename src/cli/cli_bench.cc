// `opfuse bench ...`: the benchmark group. Subcommands:
//   bench ops     the op suite (src/bench/op_suite.h) through the CUDA executor, every variant
//                 checked against the CPU reference and timed (src/bench/cuda/op_runner.h);
//                 writes DIR/cases.json first, checkpoints DIR/bench_report.json after every case,
//                 and at the end bench_report.json, bench_metrics.json and report.html (each file
//                 written to a temp name and renamed, so never half-written).
//   bench report  host-only: re-renders a report directory, merging peer.json (PyTorch eager /
//                 torch.compile timings from tools/bench_peer.py) when given.
//   bench e2e     the end-to-end Llama benchmark of the fusion strategies (cli_bench_e2e.cc).
// Exit codes: 0 ok; 2 bad flags or input files, or no usable
// GPU ("no CUDA device: ...", as everywhere in the CLI; nothing is written); 1 an internal error or
// a run that stopped early (its partial report is still written and says why).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "bench/op_suite.h"
#include "bench/report.h"
#include "cli/cli.h"

#ifdef OPFUSE_WITH_CUDA
#include "bench/cuda/op_runner.h"
#include "cuda/device.h"
#endif

namespace opfuse::cli {
namespace {

namespace fs = std::filesystem;

struct OpsArgs {
  std::string suite = "all", ops, rows, widths, shapes, dtype = "bf16", variants = "unfused,library,jit", out = "bench_out";
  bool list_cases = false, json = false, quick = false, no_copy_reference = false;
  int min_samples = 0;
  uint64_t seed = 0x0f5e;
};

struct ReportArgs {
  std::string dir, peer;
  bool allow_device_mismatch = false, json = false;
};

StatusOr<bench::SuiteFilter> MakeFilter(const OpsArgs& a) {
  bench::SuiteFilter f;
  f.suite = a.suite;
  f.ops_regex = a.ops;
  if (!a.rows.empty()) {
    OPFUSE_ASSIGN_OR_RETURN(f.rows, bench::ParseIntList(a.rows, "--rows"));
  }
  if (!a.widths.empty()) {
    OPFUSE_ASSIGN_OR_RETURN(f.widths, bench::ParseIntList(a.widths, "--widths"));
  }
  if (!a.shapes.empty() && a.shapes.rfind("random:", 0) != 0) {
    OPFUSE_ASSIGN_OR_RETURN(f.shapes, bench::ParseShapeList(a.shapes));
    f.shapes_spec = a.shapes;
  } else if (!a.shapes.empty()) {
    OPFUSE_ASSIGN_OR_RETURN(bench::RandomShapesSpec spec, bench::ParseRandomShapes(a.shapes));
    // A fresh seed per run unless one is given: a sweep nobody tuned on. Printed so that the run
    // can be repeated (--shapes random:N:SEED), and part of the recorded command.
    const uint64_t seed = spec.seed ? *spec.seed : (uint64_t{std::random_device{}()} << 32 | std::random_device{}()) % 1000000007ull;
    std::cerr << fmt::format("opfuse bench ops: --shapes random:{}:{}\n", spec.count, seed);
    f.shapes = bench::RandomShapes(spec.count, seed);
    f.shapes_spec = fmt::format("random:{}:{}", spec.count, seed);
  }
  auto dt = DTypeFromName(a.dtype);
  if (!dt || !IsFloat(*dt)) return InvalidArgument(fmt::format("--dtype '{}': expected bf16, f16 or f32", a.dtype));
  f.dtype = *dt;
  return f;
}

StatusOr<std::vector<std::string>> ParseVariants(const std::string& text) {
  std::vector<std::string> out;
  for (const std::string& v : SplitCommaList(text)) {
    const auto& known = bench::VariantNames();
    if (std::find(known.begin(), known.end(), v) == known.end())
      return InvalidArgument(fmt::format("--variants '{}': '{}' is not one of unfused, library, jit", text, v));
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

void PrintCaseList(const bench::OpSuite& s) {
  std::cout << fmt::format("{:<48} {:>7} {:>14} {:>16}\n", "id", "phase", "bytes", "flops");
  for (const auto& c : s.cases) std::cout << fmt::format("{:<48} {:>7} {:>14} {:>16}\n", c.id, c.phase, c.bytes, c.flops);
  for (const auto& k : s.skipped) std::cout << fmt::format("skipped {}: {}\n", k.id, k.reason);
  std::cout << fmt::format("{} cases\n", s.cases.size());
}

int RunOps(const OpsArgs& a) {
  auto filter = MakeFilter(a);
  if (!filter.ok()) return Fail("bench ops", filter.status());
  auto suite = bench::BuildOpSuite(*filter);
  if (!suite.ok()) return Fail("bench ops", suite.status());
  auto variants = ParseVariants(a.variants);
  if (!variants.ok()) return Fail("bench ops", variants.status());
  if (a.min_samples < 0) return Fail("bench ops", InvalidArgument("--min-samples must be positive"));
  if (a.list_cases) {
    if (a.json) std::cout << bench::SuiteToJson(*suite).dump(1) << "\n";
    else PrintCaseList(*suite);
    SetExitCode(0);
    return 0;
  }
#ifndef OPFUSE_WITH_CUDA
  return Fail("bench ops",
              Unavailable("no CUDA device: opfuse was built without the CUDA backend (-DOPFUSE_CUDA=OFF); "
                          "--list-cases works without one"));
#else
  // Refuse before anything is written when there is no GPU.
  if (auto dev = cuda::QueryDevice(); !dev.ok()) return Fail("bench ops", dev.status());
  if (auto st = bench::WriteFilesAtomic(a.out, {{"cases.json", bench::SuiteToJson(*suite).dump(1) + "\n"}}); !st.ok())
    return Fail("bench ops", st);

  bench::OpBenchOptions o;
  o.variants = *variants;
  o.timing = a.quick ? bench::TimingOptions::Quick() : bench::TimingOptions{};
  if (a.min_samples > 0) {
    o.timing.min_samples = a.min_samples;
    o.timing.max_samples = std::max(o.timing.max_samples, a.min_samples);
  }
  o.seed = a.seed;
  o.measure_copy_same = !a.no_copy_reference;
  o.command = CommandLine("opfuse bench ops");
  if (filter->shapes_spec.rfind("random:", 0) == 0) o.command += fmt::format(" (drew --shapes {})", filter->shapes_spec);
  Progress progress;
  const auto t0 = std::chrono::steady_clock::now();
  o.on_case_start = [&](int i, int n, const std::string& id) { progress.Start(i, n, id); };
  o.on_case_done = [&](const bench::BenchReport& partial) {
    // Checkpoint: a run killed half-way still leaves every finished case on disk.
    bench::BenchReport p = partial;
    bench::DeriveMetrics(p);
    (void)bench::WriteFilesAtomic(a.out, {{"bench_report.json", bench::ReportToJson(p).dump(1) + "\n"}});
  };
  auto report = bench::RunOpBench(*suite, o);
  progress.Clear();
  if (!report.ok()) return Fail("bench ops", report.status());
  if (auto st = bench::WriteReport(*report, a.out); !st.ok()) return Fail("bench ops", st);
  bench::DeriveMetrics(*report);
  if (a.json) std::cout << bench::ReportToJson(*report).dump(1) << "\n";
  else std::cout << bench::MarkdownSummary(*report);
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cerr << fmt::format("opfuse bench ops: {} cases in {}; wrote {}/{{cases.json, bench_report.json, "
                           "bench_metrics.json, report.html}}\n",
                           report->cases.size(), Duration(total), a.out);
  if (!report->complete) return Fail("bench ops", Internal("run incomplete: " + report->aborted));
  SetExitCode(0);
  return 0;
#endif
}

int RunReport(const ReportArgs& a) {
  std::error_code ec;
  if (!fs::is_directory(a.dir, ec))
    return Fail("bench report", InvalidArgument(fmt::format("--dir {}: no such directory", a.dir)));
  const std::string path = (fs::path(a.dir) / "bench_report.json").string();
  auto j = bench::ReadJsonFile(path);
  if (!j.ok()) return Fail("bench report", j.status());
  auto report = bench::ReportFromJson(*j);
  if (!report.ok()) return Fail("bench report", report.status());
  if (!a.peer.empty()) {
    auto pj = bench::ReadJsonFile(a.peer);
    if (!pj.ok()) return Fail("bench report", pj.status());
    std::vector<std::string> warnings;
    if (auto st = bench::MergePeer(*report, *pj, a.allow_device_mismatch, &warnings); !st.ok())
      return Fail("bench report", st);
    for (const auto& w : warnings) std::cerr << "opfuse bench report: warning: " << w << "\n";
  }
  if (auto st = bench::WriteReport(*report, a.dir); !st.ok()) return Fail("bench report", st);
  bench::DeriveMetrics(*report);
  if (a.json) std::cout << bench::ReportToJson(*report).dump(1) << "\n";
  else std::cout << bench::MarkdownSummary(*report);
  std::cerr << fmt::format("opfuse bench report: wrote {}/{{bench_report.json, bench_metrics.json, report.html}}{}\n",
                           a.dir, report->peer ? fmt::format(" with {} peer results", report->peer->matched) : "");
  SetExitCode(0);
  return 0;
}

void RegisterBenchOps(CLI::App& bench) {
  auto a = std::make_shared<OpsArgs>();
  auto* cmd = bench.add_subcommand("ops", "Op benchmark suite: micro ops and fusion patterns, unfused / library / jit");
  cmd->add_option("--suite", a->suite, "micro, patterns or all (default)")->check(CLI::IsMember({"micro", "patterns", "all"}));
  cmd->add_option("--ops", a->ops, "only ops whose name fully matches this regex, e.g. 'rmsnorm|swiglu'");
  cmd->add_option("--rows", a->rows, "row counts, comma-separated (default 1,8,32,512,2048,16384; <= 64 is decode)");
  cmd->add_option("--widths", a->widths, "keep only these widths, comma-separated (default grid: 2048, 4096, 5632)");
  cmd->add_option("--shapes", a->shapes,
                  "random:N[:SEED] — instead of the grid, N random (rows, width) pairs (widths 1..262144: model sizes, "
                  "primes, log-uniform; rows 1..65536) for the sweep ops (norms, softmax plain/scaled/causal, swiglu, "
                  "geglu, logsumexp); without SEED a fresh one, printed. Or ROWSxWIDTH[,ROWSxWIDTH...]: the sweep ops "
                  "at these shapes (e.g. 172x169249,61x49152)");
  cmd->add_option("--dtype", a->dtype, "bf16 (default), f16 or f32")->check(CLI::IsMember({"bf16", "f16", "f32"}));
  cmd->add_option("--variants", a->variants, "comma-separated subset of unfused,library,jit (default all three)");
  cmd->add_option("--out", a->out, "output directory (default bench_out)");
  cmd->add_flag("--list-cases", a->list_cases, "print the cases and exit (no GPU needed); with --json: cases.json");
  cmd->add_flag("--json", a->json, "JSON on stdout (cases.json with --list-cases, else bench_report.json)");
  cmd->add_option("--min-samples", a->min_samples, "timed samples per variant at least (default 25)");
  cmd->add_flag("--quick", a->quick, "fewer samples and shorter budgets (a smoke run, not for publishing)");
  cmd->add_option("--seed", a->seed, "seed of the random inputs")->check(NonNegativeInteger);
  cmd->add_flag("--no-copy-reference", a->no_copy_reference,
                "skip the per-case copy of the same bytes (the 'of same-size copy' column)");
  cmd->footer(
      "Each case runs through the CUDA executor in every variant, is checked once against the CPU\n"
      "reference (rel_err with a per-dtype bound; ✗ in the report when it fails) and timed: CUDA events\n"
      "after warm-up, median of many samples, L2 flushed, rotated inputs; decode sizes (rows <= 64) by\n"
      "CUDA-graph replay. MBU/MFU are against ceilings measured at start (copy kernel over 1 GiB, cuBLASLt\n"
      "GEMM); 'of same-size copy' is the best variant's bandwidth against a copy of the case's own bytes,\n"
      "timed the same way (what a kernel of that size can reach when each call is timed).\n"
      "Peer: python3 tools/bench_peer.py --cases DIR/cases.json --out peer.json, then\n"
      "      opfuse bench report --dir DIR --peer peer.json.   See docs/bench.md.\n"
      "Exit 0 ok, 2 bad flags or no CUDA device, 1 internal error / run stopped early.");
  cmd->callback([a] { RunOps(*a); });
}

void RegisterBenchReport(CLI::App& bench) {
  auto a = std::make_shared<ReportArgs>();
  auto* cmd = bench.add_subcommand("report", "Re-render a bench ops directory, merging PyTorch peer timings (no GPU needed)");
  cmd->add_option("--dir", a->dir, "directory of a `bench ops` run (holds bench_report.json)")->required();
  cmd->add_option("--peer", a->peer, "peer.json from tools/bench_peer.py to merge");
  cmd->add_flag("--allow-device-mismatch", a->allow_device_mismatch, "merge a peer measured on another device name");
  cmd->add_flag("--json", a->json, "print the merged bench_report.json instead of the markdown summary");
  cmd->footer("Rewrites DIR/bench_report.json, bench_metrics.json and report.html (atomically).\n"
              "Exit 0 ok, 2 missing directory or report, malformed JSON, peer from another device.");
  cmd->callback([a] { RunReport(*a); });
}

}  // namespace

void RegisterBench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks: `bench ops` (op suite), `bench report` (re-render, merge peer), `bench e2e` (Llama strategies)");
  bench->require_subcommand(1);
  RegisterBenchOps(*bench);
  RegisterBenchReport(*bench);
  RegisterBenchE2e(*bench);
}

}  // namespace opfuse::cli
