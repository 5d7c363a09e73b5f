// `opfuse bench e2e`: the end-to-end Llama benchmark of the fusion strategies (DESIGN.md
// "Llama-family engine", issue 6): for each strategy (never_fuse / always_fuse / smart_schedule)
// and each case "[prefill=P, decode=D(, batch=B)]", an Engine is compiled (compile_ms measured),
// warmed up with one untimed generation, then `--runs` generations of P prompt tokens + D greedy
// decode steps are timed, the strategies' runs of a case interleaved (--order); the medians go to
// DESIGN.md's JSON and a table. Every figure is
// measured (none derived from another run): prefill_ms and decode ms per step are the engine's
// wall-clock timings including the device synchronisation, total_ms their sum. The table also
// shows kernels launched per decode step and per prefill — the proof that the strategies ran
// different kernels — and the run fails (exit 1) if two strategies launched the same number of
// kernels per decode step while their fused graphs differ in nothing (the strategies did nothing).
// Exit codes: 0 ok; 2 bad flags/model/cases or no CUDA device for --backend cuda; 1 internal error.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "bench/e2e_cases.h"
#include "bench/plan_check.h"
#include "scheduler/profile_db.h"
#include "model/llama/engine.h"
#include "util/files.h"

namespace opfuse::cli {
namespace {

struct E2eArgs {
  std::string model = "builtin", backend = "cuda", strategies = "never,always,smart", output, dtype, profile;
  std::string order = "interleaved";
  std::vector<std::string> cases;
  int runs = 3;
  uint64_t seed = 1;
  int64_t max_context = 0;
  int64_t tensor_parallel = 1;
};

using bench::E2eCase;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// The fused groups of a compiled graph, one entry per kind and plan: "pattern:rms_norm (fused library)": 22,
// "matmul:norm_swiglu (fused library gemv<=2)", a declined fuse_matmul group "... (ops one by one (library))".
nlohmann::json GroupSummary(const Graph& g) {
  std::map<std::string, int> count;
  for (const auto& grp : g.groups) {
    if (grp.decision.fuse || grp.matmul) ++count[grp.kind + " (" + bench::GroupPlanName(grp) + ")"];
  }
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [k, n] : count) out[k] = n;
  return out;
}

int RunE2e(const E2eArgs& a) {
  if (a.runs < 1) return Fail("bench e2e", InvalidArgument("--runs must be >= 1"));
  std::vector<llama::Strategy> strategies;
  for (const std::string& name : SplitCommaList(a.strategies)) {
    auto s = llama::ParseStrategy(name);
    if (!s.ok()) return Fail("bench e2e", s.status());
    if (std::find(strategies.begin(), strategies.end(), *s) == strategies.end()) strategies.push_back(*s);
  }
  // Everything is checked before the first engine is built: the output path, the model's config
  // (for the context), every case against that context.
  if (!a.output.empty())
    if (Status s = CheckOutputFile("--output", a.output); !s.ok()) return Fail("bench e2e", s);
  if (a.max_context < 0) return Fail("bench e2e", InvalidArgument("--max-context must be >= 0"));
  if (Status s = llama::Engine::CheckBackend(a.backend); !s.ok()) return Fail("bench e2e", s);
  auto config = a.model != "builtin" ? llama::LoadConfigFile(a.model + "/config.json")
                                     : llama::BuiltinConfig(a.backend == "cuda" ? "tinyllama-1.1b" : "tiny");
  if (!config.ok()) return Fail("bench e2e", config.status());
  const int64_t context = llama::ContextFor(*config, a.max_context);
  if (Status s = llama::CheckContext(*config, context); !s.ok()) return Fail("bench e2e", s);
  // Default cases, from the context: a short prompt and decode, the whole context as one prefill,
  // and the short case at batch 8 (TinyLlama's 2048: 128/32, 2048/0, 128/32 x 8).
  const int64_t short_prefill = std::min<int64_t>(128, std::max<int64_t>(1, context / 2));
  const int64_t short_decode = std::min<int64_t>(32, context - short_prefill);
  const std::vector<std::string> texts =
      a.cases.empty() ? std::vector<std::string>{fmt::format("[prefill={}, decode={}]", short_prefill, short_decode),
                                                 fmt::format("[prefill={}, decode=0]", context),
                                                 fmt::format("[prefill={}, decode={}, batch=8]", short_prefill, short_decode)}
                      : a.cases;
  auto parsed = bench::ParseE2eCases(texts);
  if (!parsed.ok()) return Fail("bench e2e", parsed.status());
  const std::vector<E2eCase> cases = std::move(*parsed);
  for (const E2eCase& c : cases) {
    if (c.batch > llama::kMaxBatch)
      return Fail("bench e2e", InvalidArgument(fmt::format("--cases {}: batch {} exceeds the engine's maximum of {}", c.label,
                                                           c.batch, llama::kMaxBatch)));
    // prefill + decode - 1 positions are cached (the last token is sampled, never fed back).
    if (c.prefill > context || c.decode > context - c.prefill + 1)
      return Fail("bench e2e", InvalidArgument(fmt::format("--cases {}: prefill + decode = {} exceeds the context of {} "
                                                           "(--max-context)", c.label, c.prefill + c.decode, context)));
  }

  nlohmann::json results = nlohmann::json::object();
  nlohmann::json details = nlohmann::json::object();
  std::string device, model_name, dtype_name;
  std::map<std::string, std::map<std::string, int>> kernels_per_step;  // strategy -> case -> kernels
  // always_fuse's and smart_schedule's compiled graphs per case (decode, prefill): the plan check
  std::map<std::string, std::pair<Graph, Graph>> always_graphs, smart_graphs;
  std::map<std::string, int64_t> smart_plan_length;  // the prompt length smart's prefill plan was scheduled at
  // One case at a time. Interleaved (the default): every strategy's engine of the case is alive at
  // once and the timed runs go round-robin, the first strategy of a round rotating, so that the
  // process's state (device memory handed out so far, the allocator's caches, clocks, whatever an
  // earlier engine left) weighs on each strategy alike; engines created one after another measured
  // a drift of several percent between identical launch-bound cases. Sequential: one engine at a
  // time, for models too large to hold one copy per strategy.
  struct Slot {
    llama::Strategy s = llama::Strategy::kNeverFuse;
    std::string name;
    std::unique_ptr<llama::Engine> engine;
    std::vector<double> prefill, per_tok, totals, coll_ms;
    int64_t coll_count = 0;
    std::vector<int32_t> first_tokens;
  };
  Progress progress;
  const int total = static_cast<int>(strategies.size() * cases.size());
  int done = 0;
  for (llama::Strategy s : strategies) {
    results[llama::StrategyName(s)] = nlohmann::json::object();
    details[llama::StrategyName(s)] = nlohmann::json::object();
  }
  auto create = [&](Slot& sl, const E2eCase& c) -> Status {
    progress.Start(done++, total, sl.name + " " + c.label);
    llama::EngineOptions eo;
    if (a.model != "builtin") eo.model_dir = a.model;
    eo.backend = a.backend;
    eo.strategy = sl.s;
    eo.batch = c.batch;
    eo.dtype = a.dtype;
    if (sl.s == llama::Strategy::kSmartSchedule) eo.profile_path = a.profile;  // the others take no profile
    eo.max_context = a.max_context;
    eo.tensor_parallel = a.tensor_parallel;
    OPFUSE_ASSIGN_OR_RETURN(sl.engine, llama::Engine::Create(eo));
    device = sl.engine->device();
    model_name = sl.engine->model_name();
    dtype_name = DTypeName(sl.engine->dtype());
    return Status::Ok();
  };
  // Run r of one engine; run 0 is the warm-up (plans, CUDA-graph capture), untimed.
  auto run = [&](Slot& sl, const E2eCase& c, const std::vector<std::vector<int32_t>>& prompts, int r) -> Status {
    llama::Engine& e = *sl.engine;
    llama::GenerateOptions go;
    go.max_new_tokens = c.decode;
    e.Reset();
    const double coll_ms0 = e.collective_ms();
    const int64_t coll0 = e.collectives();
    OPFUSE_ASSIGN_OR_RETURN(llama::GenerateResult g, e.Generate(prompts, go));
    if (r == 0) {
      sl.first_tokens = g.tokens.empty() ? std::vector<int32_t>{} : g.tokens[0];
      return Status::Ok();
    }
    if (!g.tokens.empty() && g.tokens[0] != sl.first_tokens)
      return Internal(fmt::format("{} {}: run {} generated other tokens than the warm-up run (greedy decoding must be "
                                  "deterministic)", sl.name, c.label, r));
    sl.coll_ms.push_back(e.collective_ms() - coll_ms0);
    sl.coll_count = e.collectives() - coll0;
    sl.prefill.push_back(g.prefill_ms);
    sl.per_tok.push_back(g.ms_per_token());
    sl.totals.push_back(g.prefill_ms + g.decode_ms);
    return Status::Ok();
  };
  auto record = [&](Slot& sl, const E2eCase& c) {
    llama::Engine& e = *sl.engine;
    const llama::Strategy s = sl.s;
    const std::string& sname = sl.name;
    const int kps = e.kernels_per_decode_step();
    // the prefill plan this case's prompts ran (smart_schedule: the plan of the nearest prompt length)
    if (s == llama::Strategy::kAlwaysFuse) always_graphs[c.label] = {e.decode_graph(), e.prefill_graph(c.prefill)};
    if (s == llama::Strategy::kSmartSchedule) {
      smart_graphs[c.label] = {e.decode_graph(), e.prefill_graph(c.prefill)};
      smart_plan_length[c.label] = e.prefill_plan_length(c.prefill);
    }
    kernels_per_step[sname][c.label] = kps;
    const double mpt = Median(sl.per_tok);
    results[sname][c.label] = {{"total_ms", Median(sl.totals)},
                               {"prefill_ms", Median(sl.prefill)},
                               {"decode_ms_per_token", mpt},
                               {"kernels_per_decode_step", kps},
                               {"compile_ms", e.compile_ms()},
                               {"kernels_per_prefill", e.kernels_per_prefill()},
                               {"decode_tokens_per_s", mpt > 0 ? 1000.0 * static_cast<double>(c.batch) / mpt : 0.0},
                               {"batch", c.batch},
                               {"tensor_parallel", e.tensor_parallel()}};
    if (e.tensor_parallel() > 1) {  // rank 0's collectives of one generation (prefill + decode)
      auto& r = results[sname][c.label];
      r["collectives_per_run"] = sl.coll_count;
      // the host's view (the CPU's in-process communicator, waits included); null on GPUs
      r["collective_ms_per_run"] = e.collective_ms() >= 0 ? nlohmann::json(Median(sl.coll_ms)) : nlohmann::json();
      // GPUs: one all_reduce of the decode step's message, device µs, every rank at once
      // {"one_shot", "nccl", "used", "fused_add_rms_norm", "nccl_then_add_rms_norm", "group_then_add_rms_norm", ...}; a failed
      // measurement is reported, not dropped
      if (auto us = e.DecodeAllReduceUs(); us.ok()) r["decode_all_reduce_us"] = *us;
      else if (us.status().code() != StatusCode::kUnimplemented) r["decode_all_reduce_error"] = us.status().message();
    }
    details[sname][c.label] = {{"prefill_runs_ms", sl.prefill},
                               {"decode_ms_per_token_runs", sl.per_tok},
                               {"decode_groups", GroupSummary(e.decode_graph())},
                               {"prefill_groups", GroupSummary(e.prefill_graph(c.prefill))},
                               {"prefill_plans", e.prefill_plans()},
                               {"prefill_plan_length", e.prefill_plan_length(c.prefill)}};
  };
  auto case_status = [&](const E2eCase& c) -> Status {
    std::vector<std::vector<int32_t>> prompts(c.batch);
    {
      std::mt19937_64 rng(a.seed);
      std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(config->vocab_size - 1));
      for (auto& p : prompts) {
        p.resize(c.prefill);
        for (auto& t : p) t = tok(rng);
      }
    }
    std::vector<Slot> slots;
    for (llama::Strategy s : strategies) {
      Slot& sl = slots.emplace_back();
      sl.s = s;
      sl.name = llama::StrategyName(s);
    }
    if (a.order == "sequential") {
      for (Slot& sl : slots) {
        OPFUSE_RETURN_IF_ERROR(create(sl, c));
        for (int r = 0; r <= a.runs; ++r) OPFUSE_RETURN_IF_ERROR(run(sl, c, prompts, r));
        record(sl, c);
        sl.engine.reset();
      }
      return Status::Ok();
    }
    for (Slot& sl : slots) OPFUSE_RETURN_IF_ERROR(create(sl, c));
    for (Slot& sl : slots) OPFUSE_RETURN_IF_ERROR(run(sl, c, prompts, 0));
    const size_t n = slots.size();
    for (int r = 1; r <= a.runs; ++r)
      for (size_t i = 0; i < n; ++i) OPFUSE_RETURN_IF_ERROR(run(slots[(i + static_cast<size_t>(r)) % n], c, prompts, r));
    for (Slot& sl : slots) record(sl, c);
    return Status::Ok();
  };
  for (const auto& c : cases) {
    if (Status st = case_status(c); !st.ok()) {
      progress.Clear();
      return Fail("bench e2e", st);
    }
  }
  progress.Clear();

  nlohmann::json doc = {{"config",
                         {{"model", model_name},
                          {"device", device},
                          {"dtype", dtype_name},
                          {"runs", a.runs},
                          {"order", a.order},
                          {"backend", a.backend},
                          {"tensor_parallel", a.tensor_parallel},
                          {"command", CommandLine("opfuse bench e2e")},
                          {"date", UtcNow()},
                          {"timing", "wall clock per Engine call including the device sync; median of runs after one "
                                     "warm-up generation, the strategies' runs of a case interleaved unless order is "
                                     "sequential; decode = greedy, argmax on the device"}}},
                        {"results", results},
                        {"details", details}};
  if (!a.output.empty()) {
    if (Status st = WriteFileAtomic(a.output, doc.dump(1) + "\n"); !st.ok()) return Fail("bench e2e", st);
  }

  std::cout << fmt::format("model {} ({}) on {}, {} runs each\n\n", model_name, dtype_name, device, a.runs);
  std::cout << "| strategy | case | prefill ms | decode ms/token | tokens/s | total ms | kernels/decode step | kernels/prefill | compile ms |\n";
  std::cout << "|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (llama::Strategy s : strategies) {
    const std::string sname = llama::StrategyName(s);
    for (const auto& c : cases) {
      const auto& r = results[sname][c.label];
      std::cout << fmt::format("| {} | {} | {:.2f} | {:.3f} | {:.0f} | {:.2f} | {} | {} | {:.0f} |\n", sname, c.label,
                               r["prefill_ms"].get<double>(), r["decode_ms_per_token"].get<double>(),
                               r["decode_tokens_per_s"].get<double>(), r["total_ms"].get<double>(),
                               r["kernels_per_decode_step"].get<int>(), r["kernels_per_prefill"].get<int>(),
                               r["compile_ms"].get<double>());
    }
  }
  // The strategies must have run different kernels (never vs always at least).
  auto has = [&](const char* n) { return kernels_per_step.count(n) > 0; };
  if (has("never_fuse") && has("always_fuse")) {
    for (const auto& c : cases) {
      const int nv = kernels_per_step["never_fuse"][c.label], al = kernels_per_step["always_fuse"][c.label];
      std::cout << fmt::format("{}: never_fuse launches {} kernels per decode step, always_fuse {}\n", c.label, nv, al);
      if (nv == al && c.decode > 0)
        return Fail("bench e2e", Internal(fmt::format("{}: never_fuse and always_fuse launched the same number of kernels "
                                                      "per decode step ({}): the strategies made no difference",
                                                      c.label, nv)));
    }
  }
  // smart_schedule must have run what its profile picks where that differs from always_fuse's plan.
  if (!a.profile.empty() && !always_graphs.empty() && !smart_graphs.empty()) {
    auto profile = scheduler::ProfileDb::Load(a.profile);
    if (!profile.ok()) return Fail("bench e2e", profile.status());
    auto base = FusionConfig::FromEnv();
    if (!base.ok()) return Fail("bench e2e", base.status());
    const FusionConfig smart_config = llama::StrategyConfig(llama::Strategy::kSmartSchedule, *base);
    std::vector<std::string> ignored;
    for (const auto& [label, ag] : always_graphs) {
      auto sg = smart_graphs.find(label);
      if (sg == smart_graphs.end()) continue;
      for (auto& line : bench::IgnoredProfileChoices(ag.first, sg->second.first, *profile, {}, smart_config))
        ignored.push_back(label + " decode: " + line);
      const Bindings at = {{"T", smart_plan_length.at(label)}};
      for (auto& line : bench::IgnoredProfileChoices(ag.second, sg->second.second, *profile, at, smart_config))
        ignored.push_back(label + " prefill: " + line);
    }
    if (!ignored.empty())
      return Fail("bench e2e", Internal(fmt::format("smart_schedule ran always_fuse's plan where its profile picks another, "
                                                    "for {} group(s); first: {}", ignored.size(), ignored.front())));
    std::cout << "smart_schedule ran its profile's choice for every group (checked against always_fuse's plan)\n";
  }
  if (!a.output.empty()) std::cerr << "opfuse bench e2e: wrote " << a.output << "\n";
  SetExitCode(0);
  return 0;
}

}  // namespace

void RegisterBenchE2e(CLI::App& bench) {
  auto a = std::make_shared<E2eArgs>();
  auto* cmd = bench.add_subcommand("e2e", "End-to-end Llama benchmark of never_fuse / always_fuse / smart_schedule");
  cmd->add_option("--model", a->model, "a Hugging Face model directory, or builtin (TinyLlama-1.1B shapes on cuda, tiny on cpu)")
      ->capture_default_str();
  cmd->add_option("--backend", a->backend, "cpu or cuda")->capture_default_str();
  cmd->add_option("--strategies", a->strategies, "comma-separated: never, always, smart")->capture_default_str();
  cmd->add_option("--cases", a->cases,
                  "cases such as \"[prefill=128, decode=16]\" or \"[prefill=128, decode=32, batch=8]\" (repeatable; default: "
                  "prefill=128/decode=32, prefill=CONTEXT/decode=0 (the whole context), prefill=128/decode=32/batch=8, "
                  "shortened to fit a smaller context)");
  cmd->add_option("--runs", a->runs, "timed runs per case (after one warm-up); medians are reported")->capture_default_str();
  cmd->add_option("--order", a->order,
                  "interleaved: every strategy's engine of a case alive at once, the timed runs round-robin (the first "
                  "strategy of a round rotating); sequential: one engine at a time (a model too large for one copy "
                  "per strategy)")
      ->check(CLI::IsMember({"interleaved", "sequential"}))
      ->capture_default_str();
  cmd->add_option("--output", a->output, "write the JSON (DESIGN.md format, plus details) here");
  cmd->add_option("--dtype", a->dtype, "f32, f16 or bf16 (default: the checkpoint's; built-in: bf16 on cuda, f32 on cpu)");
  cmd->add_option("--profile", a->profile, "profile_result.json for smart_schedule (default: its cost model)");
  cmd->add_option("--tensor-parallel", a->tensor_parallel,
                  "split the model over N ranks, one thread per rank (docs/tensor_parallel.md; cuda: rank r on GPU r, NCCL)")
      ->capture_default_str();
  cmd->add_option("--max-context", a->max_context, "KV-cache positions (default: the model's max_position_embeddings, at most 8192)");
  cmd->add_option("--seed", a->seed, "seed of the random prompt ids")->capture_default_str()->check(NonNegativeInteger);
  cmd->footer(
      "Prompts are random token ids; decoding is greedy (argmax on the device) and must give the same tokens on\n"
      "every run. Timings are wall clock per engine call, including the device sync. See docs/engine.md.\n"
      "Exit 0 ok, 2 bad flags / model / cases or no CUDA device, 1 internal error.");
  cmd->callback([a] { RunE2e(*a); });
}

}  // namespace opfuse::cli
