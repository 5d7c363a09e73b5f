// `opfuse profile`: measures every fusible group of a model graph under each variant on the GPU and
// writes the fusion profile database (profile_result.json, docs/scheduler.md) that should_fuse reads.
//
// Flow: the graph (default: the built-in TinyLlama decoder layer, examples/graphs/
// llama_decoder_layer.ofg) → bench::ExtractGroupCases (the groups the fusion passes form, cut out,
// one case per group × dtype × row count of the grid) → the op-bench runner (CPU-reference check
// of every variant, CUDA events / graph replay, L2 flush, rotated inputs — the measuring rules of
// `opfuse bench ops`) → one ProfileEntry per case with the variants that were measured and correct
// → saved atomically after every case (resumable: a rerun measures only what the file lacks; a
// file from another device is refused, never merged) → the validation table of issue 5 (smart vs
// the fastest measured variant, in-sample and leave-one-out, and where fusing loses).
// `--validate` does only the last step, from an existing profile, with no GPU.
// Exit codes: 0 ok; 2 bad flags/graph/profile, other device, no CUDA device; 1 internal error or a
// run that stopped early (what was measured is still saved).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "bench/builtin_graphs.h"
#include "bench/group_cases.h"
#include "bench/profile_build.h"
#include "bench/report.h"
#include "cli/cli.h"
#include "scheduler/profile_db.h"
#include "util/files.h"

#ifdef OPFUSE_WITH_CUDA
#include "bench/cuda/op_runner.h"
#include "cuda/device.h"
#endif

namespace opfuse::cli {
namespace {

namespace fs = std::filesystem;

struct ProfileArgs {
  std::string graph, symbol = "T", rows, dtypes = "bf16", variants = "unfused,library,jit,cublaslt";
  std::string out = "profile_result.json", bench_dir;
  std::vector<std::string> disable;
  bool list_cases = false, fresh = false, validate = false, quick = false, json = false;
  int min_samples = 0;
  double margin = 0.03;
};

StatusOr<std::vector<std::string>> SplitList(const std::string& text, const std::string& flag) {
  std::vector<std::string> out = SplitCommaList(text);
  for (const auto& item : out)
    if (item.empty()) return InvalidArgument(fmt::format("{} '{}': empty item", flag, text));
  return out;
}

struct Setup {
  Graph model;
  bench::GroupCaseOptions opts;
  bench::GroupCases cases;
  std::vector<std::string> variants;
};

StatusOr<Setup> Prepare(const ProfileArgs& a) {
  Setup s;
  if (a.graph.empty()) {
    OPFUSE_ASSIGN_OR_RETURN(s.model, ParseGraph(bench::kLlamaDecoderLayerOfg));
  } else {
    OPFUSE_ASSIGN_OR_RETURN(s.model, ParseGraphFile(a.graph));
  }
  OPFUSE_ASSIGN_OR_RETURN(s.opts.config, FusionConfig::FromEnv());
  for (const auto& d : a.disable) s.opts.config.disabled.insert(d);
  s.opts.symbol = a.symbol;
  if (a.rows.empty()) s.opts.values = bench::DefaultProfileRows();
  else {
    OPFUSE_ASSIGN_OR_RETURN(s.opts.values, bench::ParseIntList(a.rows, "--rows"));
  }
  OPFUSE_ASSIGN_OR_RETURN(auto dts, SplitList(a.dtypes, "--dtypes"));
  s.opts.dtypes.clear();
  for (const auto& d : dts) {
    auto dt = DTypeFromName(d);
    if (!dt || !IsFloat(*dt)) return InvalidArgument(fmt::format("--dtypes: '{}' is not one of bf16, f16, f32", d));
    s.opts.dtypes.push_back(*dt);
  }
  OPFUSE_ASSIGN_OR_RETURN(s.variants, SplitList(a.variants, "--variants"));
  for (const auto& v : s.variants)
    if (v != "unfused" && v != "library" && v != "jit" && v != "cublaslt")
      return InvalidArgument(fmt::format("--variants: '{}' is not one of unfused, library, jit, cublaslt", v));
  if (!(a.margin >= 0 && a.margin < 1)) return InvalidArgument("--margin must be in [0, 1)");
  OPFUSE_ASSIGN_OR_RETURN(s.cases, bench::ExtractGroupCases(s.model, s.opts));
  return s;
}

void PrintCases(const Setup& s) {
  std::cout << fmt::format("{} fusible groups:\n", s.cases.groups.size());
  for (const auto& g : s.cases.groups) std::cout << "  " << g << "\n";
  std::cout << fmt::format("{:<56} {:>4} {:>7} {:>12}\n", "case", s.opts.symbol, "phase", "bytes");
  for (const auto& c : s.cases.cases)
    std::cout << fmt::format("{:<56} {:>4} {:>7} {:>12}\n", c.c.id, c.symbol_value, c.c.phase, c.c.bytes);
  for (const auto& k : s.cases.skipped) std::cout << fmt::format("skipped {}: {}\n", k.id, k.reason);
  std::cout << fmt::format("{} cases\n", s.cases.cases.size());
}

int Report(const ProfileArgs& a, const Setup& s, const scheduler::ProfileDb& db) {
  auto v = bench::ValidateProfile(s.model, s.opts, s.cases.cases, db, a.margin);
  if (!v.ok()) return Fail("profile", v.status());
  if (a.json) {
    std::cout << nlohmann::json({{"profile", a.out}, {"device", db.device.name}, {"validation", bench::ValidationJson(*v)}}).dump(1)
              << "\n";
  } else {
    std::cout << fmt::format("profile {}: {} entries, device {} (sm {}), copy {:.0f} GB/s, launch {:.2f} us\n\n", a.out,
                             db.entries.size(), db.device.name, db.device.sm, db.device.copy_gbps, db.device.launch_us);
    std::cout << bench::ValidationMarkdown(*v);
  }
  SetExitCode(0);
  return 0;
}

int RunProfile(const ProfileArgs& a) {
  auto setup = Prepare(a);
  if (!setup.ok()) return Fail("profile", setup.status());
  if (a.min_samples < 0) return Fail("profile", InvalidArgument("--min-samples must be positive"));
  if (a.list_cases) {
    PrintCases(*setup);
    SetExitCode(0);
    return 0;
  }
  std::error_code ec;
  const bool have_out = fs::exists(a.out, ec);
  if (!a.validate)  // the profile is written after minutes of measuring: its path is checked first
    if (Status st = CheckOutputFile("--out", a.out); !st.ok()) return Fail("profile", st);
  if (a.validate) {
    auto db = scheduler::ProfileDb::Load(a.out);
    if (!db.ok()) return Fail("profile", db.status());
    return Report(a, *setup, *db);
  }
#ifndef OPFUSE_WITH_CUDA
  (void)have_out;
  return Fail("profile", Unavailable("no CUDA device: opfuse was built without the CUDA backend (-DOPFUSE_CUDA=OFF); "
                                     "--list-cases and --validate work without one"));
#else
  auto dev = cuda::QueryDevice();
  if (!dev.ok()) return Fail("profile", dev.status());
  scheduler::ProfileDb db;
  if (have_out && !a.fresh) {
    auto old = scheduler::ProfileDb::Load(a.out);
    if (!old.ok()) return Fail("profile", old.status());
    const scheduler::DeviceInfo here{dev->name, fmt::format("{}.{}", dev->major, dev->minor), "", 0, 0};
    if (Status st = scheduler::CheckDevice(old->device, here); !st.ok())
      return Fail("profile", InvalidArgument(fmt::format("{}: {}; refusing to merge measurements of two devices "
                                                         "(use another --out, or --fresh to replace it)",
                                                         a.out, st.message())));
    db = std::move(*old);
  }
  const std::vector<bench::GroupCase> todo = bench::RemainingCases(setup->cases.cases, db, setup->variants);
  std::cerr << fmt::format("opfuse profile: {} cases ({} groups x {} dtypes x {} row counts), {} already in {}, {} to measure\n",
                           setup->cases.cases.size(), setup->cases.groups.size(), setup->opts.dtypes.size(),
                           setup->opts.values.size(), setup->cases.cases.size() - todo.size(), a.out, todo.size());
  if (!todo.empty()) {
    bench::OpSuite suite;
    for (const auto& gc : todo) suite.cases.push_back(gc.c);
    bench::OpBenchOptions o;
    o.variants = setup->variants;
    o.timing = a.quick ? bench::TimingOptions::Quick() : bench::TimingOptions{};
    if (a.min_samples > 0) {
      o.timing.min_samples = a.min_samples;
      o.timing.max_samples = std::max(o.timing.max_samples, a.min_samples);
    }
    o.measure_gemm = false;
    o.measure_launch = true;
    o.command = CommandLine("opfuse profile");
    Progress progress;
    o.on_case_start = [&](int i, int n, const std::string& id) { progress.Start(i, n, id); };
    size_t merged = 0;
    std::vector<std::string> warnings;
    Status save_error;
    auto absorb = [&](const bench::BenchReport& r) {
      db.device = bench::ProfileDeviceFor(r);
      for (; merged < r.cases.size(); ++merged) {
        if (auto e = bench::ProfileEntryFor(todo[merged], r.cases[merged], &warnings)) {
          scheduler::ProfileDb one;
          one.device = db.device;
          one.entries.push_back(*e);
          if (Status st = db.Merge(one); !st.ok()) save_error = st;
        }
      }
      if (Status st = db.Save(a.out); !st.ok()) save_error = st;
    };
    o.on_case_done = absorb;
    auto report = bench::RunOpBench(suite, o);
    progress.Clear();
    if (!report.ok()) return Fail("profile", report.status());
    absorb(*report);
    for (const auto& w : warnings) std::cerr << "opfuse profile: warning: " << w << "\n";
    if (!save_error.ok()) return Fail("profile", save_error);
    if (!a.bench_dir.empty())
      if (Status st = bench::WriteReport(*report, a.bench_dir); !st.ok()) return Fail("profile", st);
    if (!report->complete) {
      Fail("profile", Internal("run incomplete: " + report->aborted + " (the measured cases are saved; rerun to resume)"));
      return 1;
    }
  }
  return Report(a, *setup, db);
#endif
}

}  // namespace

void RegisterProfile(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  auto* cmd = app.add_subcommand(
      "profile", "Measure every fusible group of a model under each variant on the GPU; write the fusion profile database");
  cmd->add_option("--graph", a->graph, "model graph (.ofg); default: the built-in TinyLlama-1.1B decoder layer");
  cmd->add_option("--symbol", a->symbol, "the graph's row symbol (tokens)")->capture_default_str();
  cmd->add_option("--rows", a->rows, "values of the row symbol, comma-separated (default: 1,2,4,...,64 with 48 and 96 at the decode/prefill crossover, then 128,...,4096)");
  cmd->add_option("--dtypes", a->dtypes, "float dtypes the graph is profiled in, comma-separated (bf16,f16,f32)")->capture_default_str();
  cmd->add_option("--variants", a->variants, "variants to time")->capture_default_str();
  cmd->add_option("--out", a->out, "the profile database to write (and resume)")->capture_default_str();
  cmd->add_option("--bench-dir", a->bench_dir, "also write the run's bench_report.json / report.html to DIR");
  cmd->add_option("--disable", a->disable, "patterns or passes to switch off (as OPFUSE_DISABLE)")->delimiter(',');
  cmd->add_option("--margin", a->margin, "should_fuse's margin for the validation table")->capture_default_str();
  cmd->add_option("--min-samples", a->min_samples, "timing samples per variant at least");
  cmd->add_flag("--quick", a->quick, "fewer samples (a smoke run, not for the committed profile)");
  cmd->add_flag("--fresh", a->fresh, "replace --out instead of resuming it");
  cmd->add_flag("--list-cases", a->list_cases, "print the groups and cases, measure nothing (no GPU needed)");
  cmd->add_flag("--validate", a->validate, "only print the validation table of an existing --out (no GPU needed)");
  cmd->add_flag("--json", a->json, "print the validation as JSON");
  cmd->footer(
      "Every case is one fused group cut out of the graph at one row count; each variant (unfused, library, jit)\n"
      "is checked against the CPU reference and timed like `opfuse bench ops` (events / CUDA-graph replay, L2 flushed,\n"
      "rotated inputs). A fuse_matmul group (a GEMV with its norm prologue, RoPE or SwiGLU epilogue) has up to three:\n"
      "library = the fused group (one GEMV launch up to the GEMV's capacity), unfused = its ops one by one on their\n"
      "library kernels, cublaslt (up to 2 rows, where the others run the GEMV) = its matmuls on cuBLASLt with the\n"
      "norm, RoPE and SwiGLU kernels around them; no jit. Pattern groups: unfused, library, jit.\n"
      "--disable fuse_matmul profiles the pattern groups on their own. Several --graph runs into one --out merge.\n"
      "Only correct, measured variants enter the profile. The file is saved after every case; a rerun\n"
      "resumes. A profile from another device is refused. Last, the table of smart's choice vs the fastest variant.\n"
      "Use it: opfuse explain FILE --profile profile_result.json --shape T=64.   See docs/scheduler.md.\n"
      "Exit 0 ok, 2 bad input / other device / no CUDA device, 1 internal error or an incomplete run.");
  cmd->callback([a] { RunProfile(*a); });
}

}  // namespace opfuse::cli
