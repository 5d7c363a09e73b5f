// BenchReport: derived metrics, JSON in and out, the metrics rows, the peer merge, the markdown
// summary and atomic file writing. (HTML: report_html.cc.)
#include "bench/report.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "util/files.h"
#include "util/quote.h"

namespace opfuse::bench {

namespace fs = std::filesystem;
using nlohmann::json;

const std::vector<std::string>& VariantNames() {
  static const std::vector<std::string> k = {"unfused", "library", "jit"};
  return k;
}

SampleStats SummarizeSamples(std::vector<double> us) {
  us.erase(std::remove_if(us.begin(), us.end(), [](double v) { return !std::isfinite(v); }), us.end());
  SampleStats s;
  s.samples = static_cast<int>(us.size());
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  const size_t n = us.size();
  s.min_us = us.front();
  s.median_us = n % 2 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
  const size_t rank = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n)));  // nearest rank, 1-based
  s.p90_us = us[std::clamp<size_t>(rank, 1, n) - 1];
  return s;
}

const VariantResult* CaseResult::Find(const std::string& variant) const {
  for (const auto& v : variants)
    if (v.name == variant) return &v;
  return nullptr;
}

CaseResult CaseResultFor(const OpCase& c) {
  CaseResult r;
  r.id = c.id;
  r.suite = c.suite;
  r.op = c.op;
  r.dtype = DTypeName(c.dtype);
  r.phase = c.phase;
  r.rows = c.rows;
  r.width = c.width;
  r.bytes = c.bytes;
  r.flops = c.flops;
  return r;
}

double Ceilings::GemmFor(const std::string& dtype) const {
  auto get = [&](const char* k) {
    auto it = gemm_tflops.find(k);
    return it == gemm_tflops.end() ? kNaN : it->second;
  };
  if (dtype == "f32") {
    const double a = get("f32"), b = get("tf32");
    if (Has(a) && Has(b)) return std::max(a, b);
    return Has(a) ? a : b;
  }
  return get(dtype.c_str());
}

void DeriveMetrics(BenchReport& r) {
  for (auto& c : r.cases) {
    c.best_variant.clear();
    c.best_us = c.eager_over_best = c.compile_over_best = c.compile_over_opfuse_one_process = c.best_of_copy_same = kNaN;
    if (c.peer && Has(c.peer->compile_us) && Has(c.peer->opfuse_us) && c.peer->opfuse_us > 0)
      c.compile_over_opfuse_one_process = c.peer->compile_us / c.peer->opfuse_us;
    const double gemm = r.ceilings.GemmFor(c.dtype);
    for (auto& v : c.variants) {
      v.gbps = v.tflops = v.mbu = v.mfu = v.speedup_vs_eager = v.speedup_vs_compile = kNaN;
      if (!v.measured() || v.us <= 0) continue;
      v.gbps = static_cast<double>(c.bytes) / v.us / 1e3;   // bytes/µs = MB/s
      v.tflops = static_cast<double>(c.flops) / v.us / 1e6;  // flops/µs = MFLOP/s
      if (Has(r.ceilings.copy_gbps) && r.ceilings.copy_gbps > 0) v.mbu = v.gbps / r.ceilings.copy_gbps;
      if (Has(gemm) && gemm > 0) v.mfu = v.tflops / gemm;
      if (c.peer && Has(c.peer->eager_us)) v.speedup_vs_eager = c.peer->eager_us / v.us;
      if (c.peer && Has(c.peer->compile_us)) v.speedup_vs_compile = c.peer->compile_us / v.us;
      // The best variant: fastest among those measured and not known to be wrong.
      if (v.correct.value_or(true) && (!Has(c.best_us) || v.us < c.best_us)) {
        c.best_us = v.us;
        c.best_variant = v.name;
      }
    }
    if (Has(c.best_us) && c.best_us > 0 && Has(c.copy_same_us)) c.best_of_copy_same = c.copy_same_us / c.best_us;
    if (Has(c.best_us) && c.peer) {
      if (Has(c.peer->eager_us)) c.eager_over_best = c.peer->eager_us / c.best_us;
      if (Has(c.peer->compile_us)) c.compile_over_best = c.peer->compile_us / c.best_us;
    }
  }
}

// ------------------------------------------------------------------ JSON out

namespace {

json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
json Str(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json VariantToJson(const VariantResult& v) {
  json j = {{"us", Num(v.us)},
            {"us_min", Num(v.us_min)},
            {"us_p90", Num(v.us_p90)},
            {"samples", v.samples},
            {"method", Str(v.method)},
            {"gbps", Num(v.gbps)},
            {"tflops", Num(v.tflops)},
            {"mbu", Num(v.mbu)},
            {"mfu", Num(v.mfu)},
            {"host_us", Num(v.host_us)},
            {"correct", v.correct ? json(*v.correct) : json(nullptr)},
            {"rel_err", Num(v.rel_err)},
            {"check_error", Str(v.check_error)},
            {"kernels_per_run", v.kernels_per_run},
            {"pdl_launches", v.pdl_launches},
            {"kernels", v.kernels},
            {"compile_ms", Num(v.compile_ms)},
            {"error", Str(v.error)},
            {"same_as", Str(v.same_as)},
            {"note", Str(v.note)},
            {"speedup_vs_eager", Num(v.speedup_vs_eager)},
            {"speedup_vs_compile", Num(v.speedup_vs_compile)}};
  return j;
}

json PeerToJson(const PeerResult& p) {
  return {{"eager_us", Num(p.eager_us)},           {"compile_us", Num(p.compile_us)},
          {"eager_host_us", Num(p.eager_host_us)}, {"compile_host_us", Num(p.compile_host_us)},
          {"eager_error", Str(p.eager_error)},     {"compile_error", Str(p.compile_error)},
          {"impl", Str(p.impl)},                   {"flags", p.flags},
          {"opfuse_us", Num(p.opfuse_us)},         {"opfuse_variant", Str(p.opfuse_variant)}};
}

}  // namespace

json ReportToJson(const BenchReport& r) {
  json cases = json::array();
  for (const auto& c : r.cases) {
    json vars = json::object();
    for (const auto& v : c.variants) vars[v.name] = VariantToJson(v);
    json jc = {{"id", c.id},       {"suite", c.suite}, {"op", c.op},       {"dtype", c.dtype},
               {"phase", c.phase}, {"rows", c.rows},   {"width", c.width}, {"bytes", c.bytes},
               {"flops", c.flops}, {"check", Str(c.check)}, {"variants", vars}};
    jc["copy_same_us"] = Num(c.copy_same_us);
    jc["copy_same_method"] = Str(c.copy_same_method);
    jc["peer"] = c.peer ? PeerToJson(*c.peer) : json(nullptr);
    jc["ratios"] = {{"best_variant", Str(c.best_variant)},
                    {"best_us", Num(c.best_us)},
                    {"eager_over_opfuse", Num(c.eager_over_best)},
                    {"compile_over_opfuse", Num(c.compile_over_best)},
                    {"compile_over_opfuse_one_process", Num(c.compile_over_opfuse_one_process)},
                    {"best_of_same_size_copy", Num(c.best_of_copy_same)}};
    cases.push_back(std::move(jc));
  }
  json skipped = json::array();
  for (const auto& s : r.skipped) skipped.push_back({{"id", s.id}, {"reason", s.reason}});
  json gemm = json::object();
  for (const auto& [k, v] : r.ceilings.gemm_tflops) gemm[k] = Num(v);
  json j = {{"schema", r.schema},
            {"tool", r.tool},
            {"synthetic", r.synthetic},
            {"complete", r.complete},
            {"aborted", Str(r.aborted)},
            {"device",
             {{"name", r.device.name},
              {"arch", r.device.arch},
              {"sm_count", r.device.sm_count},
              {"l2_bytes", r.device.l2_bytes},
              {"memory_bytes", r.device.memory_bytes},
              {"driver", r.device.driver},
              {"runtime", r.device.runtime}}},
            {"command", r.command},
            {"date", r.date},
            {"dtype", r.dtype},
            {"timing", r.timing},
            {"ceilings",
             {{"copy_gbps", Num(r.ceilings.copy_gbps)},
              {"copy_kernel_gbps", Num(r.ceilings.copy_kernel_gbps)},
              {"memcpy_gbps", Num(r.ceilings.memcpy_gbps)},
              {"launch_us", Num(r.ceilings.launch_us)},
              {"event_floor_us", Num(r.ceilings.event_floor_us)},
              {"copy_bytes", r.ceilings.copy_bytes},
              {"gemm_tflops", gemm},
              {"gemm_shape", {r.ceilings.gemm_m, r.ceilings.gemm_n, r.ceilings.gemm_k}}}},
            {"skipped", skipped},
            {"cases", cases}};
  if (r.peer) {
    j["peer"] = {{"device", r.peer->device}, {"driver", r.peer->driver}, {"torch", r.peer->torch},
                 {"cuda", r.peer->cuda},     {"method", r.peer->method}, {"matched", r.peer->matched},
                 {"unmatched", r.peer->unmatched}};
  } else {
    j["peer"] = nullptr;
  }
  return j;
}

// ------------------------------------------------------------------ JSON in

namespace {

// Reads fields with one error path; the first problem wins and names the field.
class Reader {
 public:
  explicit Reader(std::string where) : where_(std::move(where)) {}
  const Status& status() const { return st_; }
  bool ok() const { return st_.ok(); }
  void Fail(const std::string& path, const std::string& what) {
    if (st_.ok()) st_ = InvalidArgument(fmt::format("{}: {}: {}", where_, path, what));
  }
  const json* Field(const json& o, const std::string& path, const char* key, bool required) {
    if (!o.is_object()) {
      Fail(path, "expected an object");
      return nullptr;
    }
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) {
      if (required) Fail(path + "." + PathKey(key), "missing");
      return nullptr;
    }
    return &*it;
  }
  double Number(const json& o, const std::string& path, const char* key, bool required = false) {
    const json* f = Field(o, path, key, required);
    if (!f) return kNaN;
    if (!f->is_number()) {
      Fail(path + "." + PathKey(key), fmt::format("expected a number, got {}", f->dump()));
      return kNaN;
    }
    return f->get<double>();
  }
  int64_t Int(const json& o, const std::string& path, const char* key, bool required = false) {
    const json* f = Field(o, path, key, required);
    if (!f) return 0;
    if (!f->is_number_integer()) {
      Fail(path + "." + PathKey(key), fmt::format("expected an integer, got {}", f->dump()));
      return 0;
    }
    return f->get<int64_t>();
  }
  std::string String(const json& o, const std::string& path, const char* key, bool required = false) {
    const json* f = Field(o, path, key, required);
    if (!f) return "";
    if (!f->is_string()) {
      Fail(path + "." + PathKey(key), fmt::format("expected a string, got {}", f->dump()));
      return "";
    }
    return f->get<std::string>();
  }
  std::vector<std::string> Strings(const json& o, const std::string& path, const char* key) {
    std::vector<std::string> out;
    const json* f = Field(o, path, key, false);
    if (!f) return out;
    if (!f->is_array()) {
      Fail(path + "." + PathKey(key), "expected an array of strings");
      return out;
    }
    for (const auto& e : *f) {
      if (!e.is_string()) {
        Fail(path + "." + PathKey(key), fmt::format("expected strings, got {}", e.dump()));
        return out;
      }
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  bool Bool(const json& o, const std::string& path, const char* key, bool def) {
    const json* f = Field(o, path, key, false);
    if (!f) return def;
    if (!f->is_boolean()) {
      Fail(path + "." + PathKey(key), fmt::format("expected true or false, got {}", f->dump()));
      return def;
    }
    return f->get<bool>();
  }

 private:
  std::string where_;
  Status st_;
};

}  // namespace

StatusOr<BenchReport> ReportFromJson(const json& j) {
  Reader rd("bench_report.json");
  BenchReport r;
  if (!j.is_object()) return InvalidArgument("bench_report.json: expected a JSON object");
  r.schema = static_cast<int>(rd.Int(j, "$", "schema", true));
  if (rd.ok() && r.schema != 1) return InvalidArgument(fmt::format("bench_report.json: schema {} (this opfuse reads 1)", r.schema));
  r.tool = rd.String(j, "$", "tool");
  r.synthetic = rd.Bool(j, "$", "synthetic", false);
  r.complete = rd.Bool(j, "$", "complete", true);
  r.aborted = rd.String(j, "$", "aborted");
  r.command = rd.String(j, "$", "command");
  r.date = rd.String(j, "$", "date");
  r.dtype = rd.String(j, "$", "dtype");
  if (const json* t = rd.Field(j, "$", "timing", false)) r.timing = *t;
  if (const json* d = rd.Field(j, "$", "device", true)) {
    r.device.name = rd.String(*d, "device", "name", true);
    r.device.arch = rd.String(*d, "device", "arch");
    r.device.sm_count = static_cast<int>(rd.Int(*d, "device", "sm_count"));
    r.device.l2_bytes = rd.Int(*d, "device", "l2_bytes");
    r.device.memory_bytes = rd.Int(*d, "device", "memory_bytes");
    r.device.driver = rd.String(*d, "device", "driver");
    r.device.runtime = rd.String(*d, "device", "runtime");
  }
  if (const json* c = rd.Field(j, "$", "ceilings", true)) {
    r.ceilings.copy_gbps = rd.Number(*c, "ceilings", "copy_gbps");
    r.ceilings.copy_kernel_gbps = rd.Number(*c, "ceilings", "copy_kernel_gbps");
    r.ceilings.memcpy_gbps = rd.Number(*c, "ceilings", "memcpy_gbps");
    r.ceilings.launch_us = rd.Number(*c, "ceilings", "launch_us");
    r.ceilings.event_floor_us = rd.Number(*c, "ceilings", "event_floor_us");  // absent in older reports: NaN
    r.ceilings.copy_bytes = rd.Int(*c, "ceilings", "copy_bytes");
    if (const json* g = rd.Field(*c, "ceilings", "gemm_tflops", false)) {
      if (!g->is_object()) rd.Fail("ceilings.gemm_tflops", "expected an object");
      else
        for (auto it = g->begin(); it != g->end(); ++it) r.ceilings.gemm_tflops[it.key()] = rd.Number(*g, "ceilings.gemm_tflops", it.key().c_str());
    }
    if (const json* s = rd.Field(*c, "ceilings", "gemm_shape", false)) {
      if (!s->is_array() || s->size() != 3 || !(*s)[0].is_number_integer() || !(*s)[1].is_number_integer() ||
          !(*s)[2].is_number_integer())
        rd.Fail("ceilings.gemm_shape", "expected [m, n, k]");
      else {
        r.ceilings.gemm_m = (*s)[0].get<int64_t>();
        r.ceilings.gemm_n = (*s)[1].get<int64_t>();
        r.ceilings.gemm_k = (*s)[2].get<int64_t>();
      }
    }
  }
  if (const json* p = rd.Field(j, "$", "peer", false)) {
    PeerInfo pi;
    pi.device = rd.String(*p, "peer", "device");
    pi.driver = rd.String(*p, "peer", "driver");
    pi.torch = rd.String(*p, "peer", "torch");
    pi.cuda = rd.String(*p, "peer", "cuda");
    pi.method = rd.String(*p, "peer", "method");
    pi.matched = static_cast<int>(rd.Int(*p, "peer", "matched"));
    if (const json* u = rd.Field(*p, "peer", "unmatched", false)) {
      if (!u->is_array()) rd.Fail("peer.unmatched", "expected an array");
      else
        for (const auto& s : *u)
          if (s.is_string()) pi.unmatched.push_back(s.get<std::string>());
    }
    r.peer = pi;
  }
  if (const json* s = rd.Field(j, "$", "skipped", false)) {
    if (!s->is_array()) rd.Fail("skipped", "expected an array");
    else
      for (size_t i = 0; i < s->size(); ++i) {
        const std::string path = fmt::format("skipped[{}]", i);
        r.skipped.push_back({rd.String((*s)[i], path, "id", true), rd.String((*s)[i], path, "reason")});
      }
  }
  const json* cases = rd.Field(j, "$", "cases", true);
  if (cases && !cases->is_array()) rd.Fail("cases", "expected an array");
  if (!rd.ok()) return rd.status();
  std::set<std::string> ids;
  for (size_t i = 0; i < cases->size(); ++i) {
    const json& jc = (*cases)[i];
    const std::string path = fmt::format("cases[{}]", i);
    CaseResult c;
    c.id = rd.String(jc, path, "id", true);
    c.suite = rd.String(jc, path, "suite", true);
    c.op = rd.String(jc, path, "op", true);
    c.dtype = rd.String(jc, path, "dtype", true);
    c.phase = rd.String(jc, path, "phase", true);
    c.rows = rd.Int(jc, path, "rows", true);
    c.width = rd.Int(jc, path, "width", true);
    c.bytes = rd.Int(jc, path, "bytes", true);
    c.flops = rd.Int(jc, path, "flops", true);
    c.check = rd.String(jc, path, "check");
    c.copy_same_us = rd.Number(jc, path, "copy_same_us");
    c.copy_same_method = rd.String(jc, path, "copy_same_method");
    if (!rd.ok()) return rd.status();
    if (!ids.insert(c.id).second) return InvalidArgument(fmt::format("bench_report.json: {}: duplicate case id {}", path, Quote(c.id)));
    if (const json* vars = rd.Field(jc, path, "variants", true)) {
      if (!vars->is_object()) rd.Fail(path + ".variants", "expected an object");
      else
        for (auto it = vars->begin(); it != vars->end(); ++it) {
          const std::string vp = path + ".variants." + PathKey(it.key());
          const json& jv = it.value();
          VariantResult v;
          v.name = it.key();
          v.us = rd.Number(jv, vp, "us");
          v.us_min = rd.Number(jv, vp, "us_min");
          v.us_p90 = rd.Number(jv, vp, "us_p90");
          v.samples = static_cast<int>(rd.Int(jv, vp, "samples"));
          v.method = rd.String(jv, vp, "method");
          v.host_us = rd.Number(jv, vp, "host_us");
          if (const json* ok = rd.Field(jv, vp, "correct", false)) {
            if (!ok->is_boolean()) rd.Fail(vp + ".correct", "expected true, false or null");
            else v.correct = ok->get<bool>();
          }
          v.rel_err = rd.Number(jv, vp, "rel_err");
          v.check_error = rd.String(jv, vp, "check_error");
          v.kernels_per_run = static_cast<int>(rd.Int(jv, vp, "kernels_per_run"));
          v.pdl_launches = static_cast<int>(rd.Int(jv, vp, "pdl_launches"));  // absent in older reports: 0
          if (const json* ks = rd.Field(jv, vp, "kernels", false)) {
            if (!ks->is_array()) rd.Fail(vp + ".kernels", "expected an array");
            else
              for (const auto& k : *ks)
                if (k.is_string()) v.kernels.push_back(k.get<std::string>());
          }
          v.compile_ms = rd.Number(jv, vp, "compile_ms");
          v.error = rd.String(jv, vp, "error");
          v.same_as = rd.String(jv, vp, "same_as");
          v.note = rd.String(jv, vp, "note");
          c.variants.push_back(std::move(v));
        }
    }
    if (const json* p = rd.Field(jc, path, "peer", false)) {
      PeerResult pr;
      pr.eager_us = rd.Number(*p, path + ".peer", "eager_us");
      pr.compile_us = rd.Number(*p, path + ".peer", "compile_us");
      pr.eager_host_us = rd.Number(*p, path + ".peer", "eager_host_us");
      pr.compile_host_us = rd.Number(*p, path + ".peer", "compile_host_us");
      pr.eager_error = rd.String(*p, path + ".peer", "eager_error");
      pr.compile_error = rd.String(*p, path + ".peer", "compile_error");
      pr.impl = rd.String(*p, path + ".peer", "impl");
      pr.flags = rd.Strings(*p, path + ".peer", "flags");
      pr.opfuse_us = rd.Number(*p, path + ".peer", "opfuse_us");
      pr.opfuse_variant = rd.String(*p, path + ".peer", "opfuse_variant");
      c.peer = pr;
    }
    if (!rd.ok()) return rd.status();
    // Keep the canonical variant order whatever order the object had.
    std::stable_sort(c.variants.begin(), c.variants.end(), [](const VariantResult& a, const VariantResult& b) {
      auto rank = [](const std::string& n) {
        auto it = std::find(VariantNames().begin(), VariantNames().end(), n);
        return static_cast<int>(it - VariantNames().begin());
      };
      return rank(a.name) < rank(b.name);
    });
    r.cases.push_back(std::move(c));
  }
  DeriveMetrics(r);
  return r;
}

// ------------------------------------------------------------------ metrics rows

json MetricsToJson(const BenchReport& r) {
  json rows = json::array();
  for (const auto& c : r.cases) {
    auto row = [&](const std::string& variant, double us, std::optional<bool> correct, const std::string& error) {
      json o = {{"id", c.id},       {"variant", variant}, {"op", c.op},       {"suite", c.suite},
                {"phase", c.phase}, {"dtype", c.dtype},   {"rows", c.rows},   {"width", c.width},
                {"bytes", c.bytes}, {"flops", c.flops},   {"time_us", Num(us)}};
      const bool ok = std::isfinite(us) && us > 0;
      const double gbps = ok ? static_cast<double>(c.bytes) / us / 1e3 : kNaN;
      const double tflops = ok ? static_cast<double>(c.flops) / us / 1e6 : kNaN;
      const double gemm = r.ceilings.GemmFor(c.dtype);
      o["gbps"] = Num(gbps);
      o["tflops"] = Num(tflops);
      o["mbu"] = Num(Has(r.ceilings.copy_gbps) ? gbps / r.ceilings.copy_gbps : kNaN);
      o["mfu"] = Num(Has(gemm) ? tflops / gemm : kNaN);
      o["correct"] = correct ? json(*correct) : json(nullptr);
      o["error"] = Str(error);
      rows.push_back(std::move(o));
    };
    for (const auto& v : c.variants) row(v.name, v.measured() ? v.us : kNaN, v.correct, v.error);
    if (c.peer) {
      row("torch_eager", c.peer->eager_us, std::nullopt, c.peer->eager_error);
      row("torch_compile", c.peer->compile_us, std::nullopt, c.peer->compile_error);
    }
  }
  json gemm = json::object();
  for (const auto& [k, v] : r.ceilings.gemm_tflops) gemm[k] = Num(v);
  return {{"schema", 1},
          {"device", r.device.name},
          {"date", r.date},
          {"synthetic", r.synthetic},
          {"ceilings", {{"copy_gbps", Num(r.ceilings.copy_gbps)}, {"gemm_tflops", gemm}}},
          {"rows", rows}};
}

// ------------------------------------------------------------------ peer merge

Status MergePeer(BenchReport& r, const json& peer, bool allow_device_mismatch, std::vector<std::string>* warnings) {
  Reader rd("peer.json");
  if (!peer.is_object()) return InvalidArgument("peer.json: expected a JSON object");
  const int64_t schema = rd.Int(peer, "$", "schema", true);
  if (!rd.ok()) return rd.status();
  if (schema != 1) return InvalidArgument(fmt::format("peer.json: schema {} (this opfuse reads 1)", schema));
  PeerInfo info;
  info.device = rd.String(peer, "$", "device", true);
  info.driver = rd.String(peer, "$", "driver");
  info.torch = rd.String(peer, "$", "torch");
  info.cuda = rd.String(peer, "$", "cuda");
  info.method = rd.String(peer, "$", "method");
  const json* results = rd.Field(peer, "$", "results", true);
  if (results && !results->is_array()) rd.Fail("results", "expected an array");
  if (!rd.ok()) return rd.status();
  if (!allow_device_mismatch && !r.device.name.empty() && info.device != r.device.name)
    return InvalidArgument(fmt::format(
        "peer.json was measured on {} but the report on {}; ratios across devices mean nothing "
        "(pass --allow-device-mismatch to merge anyway)",
        Quote(info.device), Quote(r.device.name)));
  std::map<std::string, PeerResult> by_id;
  for (size_t i = 0; i < results->size(); ++i) {
    const json& e = (*results)[i];
    const std::string path = fmt::format("results[{}]", i);
    const std::string id = rd.String(e, path, "id", true);
    PeerResult p;
    p.eager_us = rd.Number(e, path, "eager_us");
    p.compile_us = rd.Number(e, path, "compile_us");
    p.eager_host_us = rd.Number(e, path, "eager_host_us");
    p.compile_host_us = rd.Number(e, path, "compile_host_us");
    p.eager_error = rd.String(e, path, "eager_error");
    p.compile_error = rd.String(e, path, "compile_error");
    p.impl = rd.String(e, path, "impl");
    std::vector<double> times = {p.eager_us, p.compile_us, p.eager_host_us, p.compile_host_us};
    // --opfuse-lib: opfuse_<variant>_us for each variant timed in the peer's process; the fastest.
    for (const char* v : {"library", "jit", "auto", "unfused"}) {
      const double us = rd.Number(e, path, fmt::format("opfuse_{}_us", v).c_str());
      times.push_back(us);
      if (Has(us) && us > 0 && (!Has(p.opfuse_us) || us < p.opfuse_us)) {
        p.opfuse_us = us;
        p.opfuse_variant = v;
      }
    }
    // The peer's flags: strings, or objects (shown as their JSON) — kept either way.
    if (const json* fl = rd.Field(e, path, "flags", false)) {
      if (!fl->is_array()) rd.Fail(path + ".flags", "expected an array");
      else
        for (const auto& x : *fl) p.flags.push_back(x.is_string() ? x.get<std::string>() : x.dump());
    }
    if (!rd.ok()) return rd.status();
    for (double v : times)
      if (Has(v) && v <= 0) return InvalidArgument(fmt::format("peer.json: {} ({}): times must be positive", path, Quote(id)));
    if (!by_id.emplace(id, p).second) return InvalidArgument(fmt::format("peer.json: {}: duplicate id {}", path, Quote(id)));
  }
  for (auto& c : r.cases) {
    auto it = by_id.find(c.id);
    if (it == by_id.end()) continue;
    c.peer = it->second;
    ++info.matched;
    by_id.erase(it);
  }
  for (const auto& [id, p] : by_id) info.unmatched.push_back(id);
  if (warnings) {
    if (!info.unmatched.empty())
      warnings->push_back(fmt::format("{} peer result(s) name no case of the report (first: {})", info.unmatched.size(),
                                      Quote(info.unmatched.front())));
    if (info.device != r.device.name)
      warnings->push_back(fmt::format("peer device {} differs from the report's {}", Quote(info.device), Quote(r.device.name)));
  }
  r.peer = info;
  DeriveMetrics(r);
  return Status::Ok();
}

// ------------------------------------------------------------------ markdown

namespace {

std::string Us(double v) {
  if (!Has(v)) return "—";
  return v < 10 ? fmt::format("{:.2f}", v) : v < 1000 ? fmt::format("{:.1f}", v) : fmt::format("{:.0f}", v);
}
std::string Pct(double v) { return Has(v) ? fmt::format("{:.0f}%", 100 * v) : "—"; }

}  // namespace

std::string MarkdownSummary(const BenchReport& r) {
  std::string out = fmt::format("opfuse bench ops — {}{} — {} cases; copy {:.0f} GB/s, GEMM {} {:.0f} TFLOP/s{}\n\n",
                                r.device.name, r.synthetic ? " (SYNTHETIC)" : "", r.cases.size(), r.ceilings.copy_gbps,
                                r.dtype, r.ceilings.GemmFor(r.dtype),
                                Has(r.ceilings.event_floor_us)
                                    ? fmt::format("; event floor {:.2f} µs", r.ceilings.event_floor_us)
                                    : "");
  const bool peer = r.peer.has_value();
  // One-process columns when the peer also timed opfuse (tools/bench_peer.py --opfuse-lib).
  const bool one = peer && std::any_of(r.cases.begin(), r.cases.end(), [](const CaseResult& c) {
    return c.peer && Has(c.peer->opfuse_us);
  });
  // The same-size copy column when the run measured it (bench ops' default).
  const bool same = std::any_of(r.cases.begin(), r.cases.end(), [](const CaseResult& c) { return Has(c.copy_same_us); });
  out += "| case | unfused µs | library µs | jit µs | best | MBU | MFU |";
  out += same ? " of same-size copy |" : "";
  out += peer ? " eager µs | compile µs | vs compile |" : "";
  out += one ? " opfuse µs, peer's process | vs compile, one process |\n" : "\n";
  out += "|---|---:|---:|---:|---|---:|---:|";
  out += same ? "---:|" : "";
  out += peer ? "---:|---:|---:|" : "";
  out += one ? "---:|---:|\n" : "\n";
  int wrong = 0, errors = 0;
  for (const auto& c : r.cases) {
    out += "| " + c.id + " |";
    for (const auto& name : VariantNames()) {
      const VariantResult* v = c.Find(name);
      if (!v) out += " |";
      else if (!v->error.empty()) {
        out += " error |";
        ++errors;
      } else {
        std::string cell = Us(v->us);
        if (v->correct && !*v->correct) {
          cell += " ✗";
          ++wrong;
        }
        if (!v->same_as.empty()) cell += " (=" + v->same_as + ")";
        out += " " + cell + " |";
      }
    }
    const VariantResult* b = c.best_variant.empty() ? nullptr : c.Find(c.best_variant);
    out += fmt::format(" {} | {} | {} |", c.best_variant.empty() ? "—" : c.best_variant, Pct(b ? b->mbu : kNaN),
                       Pct(b ? b->mfu : kNaN));
    if (same) out += fmt::format(" {} |", Pct(c.best_of_copy_same));
    if (peer) {
      const PeerResult p = c.peer.value_or(PeerResult{});
      const std::string warn = p.flags.empty() ? "" : " ⚠";
      out += fmt::format(" {}{} | {}{} |", Us(p.eager_us), warn, Us(p.compile_us), warn);
      out += fmt::format(" {} |",
                         Has(c.compile_over_best) ? fmt::format("{:.2f}×", c.compile_over_best) : "—");
    }
    if (one) {
      const PeerResult p = c.peer.value_or(PeerResult{});
      out += fmt::format(" {}{} | {} |", Us(p.opfuse_us), p.opfuse_variant.empty() ? "" : " (" + p.opfuse_variant + ")",
                         Has(c.compile_over_opfuse_one_process)
                             ? fmt::format("{:.2f}×", c.compile_over_opfuse_one_process)
                             : "—");
    }
    out += "\n";
  }
  out += fmt::format("\n{} variant(s) incorrect (✗), {} failed to run.{}\n", wrong, errors,
                     r.complete ? "" : " INCOMPLETE: " + r.aborted);
  return out;
}

// ------------------------------------------------------------------ files

StatusOr<json> ReadJsonFile(const std::string& path) {
  OPFUSE_ASSIGN_OR_RETURN(std::string text, ReadFileCapped(path, kMaxJsonFileBytes));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(fmt::format("{}: not valid JSON", path));
  return j;
}

Status WriteFilesAtomic(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InvalidArgument(fmt::format("{}: cannot create directory: {}", dir, ec.message()));
  std::vector<std::pair<fs::path, fs::path>> moves;
  auto cleanup = [&] {
    for (const auto& [tmp, dst] : moves) fs::remove(tmp, ec);
  };
  for (const auto& [name, data] : files) {
    const fs::path dst = fs::path(dir) / name;
    fs::path tmp = dst;
    tmp += fmt::format(".tmp{}", ::getpid());
    moves.push_back({tmp, dst});
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f || !(f << data) || !f.flush()) {
      cleanup();
      return InvalidArgument(fmt::format("cannot write {}", tmp.string()));
    }
  }
  for (const auto& [tmp, dst] : moves) {
    fs::rename(tmp, dst, ec);
    if (ec) {
      cleanup();
      return InvalidArgument(fmt::format("cannot write {}: {}", dst.string(), ec.message()));
    }
  }
  return Status::Ok();
}

Status WriteReport(BenchReport r, const std::string& dir) {
  DeriveMetrics(r);
  return WriteFilesAtomic(dir, {{"bench_report.json", ReportToJson(r).dump(1) + "\n"},
                                {"bench_metrics.json", MetricsToJson(r).dump(1) + "\n"},
                                {"report.html", RenderHtml(r)}});
}

std::string UtcNow() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace opfuse::bench
