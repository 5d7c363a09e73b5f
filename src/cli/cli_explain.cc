// `opfuse explain FILE [--json] [--dump-after-each] [--shape SYM=VAL ...] [--disable NAME,...]`
//
// Runs the pass pipeline (src/passes/pipeline.cc) on a .ofg graph and shows what fusion decided
// and why: the passes that ran, the notes they left (patterns blocked by an escaping value,
// composites decomposed because their pattern is off, passes skipped), then every group — index,
// kind, ops, verdict with its reason, variant and kernel name. --json prints the same as exactly
// one JSON document (nlohmann_json) for scripts and tests; --dump-after-each adds the graph text
// after every pass (in JSON as "dumps"). Kill switches come from OPFUSE_DISABLE and --disable
// (same names; unknown names are an error listing the valid ones).
// --profile P hands the schedule pass a measured profile (src/scheduler/profile_db.h): each group
// then also shows the source of its decision (config | profile | cost_model), the profile point or
// interpolation used and the expected us saved. The profile must come from the target device
// (--device/--sm, else the CUDA device when there is one): on a mismatch it is ignored with a
// warning on stderr (exit 0); a malformed profile is bad input (exit 2).
// Exit codes: 0 ok, 2 bad input (parse error "file: line N: problem", bad --shape/--disable/--profile), 1 internal.
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "fusion/group_info.h"
#include "passes/pipeline.h"
#include "scheduler/profile_db.h"
#ifdef OPFUSE_WITH_CUDA
#include "cuda/device.h"
#endif

namespace opfuse::cli {
namespace {

struct ExplainOptions {
  std::string file;
  bool json = false;
  bool dump_after_each = false;
  bool no_fusion = false;
  std::vector<std::string> shapes;
  std::vector<std::string> disable;
  std::string profile;
  std::string device, sm;   // the target device the profile must match ("" = the CUDA device, if any)
};

// The profile for --profile: loaded and checked against the target device. `db` stays empty when
// the profile does not apply (the warning says why); an error Status for a malformed profile.
struct LoadedProfile {
  std::optional<scheduler::ProfileDb> db;
  std::string warning;   // device mismatch (profile ignored) or "no device to compare"
  bool ignored = false;
};

StatusOr<LoadedProfile> LoadProfile(const ExplainOptions& o) {
  LoadedProfile out;
  auto db = scheduler::ProfileDb::Load(o.profile);
  if (!db.ok()) return db.status();
  std::optional<scheduler::DeviceInfo> target;
  if (!o.device.empty()) {
    target = scheduler::DeviceInfo{o.device, o.sm.empty() ? db->device.sm : o.sm, "", 0, 0};
  } else {
#ifdef OPFUSE_WITH_CUDA
    if (auto dev = cuda::QueryDevice(); dev.ok())
      target = scheduler::DeviceInfo{dev->name, fmt::format("{}.{}", dev->major, dev->minor), "", 0, 0};
#endif
  }
  if (!target) {
    out.warning = fmt::format("no CUDA device here and no --device: using the profile measured on '{}' (sm {}) as given",
                              db->device.name, db->device.sm);
  } else if (Status s = scheduler::CheckDevice(db->device, *target); !s.ok()) {
    out.warning = s.message() + "; profile ignored";
    out.ignored = true;
    return out;
  }
  out.db = std::move(*db);
  return out;
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

int ExplainMain(const ExplainOptions& o) {
  auto parsed = ParseGraphFile(o.file);
  if (!parsed.ok()) return Fail("explain", parsed.status());
  Graph g = std::move(*parsed);
  const size_t ops_in = g.nodes.size();

  auto bindings = ParseShapeBindings(o.shapes);
  if (!bindings.ok()) return Fail("explain", bindings.status());
  auto config = FusionConfig::FromEnv();
  if (!config.ok()) return Fail("explain", config.status());
  PassContext ctx;
  ctx.config = *config;
  ctx.bindings = *bindings;
  ctx.config.enable_fusion = !o.no_fusion;
  for (const auto& d : o.disable)
    if (Status s = ctx.config.Disable(d, "--disable"); !s.ok()) return Fail("explain", s);

  LoadedProfile profile;
  if (!o.profile.empty()) {
    auto p = LoadProfile(o);
    if (!p.ok()) return Fail("explain", p.status());
    profile = std::move(*p);
    if (!profile.warning.empty()) std::cerr << "opfuse explain: warning: " << o.profile << ": " << profile.warning << "\n";
    if (profile.db) ctx.profile = &*profile.db;
  }

  std::vector<std::pair<std::string, std::string>> dumps;
  AfterPassFn after;
  if (o.dump_after_each) after = [&](const std::string& pass, const Graph& gr) { dumps.emplace_back(pass, PrintGraph(gr)); };
  if (Status s = RunPipeline(g, ctx, after); !s.ok()) return Fail("explain", s);
  const auto passes = PassesToRun(ctx.config);

  int fused = 0;
  for (const auto& grp : g.groups) fused += grp.decision.fuse;

  if (o.json) {
    nlohmann::ordered_json j;
    j["graph"] = g.name;
    j["passes"] = passes;
    j["bindings"] = nlohmann::ordered_json::object();
    for (const auto& [sym, val] : ctx.bindings) j["bindings"][sym] = val;
    if (!o.profile.empty())
      j["profile"] = {{"path", o.profile},
                      {"used", ctx.profile != nullptr},
                      {"device", profile.db ? profile.db->device.name : ""},
                      {"warning", profile.warning}};
    j["groups"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < g.groups.size(); ++i) {
      const auto& grp = g.groups[i];
      nlohmann::ordered_json jg = {{"ops", fusion::GroupOpNames(g, grp.nodes)},
                                   {"values", fusion::GroupValueNames(g, grp.nodes)},
                                   {"kind", grp.kind},
                                   {"decision", grp.decision.fuse ? "fuse" : "no"},
                                   {"reason", grp.decision.reason},
                                   {"variant", grp.variant == Variant::kAuto ? "" : VariantName(grp.variant)},
                                   {"name", grp.name}};
      if (i < ctx.choices.size()) {
        const auto& c = ctx.choices[i];
        jg["source"] = scheduler::SourceName(c.source);
        jg["expected_us_saved"] = c.expected_us_saved;
        jg["evidence"] = c.evidence;
      }
      j["groups"].push_back(std::move(jg));
    }
    j["notes"] = nlohmann::ordered_json::array();
    for (const auto& n : ctx.notes)
      j["notes"].push_back({{"pass", n.pass}, {"subject", n.subject}, {"decision", n.decision.fuse ? "fuse" : "no"},
                            {"reason", n.decision.reason}});
    if (o.dump_after_each) {
      j["dumps"] = nlohmann::ordered_json::array();
      for (const auto& [pass, text] : dumps) j["dumps"].push_back({{"pass", pass}, {"graph", text}});
    }
    std::cout << j.dump(2) << "\n";
    SetExitCode(0);
    return 0;
  }

  for (const auto& [pass, text] : dumps) std::cout << "=== after " << pass << " ===\n" << text << "\n";
  std::cout << fmt::format("graph {}: {} ops in, {} after fusion, {} groups ({} fused, {} not)\n", g.name, ops_in,
                           g.nodes.size(), g.groups.size(), fused, g.groups.size() - fused);
  std::cout << "passes: " << Join(passes, " -> ") << "\n";
  std::vector<std::string> shape_text;
  for (const auto& sym : g.Symbols()) {
    auto it = ctx.bindings.find(sym);
    shape_text.push_back(it == ctx.bindings.end() ? sym + " unbound" : fmt::format("{}={}", sym, it->second));
  }
  if (!shape_text.empty()) std::cout << "shapes: " << Join(shape_text, ", ") << "\n";
  if (!ctx.config.disabled.empty())
    std::cout << "disabled: " << Join({ctx.config.disabled.begin(), ctx.config.disabled.end()}, ", ") << "\n";
  if (!ctx.notes.empty()) {
    std::cout << "notes:\n";
    for (const auto& n : ctx.notes) std::cout << "  " << n.ToString() << "\n";
  }
  std::cout << "groups:\n";
  for (size_t i = 0; i < g.groups.size(); ++i) {
    const auto& grp = g.groups[i];
    const auto ops = fusion::GroupOpNames(g, grp.nodes);
    const auto vals = fusion::GroupValueNames(g, grp.nodes);
    std::cout << fmt::format("  [{}] {}  ops: {}  ({})\n", i, grp.kind, Join(ops, ", "), Join(vals, ", "));
    std::cout << fmt::format("      {}\n", grp.decision.ToString());
    if (grp.matmul && !grp.decision.fuse)  // declined: its ops one by one, each on its library kernel
      std::cout << fmt::format("      variant: {}  kernels: its ops one by one\n", VariantName(grp.variant));
    else if (grp.matmul && grp.matmul->gemv_max_rows == 0)
      std::cout << fmt::format("      variant: {}  kernels: its matmuls on cuBLASLt, its other ops on their library kernels\n",
                               VariantName(grp.variant));
    else if (grp.matmul)
      std::cout << fmt::format("      variant: {}  kernel: {} (one GEMV launch up to {} rows)\n", VariantName(grp.variant), grp.name,
                               grp.matmul->gemv_max_rows);
    else
      std::cout << fmt::format("      variant: {}  kernel: {}\n", grp.variant == Variant::kAuto ? "-" : VariantName(grp.variant), grp.name);
    if (ctx.profile && i < ctx.choices.size())
      std::cout << fmt::format("      source: {}  expected saved: {:.2f} us\n", scheduler::SourceName(ctx.choices[i].source),
                               ctx.choices[i].expected_us_saved);
  }
  SetExitCode(0);
  return 0;
}

}  // namespace

void RegisterExplain(CLI::App& app) {
  auto o = std::make_shared<ExplainOptions>();
  CLI::App* cmd = app.add_subcommand("explain", "Run the fusion passes on a graph and explain every grouping decision");
  cmd->add_option("FILE", o->file, "graph file (.ofg, grammar in docs/graph_format.md)")->required();
  cmd->add_flag("--json", o->json,
                "print one JSON document: {\"graph\", \"passes\", \"bindings\", \"groups\": [{\"ops\", \"values\", \"kind\", "
                "\"decision\", \"reason\", \"variant\", \"name\", \"source\", \"expected_us_saved\", \"evidence\"}], \"notes\", "
                "\"profile\" (with --profile)}");
  cmd->add_flag("--dump-after-each", o->dump_after_each,
                "print the graph (with its groups as comments) after every pass; with --json as \"dumps\"");
  cmd->add_option("--shape", o->shapes,
                  "bind a symbolic dim, SYM=VALUE (repeatable), so min_tensor_elements can judge sizes; "
                  "unbound, a group's size 'depends on T' and it stays fusable")
      ->allow_extra_args(false);
  cmd->add_option("--disable", o->disable,
                  "comma-separated kill switches, added to OPFUSE_DISABLE's: pattern names (swiglu, geglu, rms_norm, "
                  "add_rms_norm, layer_norm, softmax, rope) or passes (decompose, fuse_patterns, fuse_generic)")
      ->allow_extra_args(false);
  cmd->add_option("--profile", o->profile,
                  "profile database JSON (profile_result.json, format in docs/scheduler.md): decide each group from "
                  "measured times (interpolated in log(rows), 3% margin), else a cost model; bind --shape for rows");
  cmd->add_option("--device", o->device,
                  "target device name the profile must match, e.g. \"NVIDIA H200\" (default: the CUDA device here, if any)");
  cmd->add_option("--sm", o->sm, "target SM version for --device, e.g. 9.0 (default: the profile's)");
  cmd->add_flag("--no-fusion", o->no_fusion, "enable_fusion=false: every op runs alone (the never_fuse strategy)");
  cmd->footer(
      "Passes: verify -> infer_shapes -> decompose -> fuse_patterns -> fuse_generic -> schedule.\n"
      "Group kinds: pattern:<name> (a composite op, or a disabled pattern's ops), generic (an elementwise chain or\n"
      "elementwise -> last-axis reduction -> elementwise), single (one op). Every group says fuse or no, with the\n"
      "reason. Variant: library (fused library kernel, or a library op), jit (generated kernel), unfused (op by op).\n"
      "With --profile each group also shows source (config | profile | cost_model) and the expected us saved; a\n"
      "profile from another device is ignored with a warning (exit 0), a malformed one is exit 2.\n"
      "Environment: OPFUSE_DISABLE=name,... (same names as --disable).\n"
      "Exit 0 ok, 2 bad input (one-line reason on stderr, e.g. 'file.ofg: line 7: unknown op'), 1 internal failure.\n"
      "Example: opfuse explain examples/graphs/llama_decoder_layer.ofg --shape T=128 --json");
  cmd->callback([o] { ExplainMain(*o); });
}

}  // namespace opfuse::cli
