// `opfuse run FILE [--backend cpu|cuda] [--variant auto|unfused|library|jit] [--check] [--seed N] [--shape SYM=VAL ...]`
//
// Parses a .ofg graph, binds its symbols (from --shape; any symbol left unbound defaults to
// kDefaultSymbolValue, said on stderr), fills every input and param with fresh seeded random
// values (RandomInputs: floats in [-1, 1], embedding ids inside their table), executes the graph
// and prints one line of statistics per output: name, declared type, bound shape, min, max, mean,
// L2 norm (over finite elements) and the number of NaN and Inf elements. The statistics make a
// quick sanity check and a cheap cross-backend comparison (same seed, same numbers). The graph is
// compiled by the chosen Backend (runtime/backend.h); --check also runs the CPU reference op by op
// and prints each output's relative error against it (exit 1 when one exceeds its dtype's bound).
// Exit codes: 0 ok, 2 bad input (file, --shape, unknown backend, a backend not built), 1 internal.
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "cli/cli.h"
#include "runtime/backend.h"
#include "runtime/cpu/cpu_executor.h"

namespace opfuse::cli {
namespace {

struct RunOptions {
  std::string file;
  std::string backend = "cpu";
  std::string variant = "auto";
  bool check = false;
  uint64_t seed = 0;
  std::vector<std::string> shapes;
};

struct Stats {
  double min = std::numeric_limits<double>::infinity(), max = -std::numeric_limits<double>::infinity();
  double sum = 0, sumsq = 0;
  int64_t finite = 0, nan = 0, inf = 0;
};

Stats ComputeStats(const HostTensor& t) {
  Stats s;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.get(i);
    if (std::isnan(v)) { ++s.nan; continue; }
    if (std::isinf(v)) { ++s.inf; continue; }
    ++s.finite;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
    s.sum += v;
    s.sumsq += v * v;
  }
  return s;
}

std::string BoundShapeString(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int RunMain(const RunOptions& o) {
  auto backend = MakeBackend(o.backend);
  if (!backend.ok()) return Fail("run", backend.status());
  auto graph = ParseGraphFile(o.file);
  if (!graph.ok()) return Fail("run", graph.status());
  auto bindings = ParseShapeBindings(o.shapes);
  if (!bindings.ok()) return Fail("run", bindings.status());
  const auto symbols = graph->Symbols();
  const std::set<std::string> symset(symbols.begin(), symbols.end());
  for (const auto& [sym, val] : *bindings)
    if (!symset.count(sym))
      return Fail("run", InvalidArgument(fmt::format("--shape {}={}: the graph has no symbol '{}' (its symbols: {})", sym, val,
                                                     sym, symbols.empty() ? "none" : fmt::format("{}", fmt::join(symbols, ", ")))));
  for (const auto& sym : symbols)
    if (!bindings->count(sym)) {
      (*bindings)[sym] = kDefaultSymbolValue;
      std::cerr << fmt::format("opfuse run: symbol {} not bound (--shape {}=N); using {}={}\n", sym, sym, sym,
                               kDefaultSymbolValue);
    }

  // Refuse shapes whose inputs alone would not fit in memory, rather than dying in an allocation.
  double input_bytes = 0;
  for (int v : graph->inputs) {
    double n = DTypeSize(graph->values[v].type.dtype);
    for (const auto& d : graph->values[v].type.shape) n *= static_cast<double>(d.is_static() ? d.value : bindings->at(d.sym));
    input_bytes += n;
  }
  constexpr double kMaxInputBytes = 16.0 * (1ull << 30);
  if (input_bytes > kMaxInputBytes)
    return Fail("run", InvalidArgument(fmt::format("inputs would need {:.1f} GiB of host memory at these shapes (limit {:.0f} GiB)",
                                                   input_bytes / (1ull << 30), kMaxInputBytes / (1ull << 30))));
  const auto inputs = RandomInputs(*graph, *bindings, o.seed);
  CompileOptions co;
  auto config = FusionConfig::FromEnv();
  if (!config.ok()) return Fail("run", config.status());
  co.config = *config;
  co.variant = o.variant;
  auto exe = (*backend)->Compile(*graph, co);
  if (!exe.ok()) return Fail("run", exe.status());
  auto outputs = (*exe)->Run(inputs, *bindings);  // the first run builds the plan; time the second
  if (!outputs.ok()) return Fail("run", outputs.status());
  const auto t0 = std::chrono::steady_clock::now();
  outputs = (*exe)->Run(inputs, *bindings);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!outputs.ok()) return Fail("run", outputs.status());
  // --check: the reference runs the executable's own fusion groups on the CPU with f32
  // intermediates (CpuRunOptions::fuse_groups), i.e. what its fused kernels compute; op by op (bf16
  // intermediates) can differ by several percent on badly scaled graphs and is printed beside it.
  std::map<std::string, HostTensor> reference, op_by_op;
  if (o.check) {
    CpuRunOptions ro;
    ro.bindings = *bindings;
    auto ref = RunGraphCpu(*graph, inputs, ro);
    if (!ref.ok()) return Fail("run", ref.status());
    op_by_op = std::move(*ref);
    ro.fuse_groups = true;
    ref = RunGraphCpu((*exe)->graph(), inputs, ro);
    if (!ref.ok()) return Fail("run", ref.status());
    reference = std::move(*ref);
  }
  std::string binds;
  for (const auto& [sym, val] : *bindings) binds += fmt::format("{}{}={}", binds.empty() ? "" : " ", sym, val);
  std::cout << fmt::format("graph {}: backend {} ({}), variant {}, seed {}, {}{}, {} output{}, {} steps/run, {:.3f} ms "
                           "(host-timed, includes copies)\n",
                           graph->name, o.backend, (*backend)->device(), o.variant, o.seed,
                           binds.empty() ? "no symbols" : "bindings ", binds, graph->outputs.size(),
                           graph->outputs.size() == 1 ? "" : "s", (*exe)->steps_per_run(), ms);
  bool check_failed = false;
  for (int v : graph->outputs) {
    const Value& val = graph->values[v];
    const HostTensor& t = outputs->at(val.name);
    const Stats s = ComputeStats(t);
    const double mean = s.finite ? s.sum / static_cast<double>(s.finite) : std::nan("");
    std::cout << fmt::format("{}: {} = {}  min {:.6g}  max {:.6g}  mean {:.6g}  l2 {:.6g}  nan {}  inf {}\n", val.name,
                             val.type.ToString(), BoundShapeString(t.shape), s.finite ? s.min : std::nan(""),
                             s.finite ? s.max : std::nan(""), mean, std::sqrt(s.sumsq), s.nan, s.inf);
    if (o.check) {
      const double err = RelativeError(t, reference.at(val.name)), err_ops = RelativeError(t, op_by_op.at(val.name));
      const double bound = val.type.dtype == DType::kBF16 ? 3e-2 : val.type.dtype == DType::kF16 ? 5e-3 : IsFloat(val.type.dtype) ? 1e-4 : 0.0;
      const bool ok = err <= bound && s.nan == 0;
      check_failed |= !ok;
      std::cout << fmt::format("  check vs CPU reference (same fusion groups): rel_err {:.3e} (bound {:.0e}) {}; "
                               "vs op by op: {:.3e}\n", err, bound, ok ? "ok" : "FAILED", err_ops);
    }
  }
  if (check_failed) {
    std::cerr << "opfuse run: output differs from the CPU reference beyond its bound\n";
    SetExitCode(1);
    return 1;
  }
  SetExitCode(0);
  return 0;
}

}  // namespace

void RegisterRun(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Execute a graph on seeded random inputs and print statistics of every output");
  cmd->add_option("FILE", o->file, "graph file (.ofg, grammar in docs/graph_format.md)")->required();
  cmd->add_option("--backend", o->backend, "cpu (the f32-accumulating reference, default) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--variant", o->variant,
                  "cuda: how fused groups run: auto (scheduled), unfused (library kernel per op), library (hand-written "
                  "fused kernels), jit (generated kernels)")
      ->check(CLI::IsMember({"auto", "unfused", "library", "jit"}));
  cmd->add_flag("--check", o->check, "also run the CPU reference op by op and print each output's relative error");
  cmd->add_option("--seed", o->seed, "seed of the random inputs (default 0); same seed, same inputs")->check(NonNegativeInteger);
  cmd->add_option("--shape", o->shapes, "bind a symbolic dim, SYM=VALUE (repeatable); unbound symbols default to 8")
      ->allow_extra_args(false);
  cmd->footer(
      "Inputs and params get fresh random values: floats uniform in [-1, 1], integer ids that feed an\n"
      "embedding inside its table, other integers in [0, 16). Each output prints its type, bound shape,\n"
      "min / max / mean / L2 norm over finite elements, and its NaN and Inf counts.\n"
      "Exit 0 ok, 2 bad input (one-line reason on stderr), 1 internal failure.\n"
      "Example: opfuse run examples/graphs/swiglu.ofg --shape T=16 --seed 1");
  cmd->callback([o] { RunMain(*o); });
}

}  // namespace opfuse::cli
