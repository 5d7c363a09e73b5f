// `opfuse eval`: the KernelBench-style evaluator (bench/eval.h; docs/eval.md).
//   opfuse eval list      [--problems a,b] [--json]
//   opfuse eval baseline  [--problems a,b] [--output baseline_time.json]
//   opfuse eval run       [--problems a,b | --candidate FILE.cu --problem NAME] [--backend cpu|cuda]
//                         [--baseline baseline_time.json] --output FILE.json [--markdown FILE.md]
// The problems are eval/problems/*.ofg (--problems-dir). Baseline first (opfuse's op-by-op path;
// tools/eval_peer.py adds PyTorch eager / torch.compile to the same file), then `run` reports
// compiled / correct / runtime / speedup per problem and fast_0/1/2 + the geometric mean.
// Exit: 0 when the run completed (incorrect candidates are results, not errors), 2 for bad input
// (one line), 1 when the run itself failed (a lost CUDA context, a baseline that is not correct).
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "bench/eval.h"
#include "cli/cli.h"
#include "util/files.h"

#ifdef OPFUSE_WITH_CUDA
#include "bench/cuda/eval_candidate.h"
#include "bench/cuda/op_runner.h"
#include "cuda/device.h"
#endif

namespace opfuse::cli {
namespace {

struct EvalArgs {
  std::string problems_dir = "eval/problems", problems, output, baseline = "baseline_time.json", markdown;
  std::string backend = "cuda", candidate, problem, variant = "auto";
  int trials = bench::kEvalMinTrials;
  std::optional<uint64_t> seed;  // unset: a fresh random seed per run (printed and recorded)
  bool json = false, quick = false, accept_flagged = false;
};

// The run's seed: --seed, else a fresh one from the OS, so no kernel can memorise the inputs (they
// are a pure function of the seed). Printed with how to reproduce the run.
uint64_t RunSeed(const EvalArgs& a, const char* cmd) {
  if (a.seed) return *a.seed;
  std::random_device rd;
  const uint64_t seed = ((static_cast<uint64_t>(rd()) << 32) ^ rd()) & 0x7fffffffffffffffull;
  std::cerr << fmt::format("opfuse {}: seed {} (--seed {} reproduces this run)\n", cmd, seed, seed);
  return seed;
}

StatusOr<std::vector<bench::EvalProblem>> Problems(const EvalArgs& a) {
  OPFUSE_ASSIGN_OR_RETURN(auto all, bench::LoadProblems(a.problems_dir));
  return bench::SelectProblems(all, a.problems);
}

int RunList(const EvalArgs& a) {
  auto ps = Problems(a);
  if (!ps.ok()) return Fail("eval list", ps.status());
  if (a.json) {
    std::cout << bench::ProblemsToJson(*ps).dump(1) << "\n";
  } else {
    std::cout << fmt::format("{:<28} {:<5} {:<8} {:>6}  {:<40} {}\n", "problem", "dtype", "phase", "rows", "inputs -> outputs",
                             "description");
    for (const auto& p : *ps) {
      std::string io;
      for (const auto& t : p.c.inputs) io += fmt::format("{}{}[{}]", io.empty() ? "" : ",", t.name, fmt::join(t.shape, "x"));
      io += " ->";
      for (const auto& t : p.c.outputs) io += fmt::format(" {}[{}]", t.name, fmt::join(t.shape, "x"));
      std::cout << fmt::format("{:<28} {:<5} {:<8} {:>6}  {:<40} {}\n", p.name, DTypeName(p.c.dtype), p.c.phase, p.c.rows, io,
                               p.description);
    }
    std::cout << fmt::format("{} problems in {}\n", ps->size(), a.problems_dir);
  }
  SetExitCode(0);
  return 0;
}

Status CheckTrials(const EvalArgs& a) {
  if (a.trials < bench::kEvalMinTrials)
    return InvalidArgument(fmt::format("--trials {}: at least {} (fresh inputs per trial)", a.trials, bench::kEvalMinTrials));
  return Status::Ok();
}

#ifdef OPFUSE_WITH_CUDA
bench::OpSuite SuiteOf(const std::vector<bench::EvalProblem>& ps) {
  bench::OpSuite s;
  for (const auto& p : ps) s.cases.push_back(p.c);
  return s;
}

bench::OpBenchOptions Options(const EvalArgs& a, const char* cmd, uint64_t seed) {
  bench::OpBenchOptions o;
  o.timing = a.quick ? bench::TimingOptions::Quick() : bench::TimingOptions{};
  o.seed = seed;
  o.check_trials = a.trials;
  o.reject_all_zero = true;
  o.eval_rules = true;
  o.measure_gemm = false;
  o.measure_copy = false;
  o.command = CommandLine(cmd);
  return o;
}

nlohmann::json DeviceJson(const bench::BenchReport& r) {
  return {{"name", r.device.name}, {"arch", r.device.arch}, {"driver", r.device.driver}, {"runtime", r.device.runtime}};
}
#endif

int RunBaseline(const EvalArgs& a) {
  const char* cmd = "eval baseline";
  auto ps = Problems(a);
  if (!ps.ok()) return Fail(cmd, ps.status());
  if (Status st = CheckTrials(a); !st.ok()) return Fail(cmd, st);
  if (a.output.empty()) return Fail(cmd, InvalidArgument("--output must not be empty"));
  if (Status st = CheckOutputFile("--output", a.output); !st.ok()) return Fail(cmd, st);
#ifndef OPFUSE_WITH_CUDA
  return Fail(cmd, Unavailable("no CUDA device: opfuse was built without the CUDA backend; the baseline is a GPU timing"));
#else
  auto dev = cuda::QueryDevice();
  if (!dev.ok()) return Fail(cmd, dev.status());
  nlohmann::json file;
  if (std::ifstream(a.output).good()) {
    auto j = bench::ReadBaseline(a.output);
    if (!j.ok()) return Fail(cmd, j.status());
    file = *j;
    const std::string have = file.contains("device") ? file["device"].value("name", "") : "";
    if (!have.empty() && have != dev->name)
      return Fail(cmd, InvalidArgument(fmt::format("{} was measured on '{}', this device is '{}': use another --output",
                                                   a.output, have, dev->name)));
  }
  const uint64_t seed = RunSeed(a, cmd);
  bench::OpBenchOptions o = Options(a, "opfuse eval baseline", seed);
  o.variants = {"unfused"};
  Progress progress;
  o.on_case_start = [&](int i, int n, const std::string& id) { progress.Start(i, n, id); };
  auto rep = bench::RunOpBench(SuiteOf(*ps), o);
  progress.Clear();
  if (!rep.ok()) return Fail(cmd, rep.status());
  auto results = bench::ResultsFromReport(*rep, *ps, "unfused", "opfuse:unfused");
  nlohmann::json entries = nlohmann::json::object();
  int bad = 0;
  for (const auto& r : results) {
    nlohmann::json e = {{"us", r.correct ? nlohmann::json(r.runtime_us) : nlohmann::json(nullptr)},
                        {"method", r.method}, {"correct", r.correct}, {"check", r.check}, {"kernels", r.kernels.size()}};
    if (!r.correct) e["error"] = r.error, ++bad;
    entries[r.problem] = e;
  }
  if (Status st = bench::MergeBaseline(file, "opfuse_unfused", DeviceJson(*rep), entries, o.command); !st.ok())
    return Fail(cmd, st);
  if (Status st = bench::WriteJsonFile(a.output, file); !st.ok()) return Fail(cmd, st);
  std::cout << "| problem | opfuse unfused µs | method | correct |\n|---|---:|---|---|\n";
  for (const auto& r : results)
    std::cout << fmt::format("| {} | {} | {} | {} |\n", r.problem, r.correct ? fmt::format("{:.2f}", r.runtime_us) : "—", r.method,
                             r.correct ? "yes" : "no: " + r.error);
  std::cerr << fmt::format("opfuse eval baseline: {} problems on {}; wrote {}\n", results.size(), dev->name, a.output);
  if (!rep->complete) return Fail(cmd, Internal("run incomplete: " + rep->aborted));
  if (bad) return Fail(cmd, Internal(fmt::format("{} of {} baselines are not correct (see {})", bad, results.size(), a.output)));
  SetExitCode(0);
  return 0;
#endif
}

int RunEval(const EvalArgs& a) {
  const char* cmd = "eval run";
  if (a.output.empty()) return Fail(cmd, InvalidArgument("--output FILE.json is required"));
  if (Status st = CheckOutputFile("--output", a.output); !st.ok()) return Fail(cmd, st);
  if (!a.markdown.empty())
    if (Status st = CheckOutputFile("--markdown", a.markdown); !st.ok()) return Fail(cmd, st);
  if (Status st = CheckTrials(a); !st.ok()) return Fail(cmd, st);
  if (!a.candidate.empty() && a.problem.empty())
    return Fail(cmd, InvalidArgument("--candidate needs --problem NAME (the problem the kernel solves)"));
  if (a.candidate.empty() && !a.problem.empty()) return Fail(cmd, InvalidArgument("--problem is for --candidate; use --problems"));
  if (!a.candidate.empty() && !a.problems.empty()) return Fail(cmd, InvalidArgument("--candidate takes --problem, not --problems"));
  EvalArgs sel = a;
  if (!a.problem.empty()) sel.problems = a.problem;
  auto ps = Problems(sel);
  if (!ps.ok()) return Fail(cmd, ps.status());
  std::string source;
  if (!a.candidate.empty()) {
    auto text = ReadFileCapped(a.candidate, kMaxSourceFileBytes, "--candidate");
    if (!text.ok()) return Fail(cmd, text.status());
    source = std::move(*text);
  }
  const std::string cand_name = a.candidate.empty() ? "opfuse:" + a.variant : a.candidate;
  nlohmann::json meta = {{"command", CommandLine("opfuse eval run")}, {"date", bench::UtcNow()}, {"backend", a.backend},
                         {"candidate", cand_name}, {"trials", a.trials}, {"accept_flagged", a.accept_flagged}};
  std::vector<bench::EvalResult> results;
  Progress progress;
  std::string primary = "opfuse_unfused";
  if (a.backend == "cpu") {
    if (!a.candidate.empty())
      return Fail(cmd, InvalidArgument("a .cu candidate needs --backend cuda (the CPU backend checks opfuse's fused graph)"));
    const uint64_t seed = RunSeed(a, cmd);  // after every input check: a bad input stays one line
    meta["seed"] = seed;
    bench::CpuEvalOptions o;
    o.trials = a.trials;
    o.seed = seed;
    o.candidate_name = "opfuse:fused (cpu)";
    o.on_start = [&](int i, int n, const std::string& name) { progress.Start(i, n, name); };
    auto r = bench::RunEvalCpu(*ps, o);
    progress.Clear();
    if (!r.ok()) return Fail(cmd, r.status());
    results = std::move(*r);
    meta["candidate"] = o.candidate_name;
    meta["note"] = "CPU backend: correctness only, no timing (no speedups)";
  } else {
#ifndef OPFUSE_WITH_CUDA
    return Fail(cmd, Unavailable("no CUDA device: opfuse was built without the CUDA backend; --backend cpu checks correctness only"));
#else
    auto dev = cuda::QueryDevice();
    if (!dev.ok()) return Fail(cmd, dev.status());
    auto baseline = bench::ReadBaseline(a.baseline);
    if (!baseline.ok()) return Fail(cmd, baseline.status());
    const std::string bdev = baseline->contains("device") ? (*baseline)["device"].value("name", "") : "";
    if (bdev != dev->name)
      return Fail(cmd, InvalidArgument(fmt::format("{} was measured on '{}', this device is '{}': run `opfuse eval baseline` here",
                                                   a.baseline, bdev, dev->name)));
    const uint64_t seed = RunSeed(a, cmd);
    meta["seed"] = seed;
    bench::OpBenchOptions o = Options(a, "opfuse eval run", seed);
    if (!a.candidate.empty()) {
      o.variants = {"candidate"};
      const std::string label = a.candidate;
      o.candidate = [&source, label](const bench::OpCase& c) { return bench::LoadCandidate(source, label, c); };
    } else {
      o.variants = {a.variant};
    }
    o.on_case_start = [&](int i, int n, const std::string& id) { progress.Start(i, n, id); };
    auto rep = bench::RunOpBench(SuiteOf(*ps), o);
    progress.Clear();
    if (!rep.ok()) return Fail(cmd, rep.status());
    results = bench::ResultsFromReport(*rep, *ps, o.variants[0], cand_name);
    bench::ApplyBaseline(*baseline, results);
    meta["device"] = DeviceJson(*rep);
    meta["baseline_file"] = a.baseline;
    meta["timing"] = rep->timing;
    if (!rep->complete) meta["aborted"] = rep->aborted;
    for (const char* s : {"torch_eager"})
      for (const auto& r : results)
        if (r.baseline_us.count(s)) primary = s;
#endif
  }
  meta["primary_baseline"] = primary;
  const nlohmann::json out = bench::EvalToJson(results, meta);
  if (Status st = bench::WriteJsonFile(a.output, out); !st.ok()) return Fail(cmd, st);
  const std::string md = bench::EvalMarkdown(results, primary, a.accept_flagged);
  if (!a.markdown.empty()) {
    if (Status st = WriteFileAtomic(a.markdown, md); !st.ok()) return Fail(cmd, st);
  }
  std::cout << md;
  int correct = 0;
  for (const auto& r : results) correct += r.correct;
  std::cerr << fmt::format("opfuse eval run: {} of {} correct; wrote {}\n", correct, results.size(), a.output);
  if (out.contains("aborted")) return Fail(cmd, Internal("run incomplete: " + out["aborted"].get<std::string>()));
  SetExitCode(0);
  return 0;
}

void Common(CLI::App* c, EvalArgs* a) {
  c->add_option("--problems-dir", a->problems_dir, "directory of the problem .ofg files (default eval/problems)");
}

}  // namespace

void RegisterEval(CLI::App& app) {
  auto* ev = app.add_subcommand("eval", "KernelBench-style evaluation: `eval list`, `eval baseline`, `eval run` (docs/eval.md)");
  ev->require_subcommand(1);
  {
    auto a = std::make_shared<EvalArgs>();
    auto* c = ev->add_subcommand("list", "List the problems (no GPU needed)");
    Common(c, a.get());
    c->add_option("--problems", a->problems, "comma-separated problem names (default all)");
    c->add_flag("--json", a->json, "JSON (what tools/eval_peer.py reads)");
    c->callback([a] { RunList(*a); });
  }
  {
    auto a = std::make_shared<EvalArgs>();
    a->output = "baseline_time.json";
    auto* c = ev->add_subcommand("baseline", "Time the reference (opfuse's op-by-op path) into baseline_time.json");
    Common(c, a.get());
    c->add_option("--problems", a->problems, "comma-separated problem names (default all)");
    c->add_option("--output", a->output, "baseline file, merged into when it exists (default baseline_time.json)");
    c->add_option("--trials", a->trials, "check trials with fresh inputs (>= 5, default 5)");
    c->add_option("--seed", a->seed, "seed of the random inputs (default: a fresh one per run, printed)")->check(NonNegativeInteger);
    c->add_flag("--quick", a->quick, "fewer timing samples (a smoke run)");
    c->callback([a] { RunBaseline(*a); });
  }
  {
    auto a = std::make_shared<EvalArgs>();
    auto* c = ev->add_subcommand("run", "Evaluate opfuse's plans or a user kernel: compiled, correct, speedup, fast_p");
    Common(c, a.get());
    c->add_option("--problems", a->problems, "comma-separated problem names (default all)");
    c->add_option("--backend", a->backend, "cuda (default) or cpu (correctness only)")->check(CLI::IsMember({"cpu", "cuda"}));
    c->add_option("--variant", a->variant, "opfuse's plan: auto (default: the scheduled plan), library, jit or unfused")
        ->check(CLI::IsMember({"auto", "library", "jit", "unfused"}));
    c->add_option("--candidate", a->candidate, "a user kernel FILE.cu (ABI: docs/eval.md) instead of opfuse's plan");
    c->add_option("--problem", a->problem, "the problem the --candidate solves");
    c->add_option("--baseline", a->baseline, "baseline file (default baseline_time.json)");
    c->add_option("--output", a->output, "result JSON")->required();
    c->add_option("--markdown", a->markdown, "also write the markdown table to this file");
    c->add_option("--trials", a->trials, "check trials with fresh inputs (>= 5, default 5)");
    c->add_option("--seed", a->seed, "seed of the random inputs (default: a fresh one per run, printed and recorded in the JSON)")
        ->check(NonNegativeInteger);
    c->add_flag("--quick", a->quick, "fewer timing samples (a smoke run)");
    c->add_flag("--accept-flagged", a->accept_flagged,
                "count results with a speedup over 10x in fast_p and the geomean (after reviewing them; held out otherwise)");
    c->callback([a] { RunEval(*a); });
  }
}

}  // namespace opfuse::cli
