// `opfuse eval` host side: problems from .ofg files, baseline_time.json, the summary, and the
// CPU backend (see eval.h for the design).
#include "bench/eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "bench/fill_values.h"
#include "bench/group_cases.h"
#include "bench/harness.h"
#include "opfuse/config.h"
#include "runtime/cpu/cpu_executor.h"
#include "util/files.h"

namespace opfuse::bench {
namespace fs = std::filesystem;

namespace {

std::vector<int64_t> StaticShape(const Shape& s) {
  std::vector<int64_t> out;
  for (const auto& d : s) out.push_back(d.value);
  return out;
}

// The case of a verified static graph; `leading` names the row-leading inputs (decided once on
// the full problem, so a remade case with other rows keeps them).
StatusOr<OpCase> BuildCase(const Graph& g, const std::string& name, const std::set<std::string>& leading_in,
                           int64_t rows, const std::string& text) {
  OpCase c;
  c.id = "eval/" + name;
  c.suite = "eval";
  c.rows = rows;
  c.phase = PhaseOf(rows);
  c.rows_independent = true;
  // The op that names the error bound: matmul/attention (TF32 on f32), else the problem family.
  std::string family = name;
  for (const char* dt : {"_f32", "_bf16", "_f16"})
    if (auto p = family.find(dt); p != std::string::npos) family = family.substr(0, p);
  c.op = family;
  const auto users = g.Users();
  for (const auto& n : g.nodes) {
    if (n.op == OpKind::kMatmul && c.op != "attention") c.op = "matmul";
    if (n.op == OpKind::kAttention || n.op == OpKind::kKvAttention) c.op = "attention", c.rows_independent = false;
    if (n.op == OpKind::kSoftmax && AttrInt(n.attrs, "causal", 0)) c.rows_independent = false;
  }
  bool have_dtype = false;
  for (int vid : g.inputs) {
    const Value& v = g.values[vid];
    TensorSpec t;
    t.name = v.name;
    t.dtype = v.type.dtype;
    t.shape = StaticShape(v.type.shape);
    t.rows_leading = leading_in.count(v.name) > 0;
    for (int u : users[vid]) {
      const Node& n = g.nodes[u];
      if (NeedsPositive(n.op)) t.fill = Fill::kPositive;
      if (n.op == OpKind::kEmbedding && n.inputs.size() == 2 && n.inputs[1] == vid) {
        t.fill = Fill::kIds;
        const auto& table = g.values[n.inputs[0]].type.shape;
        t.id_range = table.empty() ? 0 : table[0].value;
      }
      if (n.op == OpKind::kEmbedding && n.inputs[0] == vid) t.rotate = false;  // the table: one shared copy
    }
    if (IsInt(t.dtype) && t.fill != Fill::kIds)
      return InvalidArgument(fmt::format("problem '{}': integer input '{}' is not embedding ids (the harness cannot fill it)",
                                         name, v.name));
    if (IsFloat(t.dtype) && !have_dtype) c.dtype = t.dtype, have_dtype = true;
    c.bytes += t.nbytes();
    c.inputs.push_back(std::move(t));
  }
  for (int vid : g.outputs) {
    const Value& v = g.values[vid];
    TensorSpec t;
    t.name = v.name;
    t.dtype = v.type.dtype;
    t.shape = StaticShape(v.type.shape);
    t.rows_leading = !t.shape.empty() && t.shape[0] == rows;
    if (!t.rows_leading && rows > kMaxCheckAllRows)
      return InvalidArgument(fmt::format("problem '{}': output '{}' does not lead with the {} rows of the first output, so "
                                         "its rows cannot be sampled for the check", name, v.name, rows));
    c.bytes += t.nbytes();
    c.outputs.push_back(std::move(t));
  }
  c.width = c.outputs.front().shape.empty() ? 1 : c.outputs.front().shape.back();
  c.graph = text.empty() ? PrintGraph(g, false) : text;
  c.attrs = {{"problem", name}};
  return c;
}

// `g` with dim 0 of the row-leading inputs set to `rows`, types re-inferred.
StatusOr<Graph> WithRows(const Graph& full, const std::set<std::string>& leading_in, int64_t rows) {
  Graph g = full;
  for (int vid : g.inputs)
    if (leading_in.count(g.values[vid].name)) g.values[vid].type.shape[0] = Dim(rows);
  for (auto& v : g.values)
    if (v.kind == ValueKind::kNode) v.declared = false;
  g.groups.clear();
  OPFUSE_RETURN_IF_ERROR(VerifyAndInfer(g));
  return g;
}

}  // namespace

StatusOr<EvalProblem> ProblemFromText(const std::string& name, const std::string& text, const std::string& path) {
  static const std::regex kName("[a-z0-9_]+");
  if (!std::regex_match(name, kName))
    return InvalidArgument(fmt::format("problem file '{}': the name must be lower-case letters, digits and '_'", path));
  auto parsed = ParseGraph(text);
  if (!parsed.ok()) return InvalidArgument(fmt::format("problem '{}' ({}): {}", name, path, parsed.status().message()));
  Graph g = std::move(*parsed);
  for (const auto& v : g.values)
    for (const auto& d : v.type.shape)
      if (!d.is_static())
        return InvalidArgument(fmt::format("problem '{}': value '{}' has symbolic dim '{}' (problems have static shapes)",
                                           name, v.name, d.sym));
  if (g.outputs.empty()) return InvalidArgument(fmt::format("problem '{}' has no output", name));
  const auto& first = g.values[g.outputs[0]].type.shape;
  if (first.empty()) return InvalidArgument(fmt::format("problem '{}': the first output is a scalar (no rows)", name));
  const int64_t rows = first[0].value;
  std::set<std::string> leading;
  for (int vid : g.inputs) {
    const Value& v = g.values[vid];
    if (v.kind == ValueKind::kInput && !v.type.shape.empty() && v.type.shape[0].value == rows) leading.insert(v.name);
  }
  EvalProblem p;
  p.name = name;
  p.path = path;
  std::istringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    if (line.rfind("#", 0) != 0) break;
    line = line.substr(1);
    line.erase(0, line.find_first_not_of(' '));
    if (!line.empty()) {
      p.description = line;
      break;
    }
  }
  OPFUSE_ASSIGN_OR_RETURN(p.c, BuildCase(g, name, leading, rows, text));
  p.c.remake = [g, name, leading](int64_t n) -> StatusOr<OpCase> {
    OPFUSE_ASSIGN_OR_RETURN(Graph r, WithRows(g, leading, n));
    return BuildCase(r, name, leading, n, "");
  };
  return p;
}

StatusOr<std::vector<EvalProblem>> LoadProblems(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound(fmt::format("problem directory '{}' does not exist", dir));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".ofg") files.push_back(e.path());
  if (ec) return NotFound(fmt::format("problem directory '{}': {}", dir, ec.message()));
  if (files.empty()) return NotFound(fmt::format("problem directory '{}' has no .ofg files", dir));
  std::sort(files.begin(), files.end());
  std::vector<EvalProblem> out;
  for (const auto& f : files) {
    OPFUSE_ASSIGN_OR_RETURN(std::string text, ReadFileCapped(f.string(), kMaxGraphFileBytes, "problem file"));
    OPFUSE_ASSIGN_OR_RETURN(EvalProblem p, ProblemFromText(f.stem().string(), text, f.string()));
    out.push_back(std::move(p));
  }
  return out;
}

StatusOr<std::vector<EvalProblem>> SelectProblems(const std::vector<EvalProblem>& all, const std::string& names) {
  if (names.empty()) return all;
  std::vector<EvalProblem> out;
  std::set<std::string> seen;
  size_t pos = 0;
  while (pos <= names.size()) {
    size_t comma = names.find(',', pos);
    if (comma == std::string::npos) comma = names.size();
    const std::string n = names.substr(pos, comma - pos);
    pos = comma + 1;
    if (n.empty()) return InvalidArgument(fmt::format("--problems '{}': empty name", names));
    if (!seen.insert(n).second) return InvalidArgument(fmt::format("--problems: '{}' is listed twice", n));
    auto it = std::find_if(all.begin(), all.end(), [&](const EvalProblem& p) { return p.name == n; });
    if (it == all.end()) return InvalidArgument(fmt::format("unknown problem '{}' (opfuse eval list shows them)", n));
    out.push_back(*it);
  }
  return out;
}

nlohmann::json ProblemsToJson(const std::vector<EvalProblem>& ps) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& p : ps)
    a.push_back({{"name", p.name}, {"path", p.path}, {"description", p.description}, {"case", CaseToJson(p.c)}});
  return {{"schema", 1}, {"harness", HarnessJson()}, {"problems", a}};
}

// ---------------------------------------------------------------- results

namespace {
nlohmann::json Num(double v) { return Has(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
}  // namespace

void ApplyBaseline(const nlohmann::json& baseline, std::vector<EvalResult>& results) {
  const nlohmann::json* probs = baseline.contains("problems") ? &baseline["problems"] : nullptr;
  for (auto& r : results) {
    r.baseline_us.clear();
    r.speedup.clear();
    r.review = false;
    if (!probs || !probs->contains(r.problem)) continue;
    const auto& e = (*probs)[r.problem];
    for (const char* src : kBaselineSources) {
      if (!e.contains(src) || !e[src].contains("us") || !e[src]["us"].is_number()) continue;
      const double b = e[src]["us"].get<double>();
      if (!(b > 0)) continue;
      r.baseline_us[src] = b;
      if (r.correct && Has(r.runtime_us) && r.runtime_us > 0) {
        r.speedup[src] = b / r.runtime_us;
        if (r.speedup[src] > kEvalReviewSpeedup) r.review = true;
      }
    }
  }
}

std::vector<FastSummary> Summarize(const std::vector<EvalResult>& results, bool accept_flagged) {
  std::vector<FastSummary> out;
  for (const char* src : kBaselineSources) {
    FastSummary s;
    s.against = src;
    s.problems = static_cast<int>(results.size());
    double logsum = 0;
    int n = 0, f1 = 0, f2 = 0;
    for (const auto& r : results) {
      s.compiled += r.compiled;
      s.correct += r.correct;
      if (r.baseline_us.count(src)) s.with_baseline++;
      auto it = r.speedup.find(src);
      if (!r.correct || it == r.speedup.end()) continue;
      if (it->second > kEvalReviewSpeedup) {
        s.review++;
        if (!accept_flagged) {
          s.held_out++;
          continue;
        }
      }
      logsum += std::log(it->second);
      ++n;
      f1 += it->second > 1;
      f2 += it->second > 2;
    }
    if (s.problems) {
      s.fast_0 = static_cast<double>(s.correct) / s.problems;
      s.fast_1 = static_cast<double>(f1) / s.problems;
      s.fast_2 = static_cast<double>(f2) / s.problems;
    }
    if (n) s.geomean = std::exp(logsum / n);
    out.push_back(s);
  }
  return out;
}

nlohmann::json EvalToJson(const std::vector<EvalResult>& results, const nlohmann::json& meta) {
  nlohmann::json j = meta;
  j["schema"] = 1;
  nlohmann::json rs = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::json b = nlohmann::json::object(), sp = nlohmann::json::object();
    for (const auto& [k, v] : r.baseline_us) b[k] = v;
    for (const auto& [k, v] : r.speedup) sp[k] = v;
    rs.push_back({{"problem", r.problem}, {"candidate", r.candidate}, {"compiled", r.compiled}, {"correct", r.correct},
                  {"error", r.error}, {"rule", r.rule}, {"check", r.check}, {"rel_err", Num(r.rel_err)}, {"runtime_us", Num(r.runtime_us)},
                  {"method", r.method}, {"kernels", r.kernels}, {"baseline_us", b}, {"speedup", sp},
                  {"review", r.review}});
  }
  j["results"] = rs;
  nlohmann::json sm = nlohmann::json::array();
  const bool accept = meta.contains("accept_flagged") && meta["accept_flagged"].is_boolean() && meta["accept_flagged"].get<bool>();
  for (const auto& s : Summarize(results, accept))
    sm.push_back({{"against", s.against}, {"problems", s.problems}, {"compiled", s.compiled}, {"correct", s.correct},
                  {"with_baseline", s.with_baseline}, {"fast_0", s.fast_0}, {"fast_1", s.fast_1}, {"fast_2", s.fast_2},
                  {"geomean_speedup", Num(s.geomean)}, {"flagged_for_review", s.review}, {"held_out", s.held_out}});
  j["summary"] = sm;
  return j;
}

std::string EvalMarkdown(const std::vector<EvalResult>& results, const std::string& primary, bool accept_flagged) {
  auto f = [](double v, const char* fmt_) { return Has(v) ? fmt::format(fmt::runtime(fmt_), v) : std::string("—"); };
  std::string md = fmt::format(
      "| problem | candidate | compiled | correct | µs | vs unfused | vs torch eager | vs torch.compile | note |\n"
      "|---|---|---|---|---:|---:|---:|---:|---|\n");
  for (const auto& r : results) {
    auto sp = [&](const char* k) {
      auto it = r.speedup.find(k);
      return it == r.speedup.end() ? std::string("—") : fmt::format("{:.2f}x", it->second);
    };
    std::string note = r.error;
    if (note.size() > 120) note = note.substr(0, 117) + "...";
    if (r.review)
      note = std::string(accept_flagged ? "speedup > 10x: accepted after review" : "speedup > 10x: held out until --accept-flagged") +
             (note.empty() ? "" : "; ") + note;
    for (auto& ch : note)
      if (ch == '|' || ch == '\n') ch = ' ';
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", r.problem, r.candidate, r.compiled ? "yes" : "no",
                      r.correct ? "yes" : "no", f(r.runtime_us, "{:.2f}"), sp("opfuse_unfused"), sp("torch_eager"),
                      sp("torch_compile"), note);
  }
  md += "\n| against | problems | correct | fast_0 | fast_1 | fast_2 | geomean speedup | > 10x (held out) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& s : Summarize(results, accept_flagged)) {
    if (!s.with_baseline && s.against != primary) continue;
    md += fmt::format("| {}{} | {} | {} | {:.2f} | {:.2f} | {:.2f} | {} | {} ({}) |\n", s.against, s.against == primary ? " (primary)" : "",
                      s.problems, s.correct, s.fast_0, s.fast_1, s.fast_2, f(s.geomean, "{:.2f}x"), s.review, s.held_out);
  }
  return md;
}

// ---------------------------------------------------------------- baseline_time.json

StatusOr<nlohmann::json> ReadBaseline(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(fmt::format("baseline file '{}' does not exist (run `opfuse eval baseline` first)", path));
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    return InvalidArgument(fmt::format("baseline file '{}': not valid JSON ({})", path, e.what()));
  }
  if (!j.is_object() || j.value("schema", 0) != 1 || !j.contains("problems") || !j["problems"].is_object())
    return InvalidArgument(fmt::format("baseline file '{}': expected {{\"schema\": 1, \"problems\": {{...}}}}", path));
  for (auto& [name, e] : j["problems"].items()) {
    if (!e.is_object()) return InvalidArgument(fmt::format("baseline file '{}': problems.{} is not an object", path, name));
    for (auto& [src, v] : e.items())
      if (!v.is_object() || (v.contains("us") && !v["us"].is_null() && !v["us"].is_number()))
        return InvalidArgument(fmt::format("baseline file '{}': problems.{}.{}.us is not a number", path, name, src));
  }
  return j;
}

Status MergeBaseline(nlohmann::json& file, const std::string& source, const nlohmann::json& device,
                     const nlohmann::json& entries, const std::string& command) {
  if (file.is_null() || file.empty()) file = {{"schema", 1}, {"device", device}, {"problems", nlohmann::json::object()},
                                              {"runs", nlohmann::json::array()}};
  const std::string have = file.contains("device") ? file["device"].value("name", "") : "";
  const std::string now = device.value("name", "");
  if (!have.empty() && have != now)
    return InvalidArgument(fmt::format("baseline file was measured on '{}', this device is '{}': use another --output", have, now));
  if (have.empty()) file["device"] = device;
  for (auto& [name, e] : entries.items()) file["problems"][name][source] = e;
  file["runs"].push_back({{"source", source}, {"command", command}, {"date", UtcNow()}});
  return Status::Ok();
}

Status WriteJsonFile(const std::string& path, const nlohmann::json& j) { return WriteFileAtomic(path, j.dump(2) + "\n"); }

// ---------------------------------------------------------------- the CPU backend

std::vector<HostTensor> MakeProblemInputs(const OpCase& c, uint64_t seed, Dist dist) {
  std::vector<HostTensor> out;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const TensorSpec& t = c.inputs[k];
    const uint64_t sd = SplitMix64(seed + k);
    const int64_t row_len = FillRowLen(t.shape);
    HostTensor h(t.dtype, t.shape);
    for (int64_t i = 0; i < h.numel(); ++i) {
      if (t.fill == Fill::kIds) h.set(i, FillId(sd, i, static_cast<uint64_t>(std::max<int64_t>(t.id_range, 1))));
      else h.set(i, FillValue(dist, sd, i, row_len, t.fill == Fill::kPositive));
    }
    out.push_back(std::move(h));
  }
  return out;
}

StatusOr<HostCandidate> OpfuseCpuCandidate(const EvalProblem& p) {
  OPFUSE_ASSIGN_OR_RETURN(Graph g, ParseGraph(p.c.graph));
  OPFUSE_ASSIGN_OR_RETURN(FusionConfig config, FusionConfig::FromEnv());
  OPFUSE_ASSIGN_OR_RETURN(Graph fused, RunFusionPasses(g, config));
  const OpCase c = p.c;
  return HostCandidate([fused, c](const std::vector<const HostTensor*>& in, const std::vector<HostTensor*>& out) -> Status {
    std::map<std::string, HostTensor> named;
    for (size_t i = 0; i < in.size(); ++i) named[c.inputs[i].name] = *in[i];
    CpuRunOptions ro;
    ro.fuse_groups = true;
    OPFUSE_ASSIGN_OR_RETURN(auto res, RunGraphCpu(fused, named, ro));
    for (size_t i = 0; i < out.size(); ++i) {
      auto it = res.find(c.outputs[i].name);
      if (it == res.end()) return Internal(fmt::format("fused graph has no output '{}'", c.outputs[i].name));
      if (it->second.shape != out[i]->shape || it->second.dtype != out[i]->dtype)
        return Internal(fmt::format("fused graph output '{}' has another type", c.outputs[i].name));
      *out[i] = it->second;
    }
    return Status::Ok();
  });
}

StatusOr<std::vector<EvalResult>> RunEvalCpu(const std::vector<EvalProblem>& problems, const CpuEvalOptions& o) {
  if (o.trials < 1) return InvalidArgument(fmt::format("--trials {}: must be positive", o.trials));
  std::vector<EvalResult> results;
  const int n = static_cast<int>(problems.size());
  for (int pi = 0; pi < n; ++pi) {
    const EvalProblem& p = problems[pi];
    if (o.on_start) o.on_start(pi, n, p.name);
    EvalResult r;
    r.problem = p.name;
    r.candidate = o.candidate_name;
    r.check = fmt::format("{} trials, all {} rows", o.trials, p.c.rows);
    auto cand = o.make_candidate ? o.make_candidate(p) : OpfuseCpuCandidate(p);
    if (!cand.ok()) {
      r.error = "not compiled: " + cand.status().message();
      results.push_back(std::move(r));
      continue;
    }
    r.compiled = true;
    auto graph = ParseGraph(p.c.graph);
    if (!graph.ok()) return Internal(fmt::format("problem '{}': {}", p.name, graph.status().message()));
    std::vector<std::string> problems_seen;
    double worst = 0;
    std::string first_rule;
    auto broke = [&](const char* rule, std::string text) {
      if (first_rule.empty()) first_rule = rule;
      problems_seen.push_back(fmt::format("{}: {}", rule, text));
    };
    for (int t = 0; t < o.trials && problems_seen.empty(); ++t) {
      const Dist dist = kEvalDists[t % std::size(kEvalDists)];
      std::vector<HostTensor> inputs =
          MakeProblemInputs(p.c, o.seed + 1000003ull * static_cast<uint64_t>(t) + std::hash<std::string>{}(p.name), dist);
      const std::vector<HostTensor> before = inputs;
      std::vector<HostTensor> outputs;
      for (const auto& s : p.c.outputs) {
        HostTensor h(s.dtype, s.shape);
        std::fill(h.data.begin(), h.data.end(), 0xFF);  // the poison: NaN for floats
        outputs.push_back(std::move(h));
      }
      std::vector<const HostTensor*> ip;
      std::vector<HostTensor*> op;
      for (auto& x : inputs) ip.push_back(&x);
      for (auto& x : outputs) op.push_back(&x);
      const std::string tag = o.trials > 1 ? fmt::format("trial {} ({}): ", t + 1, DistName(dist)) : "";
      if (Status st = (*cand)(ip, op); !st.ok()) {
        problems_seen.push_back(tag + "run failed: " + st.message());
        break;
      }
      std::map<std::string, HostTensor> named;
      for (size_t i = 0; i < before.size(); ++i) named[p.c.inputs[i].name] = before[i];
      OPFUSE_ASSIGN_OR_RETURN(auto ref, RunGraphCpu(*graph, named));
      for (size_t i = 0; i < outputs.size(); ++i) {
        const TensorSpec& s = p.c.outputs[i];
        if (outputs[i].shape != s.shape || outputs[i].dtype != s.dtype ||
            outputs[i].data.size() != static_cast<size_t>(s.nbytes())) {
          broke(kRuleReference, tag + fmt::format("{}: the candidate changed the output's type or size", s.name));
          continue;
        }
        const double e = RelativeError(outputs[i], ref.at(s.name));
        worst = std::max(worst, e);
        if (!(e <= ErrorBound(s.dtype, p.c.op)))
          broke(kRuleReference, tag + fmt::format("{}: rel_err {:.2e} > {:.0e}", s.name, e, ErrorBound(s.dtype, p.c.op)));
        const OutputScan scan = ScanOutput(outputs[i].data.data(), s.dtype, s.numel());
        if (scan.nan) broke(kRuleUnwritten, tag + fmt::format("{}: {} of {} elements NaN (unwritten?)", s.name, scan.nan, s.numel()));
        if (IsFloat(s.dtype) && scan.zero == s.numel())
          broke(kRuleAllZero, tag + fmt::format("{}: all {} elements are zero", s.name, s.numel()));
      }
      for (size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i].data != before[i].data) broke(kRuleInputs, tag + fmt::format("input {} was modified", p.c.inputs[i].name));
    }
    r.rel_err = worst;
    r.correct = problems_seen.empty();
    r.rule = first_rule;
    if (!r.correct) r.error = fmt::format("{}", fmt::join(problems_seen, "; "));
    results.push_back(std::move(r));
  }
  return results;
}

std::vector<EvalResult> ResultsFromReport(const BenchReport& rep, const std::vector<EvalProblem>& problems,
                                          const std::string& variant, const std::string& candidate_name) {
  std::vector<EvalResult> out;
  for (const auto& p : problems) {
    EvalResult r;
    r.problem = p.name;
    r.candidate = candidate_name;
    auto c = std::find_if(rep.cases.begin(), rep.cases.end(), [&](const CaseResult& x) { return x.id == p.c.id; });
    if (c == rep.cases.end()) {
      r.error = rep.aborted.empty() ? "not run" : "not run: " + rep.aborted;
      out.push_back(std::move(r));
      continue;
    }
    r.check = c->check;
    auto v = std::find_if(c->variants.begin(), c->variants.end(), [&](const VariantResult& x) { return x.name == variant; });
    if (v == c->variants.end()) {
      r.error = "variant not run";
      out.push_back(std::move(r));
      continue;
    }
    r.kernels = v->kernels;
    r.rel_err = v->rel_err;
    r.rule = v->rule;
    r.compiled = v->error.rfind("create: ", 0) != 0 && v->error.rfind("not run", 0) != 0 && v->error.rfind("case setup", 0) != 0;
    r.correct = r.compiled && v->correct.value_or(false) && v->error.empty();
    if (r.correct) {
      r.runtime_us = v->us;
      r.method = v->method;
    }
    if (!v->error.empty()) r.error = v->error;
    else if (!v->correct.has_value()) r.error = v->check_error.empty() ? "not checked" : v->check_error;
    else if (!*v->correct) r.error = v->check_error.empty() ? fmt::format("rel_err {:.2e}", v->rel_err) : v->check_error;
    if (r.correct && !Has(r.runtime_us)) {
      r.correct = false;
      r.error = "not timed";
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace opfuse::bench
