// From measured group cases to the profile database (see profile_build.h for the design).
#include "bench/profile_build.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "scheduler/should_fuse.h"

namespace opfuse::bench {

bool VariantApplies(const GroupCase& gc, const std::string& variant) {
  // a fuse_matmul group has no JIT form; its cuBLASLt form differs from its ops one by one only where
  // those run the GEMV (up to kDecodeGemvMaxRows rows)
  if (variant == "cublaslt") return gc.c.unfused_is_library_ops && gc.key.rows <= kDecodeGemvMaxRows;
  return !(gc.c.unfused_is_library_ops && variant == "jit");
}

std::optional<scheduler::ProfileEntry> ProfileEntryFor(const GroupCase& gc, const CaseResult& r,
                                                       std::vector<std::string>* warnings) {
  scheduler::ProfileEntry e;
  e.pattern = gc.key.pattern;
  e.dtype = gc.key.dtype;
  e.rows = gc.key.rows;
  e.cols = gc.key.cols;
  int64_t samples = -1;
  for (const auto& v : r.variants) {
    if (!VariantApplies(gc, v.name)) continue;
    if (!v.measured() || v.correct != true) {
      if (warnings) {
        const std::string why = !v.error.empty() ? v.error
                                : v.correct == false ? "wrong result: " + v.check_error
                                : !v.correct ? "not checked" + (v.check_error.empty() ? "" : ": " + v.check_error)
                                             : "not timed";
        warnings->push_back(fmt::format("{} {}: left out of the profile ({})", r.id, v.name, why));
      }
      continue;
    }
    if (v.name == "unfused") e.unfused_us = v.us;
    else if (v.name == "library") e.library_us = v.us;
    else if (v.name == "jit") e.jit_us = v.us;
    else if (v.name == "cublaslt") e.cublaslt_us = v.us;
    samples = samples < 0 ? v.samples : std::min<int64_t>(samples, v.samples);
  }
  if (!e.unfused_us && !e.library_us && !e.jit_us && !e.cublaslt_us) {
    if (warnings) warnings->push_back(fmt::format("{}: no variant measured correctly; no profile entry", r.id));
    return std::nullopt;
  }
  e.samples = std::max<int64_t>(samples, 0);
  return e;
}

scheduler::DeviceInfo ProfileDeviceFor(const BenchReport& r) {
  scheduler::DeviceInfo d;
  d.name = r.device.name;
  // "sm_90" -> "9.0" (the profile's format; explain compares it with major.minor of the device)
  std::string a = r.device.arch;
  if (a.rfind("sm_", 0) == 0 && a.size() >= 5) d.sm = fmt::format("{}.{}", a.substr(3, a.size() - 4), a.back());
  else d.sm = a;
  d.driver = r.device.driver;
  d.copy_gbps = Has(r.ceilings.copy_gbps) ? r.ceilings.copy_gbps : 0;
  d.launch_us = Has(r.ceilings.launch_us) ? r.ceilings.launch_us : 0;
  return d;
}

namespace {

const std::optional<double>& Get(const scheduler::ProfileEntry& e, const std::string& v) {
  static const std::optional<double> none;
  return v == "unfused" ? e.unfused_us : v == "library" ? e.library_us : v == "jit" ? e.jit_us
         : v == "cublaslt" ? e.cublaslt_us : none;
}

const scheduler::ProfileEntry* Find(const scheduler::ProfileDb& db, const GroupKey& k) {
  const scheduler::ProfileEntry* found = nullptr;
  for (const auto& e : db.entries)
    if (e.pattern == k.pattern && e.dtype == k.dtype && e.rows == k.rows && e.cols == k.cols) found = &e;
  return found;
}

}  // namespace

std::vector<GroupCase> RemainingCases(const std::vector<GroupCase>& all, const scheduler::ProfileDb& existing,
                                      const std::vector<std::string>& variants) {
  std::vector<GroupCase> out;
  for (const auto& gc : all) {
    const scheduler::ProfileEntry* e = Find(existing, gc.key);
    bool done = e != nullptr;
    for (const auto& v : variants) done = done && (!VariantApplies(gc, v) || Get(*e, v).has_value());
    if (!done) out.push_back(gc);
  }
  return out;
}

StatusOr<Validation> ValidateProfile(const Graph& model, const GroupCaseOptions& o, const std::vector<GroupCase>& cases,
                                     const scheduler::ProfileDb& db, double margin) {
  Validation val;
  std::map<std::string, Graph> fused;  // by dtype
  for (const auto& gc : cases) {
    const scheduler::ProfileEntry* e = Find(db, gc.key);
    if (!e) continue;  // not measured (yet)
    auto it = fused.find(gc.key.dtype);
    if (it == fused.end()) {
      auto dt = DTypeFromName(gc.key.dtype);
      if (!dt) return InvalidArgument(fmt::format("case {}: unknown dtype {}", gc.c.id, gc.key.dtype));
      OPFUSE_ASSIGN_OR_RETURN(Graph typed, RetypeGraph(model, *dt));
      OPFUSE_ASSIGN_OR_RETURN(Graph g, RunFusionPasses(typed, o.config));
      it = fused.emplace(gc.key.dtype, std::move(g)).first;
    }
    const Graph& g = it->second;
    if (gc.group_index < 0 || gc.group_index >= static_cast<int>(g.groups.size()))
      return Internal(fmt::format("case {}: group {} not in the fused graph", gc.c.id, gc.group_index));
    const FusionGroup& grp = g.groups[gc.group_index];
    const Bindings b = {{o.symbol, gc.symbol_value}};

    ValidationRow row;
    row.key = gc.key;
    row.group = gc.group_label;
    row.unfused_us = e->unfused_us;
    row.library_us = e->library_us;
    row.jit_us = e->jit_us;
    row.cublaslt_us = e->cublaslt_us;
    for (const char* v : {"unfused", "library", "jit", "cublaslt"}) {
      const auto& t = Get(*e, v);
      if (t && (row.best.empty() || *t < row.best_us)) row.best = v, row.best_us = *t;
    }
    if (row.best.empty()) continue;

    scheduler::ProfileDb loo = db;
    loo.entries.erase(std::remove_if(loo.entries.begin(), loo.entries.end(),
                                     [&](const scheduler::ProfileEntry& x) {
                                       return x.pattern == e->pattern && x.dtype == e->dtype && x.rows == e->rows &&
                                              x.cols == e->cols;
                                     }),
                      loo.entries.end());
    scheduler::ShouldFuseOptions in_opts, loo_opts;
    in_opts.profile = &db;
    loo_opts.profile = &loo;
    in_opts.margin = loo_opts.margin = margin;
    const auto in = scheduler::ShouldFuse(g, grp, b, o.config, in_opts);
    const auto out = scheduler::ShouldFuse(g, grp, b, o.config, loo_opts);
    // A fuse_matmul group declined runs its ops one by one on their library kernels: the profile's
    // "unfused" of that group (OpCase::unfused_is_library_ops); kept with gemv_max_rows 0, its
    // matmuls on cuBLASLt: the profile's "cublaslt".
    auto measured_as = [&](const scheduler::FusionChoice& ch) -> std::string {
      if (grp.matmul && !ch.decision.fuse) return "unfused";
      if (grp.matmul && ch.gemv_max_rows == 0) return "cublaslt";
      return scheduler::VariantName(ch.variant);
    };
    row.smart = measured_as(in);
    row.smart_loo = measured_as(out);
    row.source_loo = scheduler::SourceName(out.source);
    row.reason_loo = out.decision.ToString();
    row.smart_us = Get(*e, row.smart);
    row.smart_loo_us = Get(*e, row.smart_loo);
    row.ratio = row.smart_us ? *row.smart_us / row.best_us : 0;
    row.ratio_loo = row.smart_loo_us ? *row.smart_loo_us / row.best_us : 0;

    const std::optional<double> fused_best =
        e->library_us && e->jit_us ? std::optional<double>(std::min(*e->library_us, *e->jit_us))
                                   : e->library_us ? e->library_us : e->jit_us;
    if (e->cublaslt_us && fused_best && *e->cublaslt_us < *fused_best &&
        !(e->unfused_us && *e->unfused_us < *e->cublaslt_us))
      row.fusion_loses = fmt::format("its matmuls on cuBLASLt {:.2f} us beat the fused group ({:.2f} us)", *e->cublaslt_us,
                                     *fused_best);
    else if (e->unfused_us && fused_best && *e->unfused_us < *fused_best)
      row.fusion_loses = fmt::format("unfused {:.2f} us beats every fused variant ({:.2f} us)", *e->unfused_us, *fused_best);
    else if (e->library_us && e->jit_us && *e->jit_us > 1.10 * *e->library_us)
      row.fusion_loses = fmt::format("jit {:.2f} us is {:.0f}% slower than library {:.2f} us", *e->jit_us,
                                     100 * (*e->jit_us / *e->library_us - 1), *e->library_us);

    ++val.points;
    if (row.smart_us && row.ratio <= val.limit) ++val.within;
    if (row.smart_loo_us && row.ratio_loo <= val.limit) ++val.within_loo;
    val.worst_ratio = std::max(val.worst_ratio, row.smart_us ? row.ratio : INFINITY);
    val.worst_ratio_loo = std::max(val.worst_ratio_loo, row.smart_loo_us ? row.ratio_loo : INFINITY);
    val.rows.push_back(std::move(row));
  }
  return val;
}

namespace {
std::string Us(const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : "-"; }
}  // namespace

std::string ValidationMarkdown(const Validation& v) {
  std::string s = fmt::format(
      "smart vs the fastest measured variant at {} points: in-sample {}/{} within {:.2f}x (worst {:.3f}x); "
      "leave-one-out {}/{} within {:.2f}x (worst {:.3f}x)\n\n",
      v.points, v.within, v.points, v.limit, v.worst_ratio, v.within_loo, v.points, v.limit, v.worst_ratio_loo);
  s += "| group | dtype | rows | cols | unfused µs | library µs | jit µs | cublaslt µs | best | smart | smart (left out) | ratio | ratio (left out) | fusion loses |\n";
  s += "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|---|\n";
  for (const auto& r : v.rows)
    s += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {:.3f} | {:.3f} | {} |\n", r.key.pattern,
                     r.key.dtype, r.key.rows, r.key.cols, Us(r.unfused_us), Us(r.library_us), Us(r.jit_us),
                     Us(r.cublaslt_us), r.best,
                     r.smart, r.smart_loo, r.source_loo, r.ratio, r.ratio_loo, r.fusion_loses);
  return s;
}

nlohmann::json ValidationJson(const Validation& v) {
  auto opt = [](const std::optional<double>& x) { return x ? nlohmann::json(*x) : nlohmann::json(nullptr); };
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : v.rows)
    rows.push_back({{"pattern", r.key.pattern}, {"dtype", r.key.dtype}, {"rows", r.key.rows}, {"cols", r.key.cols},
                    {"group", r.group}, {"unfused_us", opt(r.unfused_us)}, {"library_us", opt(r.library_us)},
                    {"jit_us", opt(r.jit_us)}, {"cublaslt_us", opt(r.cublaslt_us)}, {"best", r.best}, {"best_us", r.best_us}, {"smart", r.smart},
                    {"smart_us", opt(r.smart_us)}, {"ratio", r.ratio}, {"smart_leave_one_out", r.smart_loo},
                    {"smart_leave_one_out_us", opt(r.smart_loo_us)}, {"ratio_leave_one_out", r.ratio_loo},
                    {"source_leave_one_out", r.source_loo}, {"reason_leave_one_out", r.reason_loo},
                    {"fusion_loses", r.fusion_loses}});
  auto num = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  return {{"limit", v.limit}, {"points", v.points}, {"within", v.within}, {"within_leave_one_out", v.within_loo},
          {"worst_ratio", num(v.worst_ratio)}, {"worst_ratio_leave_one_out", num(v.worst_ratio_loo)}, {"rows", rows}};
}

}  // namespace opfuse::bench
