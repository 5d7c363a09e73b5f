// The `opfuse bench ops` report writer on a recorded synthetic result set (clearly marked
// synthetic; no GPU): bench_report.json round trip, derived metrics (GB/s = bytes / µs / 1e3,
// TFLOP/s = flops / µs / 1e6, MBU/MFU against the ceilings), the flat metrics rows, the peer merge
// (ratios, unmatched ids, malformed peer.json, device mismatch), the HTML (every case id present,
// tags of the elements we emit balanced, nothing fetched from the network, the ✗ of a failed
// check) and the CLI: `opfuse bench report` exit codes and `opfuse bench ops --list-cases`.
//
// Set OPFUSE_BENCH_SYNTHETIC_DIR=/some/dir to keep the synthetic report there (for
// tools/screenshot_report.sh, to look at the rendering).
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <functional>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "bench/op_suite.h"
#include "bench/report.h"

#ifdef OPFUSE_WITH_CUDA
#include "cuda/device.h"
#endif

namespace opfuse::bench {
namespace {

namespace fs = std::filesystem;

// A made-up but plausible result set: device-like numbers, one failed check, one variant that
// could not be created, micro ops with unfused == library.
BenchReport SyntheticReport() {
  SuiteFilter f;
  f.ops_regex = "exp2|less_than|gather|rmsnorm|add_rmsnorm|swiglu|softmax|matmul|attention|rope";
  f.rows = {1, 8, 32, 512, 2048, 16384};
  auto suite = BuildOpSuite(f);
  EXPECT_TRUE(suite.ok()) << suite.status().message();
  BenchReport r;
  r.synthetic = true;
  r.device = {"NVIDIA H200 (synthetic)", "sm_90", "580.00 (CUDA 13.0)", "CUDA runtime 13.0", 132, 60ll << 20, 141ll << 30};
  r.command = "opfuse bench ops --synthetic-test-fixture";
  r.date = "2026-01-01T00:00:00Z";
  r.dtype = "bf16";
  r.timing = {{"min_samples", 25}, {"method", "synthetic: no timing was done"}};
  r.ceilings.copy_gbps = 4200;
  r.ceilings.copy_kernel_gbps = 4200;
  r.ceilings.memcpy_gbps = 4100;
  r.ceilings.copy_bytes = 1ll << 30;
  r.ceilings.gemm_tflops = {{"bf16", 800}};
  r.ceilings.gemm_m = r.ceilings.gemm_n = r.ceilings.gemm_k = 8192;
  r.skipped = suite->skipped;
  int i = 0;
  for (const auto& c : suite->cases) {
    CaseResult cr = CaseResultFor(c);
    cr.check = c.rows > 64 ? "16 rows sampled" : fmt::format("all {} rows", c.rows);
    const bool compute = c.op == "matmul" || c.op == "attention";
    const double ideal = compute ? static_cast<double>(c.flops) / (800e6 * 0.7) : static_cast<double>(c.bytes) / 4200e3;
    for (const auto& name : VariantNames()) {
      VariantResult v;
      v.name = name;
      const double eff = name == "unfused" ? 0.45 : name == "library" ? 0.82 : 0.9;
      const double launch = c.phase == "decode" ? 2.0 : 1.0;
      v.us = ideal / eff + launch * (name == "unfused" && c.suite == "patterns" ? 3 : 1);
      v.us_min = v.us * 0.97;
      v.us_p90 = v.us * 1.04;
      v.samples = 50;
      v.method = c.phase == "decode" ? "graph x64" : "events";
      v.host_us = name == "unfused" ? 9.0 : 4.0;
      v.kernels_per_run = name == "unfused" && c.suite == "patterns" && !compute ? 5 : 1;
      v.pdl_launches = c.phase == "decode" && name != "unfused" ? v.kernels_per_run : 0;
      v.kernels = {fmt::format("{}:{}", name, c.op)};
      v.correct = true;
      v.rel_err = cr.dtype == "bf16" ? 2.1e-3 : 1e-6;
      if (c.suite == "micro" && name == "unfused") v.same_as = "library";
      cr.variants.push_back(v);
    }
    ++i;
    r.cases.push_back(std::move(cr));
  }
  // One wrong kernel and one that failed to compile, so both show up.
  for (auto& c : r.cases) {
    if (c.id == "patterns/softmax/bf16/rows=2048/h=4096") {
      c.variants[2].correct = false;
      c.variants[2].rel_err = 0.31;
      c.variants[2].check_error = "y: rel_err 3.10e-01 > 3e-02";
    }
    if (c.id == "patterns/rope/bf16/rows=8/h=4096") {
      c.variants[1] = VariantResult{};
      c.variants[1].name = "library";
      c.variants[1].error = "create: synthetic failure <for the test>";
    }
  }
  DeriveMetrics(r);
  return r;
}

// A peer.json for the synthetic report: torch eager slower, compile in between; one unknown id.
nlohmann::json SyntheticPeer(const BenchReport& r) {
  nlohmann::json results = nlohmann::json::array();
  for (const auto& c : r.cases) {
    const VariantResult* lib = c.Find("library");
    const double base = lib && lib->measured() ? lib->us : 10.0;
    nlohmann::json e = {{"id", c.id},
                        {"eager_us", base * (c.phase == "decode" ? 3.0 : 1.6)},
                        {"compile_us", base * (c.phase == "decode" ? 1.4 : 1.1)},
                        {"eager_host_us", 12.5},
                        {"compile_host_us", 30.0},
                        {"eager_error", nullptr},
                        {"compile_error", nullptr}};
    if (c.op == "attention" && c.rows == 1) {
      e["compile_us"] = nullptr;
      e["compile_error"] = "synthetic: torch.compile failed";
    }
    if (c.id == "patterns/rmsnorm/bf16/rows=512/h=4096") e["flags"] = {"compile rel_err 0.2 > bound 0.03"};
    e["impl"] = "synthetic torch function";
    results.push_back(e);
  }
  results.push_back({{"id", "patterns/unknown/bf16/rows=1/h=1"}, {"eager_us", 1.0}, {"compile_us", 1.0}});
  return {{"schema", 1},
          {"device", r.device.name},
          {"driver", "580.00"},
          {"torch", "2.5.0 (synthetic)"},
          {"cuda", "12.4"},
          {"method", "synthetic"},
          {"results", results}};
}

std::string Slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Balanced tags: every element we open is closed in order (void elements and `/>` aside),
// <script>/<style> bodies skipped. Returns "" or the first problem.
std::string CheckTags(const std::string& html) {
  static const std::set<std::string> kVoid = {"meta", "input", "br", "hr", "img", "link"};
  std::vector<std::string> stack;
  size_t i = 0;
  while ((i = html.find('<', i)) != std::string::npos) {
    if (html.compare(i, 2, "<!") == 0) {
      i = html.find('>', i);
      if (i == std::string::npos) return "unterminated <!";
      continue;
    }
    const size_t end = html.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    const std::string tag = html.substr(i + 1, end - i - 1);
    if (tag.empty()) return "empty tag";
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name)
        return "</" + name + "> closes " + (stack.empty() ? "nothing" : "<" + stack.back() + ">") + " at " + std::to_string(i);
      stack.pop_back();
      i = end + 1;
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \n\t/"));
    for (char ch : name)
      if (!std::isalnum(static_cast<unsigned char>(ch))) return "bad tag name '" + name + "'";
    if (tag.back() == '/' || kVoid.count(name)) {
      i = end + 1;
      continue;
    }
    if (name == "script" || name == "style") {
      const size_t close = html.find("</" + name + ">", end);
      if (close == std::string::npos) return "unclosed <" + name + ">";
      i = close + name.size() + 3;
      continue;
    }
    stack.push_back(name);
    i = end + 1;
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  return "";
}

TEST(BenchReport, SummarizeSamples) {
  SampleStats s = SummarizeSamples({5, 1, 3, 2, 4});
  EXPECT_EQ(s.samples, 5);
  EXPECT_DOUBLE_EQ(s.median_us, 3);
  EXPECT_DOUBLE_EQ(s.min_us, 1);
  EXPECT_DOUBLE_EQ(s.p90_us, 5);  // nearest rank: ceil(4.5) = 5th
  s = SummarizeSamples({4, 1, 3, 2, std::nan("")});
  EXPECT_EQ(s.samples, 4);
  EXPECT_DOUBLE_EQ(s.median_us, 2.5);
  std::vector<double> ten;
  for (int i = 10; i >= 1; --i) ten.push_back(i);
  EXPECT_DOUBLE_EQ(SummarizeSamples(ten).p90_us, 9);
  s = SummarizeSamples({});
  EXPECT_EQ(s.samples, 0);
  EXPECT_TRUE(std::isnan(s.median_us));
}

TEST(BenchReport, DerivedMetrics) {
  BenchReport r = SyntheticReport();
  int checked = 0;
  for (const auto& c : r.cases)
    for (const auto& v : c.variants) {
      if (!v.measured()) {
        EXPECT_TRUE(std::isnan(v.gbps)) << c.id;
        continue;
      }
      EXPECT_NEAR(v.gbps, static_cast<double>(c.bytes) / v.us / 1e3, 1e-9 * v.gbps) << c.id;
      EXPECT_NEAR(v.tflops, static_cast<double>(c.flops) / v.us / 1e6, 1e-9 * v.tflops + 1e-15) << c.id;
      EXPECT_NEAR(v.mbu, v.gbps / 4200, 1e-12) << c.id;
      EXPECT_NEAR(v.mfu, v.tflops / 800, 1e-12) << c.id;
      ++checked;
    }
  EXPECT_GT(checked, 100);
  // A hand-worked one: rmsnorm rows=32 h=2048 moves 266240 bytes.
  for (auto& c : r.cases)
    if (c.id == "patterns/rmsnorm/bf16/rows=32/h=2048") {
      c.variants[1].us = 2.0;
      DeriveMetrics(r);
      EXPECT_DOUBLE_EQ(c.variants[1].gbps, 266240 / 2.0 / 1e3);  // 133.12 GB/s
      EXPECT_DOUBLE_EQ(c.variants[1].mbu, 133.12 / 4200);
    }
  // The best variant ignores a variant that failed its check, and one that could not run.
  for (const auto& c : r.cases) {
    if (c.id == "patterns/softmax/bf16/rows=2048/h=4096") { EXPECT_EQ(c.best_variant, "library"); }
    if (c.id == "patterns/rope/bf16/rows=8/h=4096") { EXPECT_EQ(c.best_variant, "jit"); }
  }
}

TEST(BenchReport, JsonRoundTrip) {
  const BenchReport r = SyntheticReport();
  const nlohmann::json j = ReportToJson(r);
  auto back = ReportFromJson(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(ReportToJson(*back).dump(), j.dump());
  EXPECT_EQ(RenderHtml(*back), RenderHtml(r));
  EXPECT_TRUE(back->synthetic);
  EXPECT_EQ(back->cases.size(), r.cases.size());
  // Missing numbers are null, not 0.
  bool saw_null = false;
  for (const auto& c : j["cases"])
    if (c["id"] == "patterns/rope/bf16/rows=8/h=4096") {
      EXPECT_TRUE(c["variants"]["library"]["us"].is_null());
      EXPECT_EQ(c["variants"]["library"]["error"], "create: synthetic failure <for the test>");
      saw_null = true;
    }
  EXPECT_TRUE(saw_null);
  // The PDL launch count survives the round trip; a report written before the field existed reads 0.
  int pdl = 0;
  for (const auto& c : back->cases)
    for (const auto& v : c.variants) pdl += v.pdl_launches;
  EXPECT_GT(pdl, 0);
  nlohmann::json old_report = j;
  for (auto& c : old_report["cases"])
    for (auto& [name, v] : c["variants"].items()) v.erase("pdl_launches");
  auto old_back = ReportFromJson(old_report);
  ASSERT_TRUE(old_back.ok()) << old_back.status().message();
  for (const auto& c : old_back->cases)
    for (const auto& v : c.variants) EXPECT_EQ(v.pdl_launches, 0);
  // Malformed documents name the field.
  nlohmann::json bad = j;
  bad["cases"][0]["bytes"] = "many";
  auto e = ReportFromJson(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("cases[0].bytes"), std::string::npos) << e.status().message();
  bad = j;
  bad["schema"] = 7;
  EXPECT_FALSE(ReportFromJson(bad).ok());
  bad = j;
  bad.erase("cases");
  EXPECT_FALSE(ReportFromJson(bad).ok());
  bad = j;
  bad["cases"][1]["id"] = bad["cases"][0]["id"];
  EXPECT_FALSE(ReportFromJson(bad).ok());
  // Keys and ids from the file are quoted: the message stays one line.
  bad = j;
  bad["cases"][0]["variants"]["odd\nname"] = bad["cases"][0]["variants"].begin().value();
  bad["cases"][0]["variants"]["odd\nname"]["us"] = "fast";
  e = ReportFromJson(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find(R"(cases[0].variants."odd\nname".us)"), std::string::npos) << e.status().message();
  EXPECT_EQ(e.status().message().find('\n'), std::string::npos);
  bad = j;
  bad["cases"][0]["id"] = "dup\nid";
  bad["cases"][1]["id"] = "dup\nid";
  e = ReportFromJson(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find(R"(duplicate case id "dup\nid")"), std::string::npos) << e.status().message();
}

TEST(BenchReport, MetricsRows) {
  BenchReport r = SyntheticReport();
  nlohmann::json m = MetricsToJson(r);
  EXPECT_EQ(m["schema"], 1);
  EXPECT_EQ(m["rows"].size(), r.cases.size() * 3);
  for (const auto& row : m["rows"]) {
    for (const char* k : {"id", "variant", "bytes", "flops", "time_us", "gbps", "tflops", "mbu", "mfu"})
      EXPECT_TRUE(row.contains(k)) << k;
    if (row["time_us"].is_null()) continue;
    const double us = row["time_us"].get<double>();
    EXPECT_NEAR(row["gbps"].get<double>(), row["bytes"].get<double>() / us / 1e3, 1e-6);
    EXPECT_NEAR(row["mbu"].get<double>(), row["gbps"].get<double>() / 4200, 1e-9);
  }
  ASSERT_TRUE(MergePeer(r, SyntheticPeer(r), false, nullptr).ok());
  m = MetricsToJson(r);
  EXPECT_EQ(m["rows"].size(), r.cases.size() * 5);  // + torch_eager, torch_compile
}

TEST(BenchReport, PeerMerge) {
  BenchReport r = SyntheticReport();
  std::vector<std::string> warnings;
  ASSERT_TRUE(MergePeer(r, SyntheticPeer(r), false, &warnings).ok());
  ASSERT_TRUE(r.peer.has_value());
  EXPECT_EQ(r.peer->matched, static_cast<int>(r.cases.size()));
  ASSERT_EQ(r.peer->unmatched.size(), 1u);
  EXPECT_EQ(r.peer->unmatched[0], "patterns/unknown/bf16/rows=1/h=1");
  ASSERT_EQ(warnings.size(), 1u);
  for (const auto& c : r.cases) {
    ASSERT_TRUE(c.peer.has_value()) << c.id;
    ASSERT_TRUE(Has(c.best_us)) << c.id;
    EXPECT_NEAR(c.eager_over_best, c.peer->eager_us / c.best_us, 1e-12) << c.id;
    if (c.op == "attention" && c.rows == 1) {
      EXPECT_TRUE(std::isnan(c.compile_over_best));
      EXPECT_EQ(c.peer->compile_error, "synthetic: torch.compile failed");
    } else {
      EXPECT_NEAR(c.compile_over_best, c.peer->compile_us / c.best_us, 1e-12) << c.id;
    }
    for (const auto& v : c.variants)
      if (v.measured()) { EXPECT_NEAR(v.speedup_vs_eager, c.peer->eager_us / v.us, 1e-12); }
  }
  // Survives the JSON round trip.
  auto back = ReportFromJson(ReportToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(ReportToJson(*back).dump(), ReportToJson(r).dump());

  // Another device: refused unless allowed.
  BenchReport r2 = SyntheticReport();
  nlohmann::json other = SyntheticPeer(r2);
  other["device"] = "NVIDIA A100";
  auto st = MergePeer(r2, other, false, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("A100"), std::string::npos);
  EXPECT_TRUE(MergePeer(r2, other, true, nullptr).ok());

  // Malformed peers.
  for (auto mutate : std::vector<std::function<void(nlohmann::json&)>>{
           [](nlohmann::json& p) { p["results"][0]["eager_us"] = "fast"; },
           [](nlohmann::json& p) { p["results"][0].erase("id"); },
           [](nlohmann::json& p) { p["results"] = 3; },
           [](nlohmann::json& p) { p["schema"] = 2; },
           [](nlohmann::json& p) { p["results"][1]["id"] = p["results"][0]["id"]; },
           [](nlohmann::json& p) { p["results"][0]["compile_us"] = -1.0; },
       }) {
    BenchReport r3 = SyntheticReport();
    nlohmann::json p = SyntheticPeer(r3);
    mutate(p);
    EXPECT_EQ(MergePeer(r3, p, false, nullptr).code(), StatusCode::kInvalidArgument) << p.dump().substr(0, 200);
  }
}

// tools/bench_peer.py --opfuse-lib: opfuse timed inside the peer's process; the fastest variant is
// kept and set beside torch.compile's time from the same process.
TEST(BenchReport, PeerWithOpfuseInItsProcess) {
  BenchReport r = SyntheticReport();
  nlohmann::json p = SyntheticPeer(r);
  const std::string id = r.cases[0].id;
  p["results"][0]["opfuse_library_us"] = 8.0;
  p["results"][0]["opfuse_jit_us"] = 5.0;
  p["results"][0]["opfuse_unfused_us"] = nullptr;
  ASSERT_TRUE(MergePeer(r, p, false, nullptr).ok());
  const CaseResult& c = r.cases[0];
  ASSERT_TRUE(c.peer.has_value());
  EXPECT_EQ(c.peer->opfuse_us, 5.0);
  EXPECT_EQ(c.peer->opfuse_variant, "jit");
  ASSERT_TRUE(Has(c.peer->compile_us));
  EXPECT_NEAR(c.compile_over_opfuse_one_process, c.peer->compile_us / 5.0, 1e-12);
  EXPECT_TRUE(std::isnan(r.cases[1].compile_over_opfuse_one_process));  // not timed there
  const std::string md = MarkdownSummary(r);
  EXPECT_NE(md.find("vs compile, one process"), std::string::npos);
  EXPECT_NE(md.find("5.00 (jit)"), std::string::npos) << md.substr(0, 600);
  auto back = ReportFromJson(ReportToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->cases[0].peer->opfuse_variant, "jit");
  EXPECT_EQ(ReportToJson(*back).dump(), ReportToJson(r).dump());
  // Without one-process numbers there is no such column.
  BenchReport plain = SyntheticReport();
  ASSERT_TRUE(MergePeer(plain, SyntheticPeer(plain), false, nullptr).ok());
  EXPECT_EQ(MarkdownSummary(plain).find("one process"), std::string::npos);
  // A non-number is an error naming the field.
  BenchReport bad = SyntheticReport();
  p = SyntheticPeer(bad);
  p["results"][0]["opfuse_jit_us"] = "fast";
  auto st = MergePeer(bad, p, false, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("opfuse_jit_us"), std::string::npos) << st.message();
  // A non-positive time is refused like the peer's own times.
  BenchReport neg = SyntheticReport();
  p = SyntheticPeer(neg);
  p["results"][0]["opfuse_library_us"] = 0.0;
  st = MergePeer(neg, p, false, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("times must be positive"), std::string::npos) << st.message();
}

// The event floor (an empty kernel timed by the per-call rule): absent = NaN (reports written before
// it existed still read), shown in the markdown header and the HTML table only when measured, JSON
// round trip, a bad value names the field.
TEST(BenchReport, EventFloor) {
  BenchReport r = SyntheticReport();
  EXPECT_EQ(MarkdownSummary(r).find("event floor"), std::string::npos);
  EXPECT_EQ(RenderHtml(r).find("event floor"), std::string::npos);
  nlohmann::json j = ReportToJson(r);
  EXPECT_TRUE(j["ceilings"]["event_floor_us"].is_null());
  j["ceilings"].erase("event_floor_us");  // a report of an older build
  auto old = ReportFromJson(j);
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_TRUE(std::isnan(old->ceilings.event_floor_us));
  r.ceilings.event_floor_us = 2.75;
  const std::string md = MarkdownSummary(r);
  EXPECT_NE(md.substr(0, md.find('\n')).find("; event floor 2.75 µs"), std::string::npos) << md.substr(0, 200);
  EXPECT_NE(RenderHtml(r).find("2.75 µs: an empty kernel timed like a prefill-size case"), std::string::npos);
  j = ReportToJson(r);
  EXPECT_DOUBLE_EQ(j["ceilings"]["event_floor_us"].get<double>(), 2.75);
  auto back = ReportFromJson(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_DOUBLE_EQ(back->ceilings.event_floor_us, 2.75);
  j["ceilings"]["event_floor_us"] = "short";
  auto bad = ReportFromJson(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ceilings.event_floor_us"), std::string::npos) << bad.status().message();
}

// The per-case copy of the same bytes: stored as measured, best_of_copy_same derived from it, a
// markdown column only when some case has it, JSON round trip, a bad value names the field.
TEST(BenchReport, SameSizeCopyReference) {
  BenchReport r = SyntheticReport();
  EXPECT_EQ(MarkdownSummary(r).find("of same-size copy"), std::string::npos);
  CaseResult& c = r.cases[0];
  DeriveMetrics(r);
  ASSERT_TRUE(Has(c.best_us));
  EXPECT_TRUE(std::isnan(c.best_of_copy_same));
  c.copy_same_us = 0.9 * c.best_us;
  c.copy_same_method = "16-byte copy kernel, synthetic";
  DeriveMetrics(r);
  EXPECT_NEAR(c.best_of_copy_same, 0.9, 1e-12);
  EXPECT_TRUE(std::isnan(r.cases[1].best_of_copy_same));  // not measured there
  const std::string md = MarkdownSummary(r);
  EXPECT_NE(md.find("| of same-size copy |"), std::string::npos) << md.substr(0, 400);
  EXPECT_NE(md.find("| 90% |"), std::string::npos) << md.substr(0, 800);
  EXPECT_NE(RenderHtml(r).find("a copy of the same bytes"), std::string::npos);
  const nlohmann::json j = ReportToJson(r);
  EXPECT_NEAR(j["cases"][0]["ratios"]["best_of_same_size_copy"].get<double>(), 0.9, 1e-12);
  EXPECT_TRUE(j["cases"][1]["copy_same_us"].is_null());
  auto back = ReportFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->cases[0].copy_same_method, c.copy_same_method);
  EXPECT_EQ(ReportToJson(*back).dump(), j.dump());
  nlohmann::json bad = j;
  bad["cases"][0]["copy_same_us"] = "quick";
  auto e = ReportFromJson(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("cases[0].copy_same_us"), std::string::npos) << e.status().message();
}

TEST(BenchReport, HtmlIsSelfContainedAndWellFormed) {
  BenchReport r = SyntheticReport();
  ASSERT_TRUE(MergePeer(r, SyntheticPeer(r), false, nullptr).ok());
  for (const BenchReport* rep : {&r}) {
    const std::string html = RenderHtml(*rep);
    EXPECT_EQ(CheckTags(html), "");
    for (const auto& c : rep->cases) EXPECT_NE(html.find(c.id), std::string::npos) << c.id;
    EXPECT_NE(html.find("SYNTHETIC"), std::string::npos);
    EXPECT_NE(html.find("✗"), std::string::npos);
    EXPECT_NE(html.find("synthetic failure &lt;for the test&gt;"), std::string::npos) << "errors are shown, escaped";
    EXPECT_EQ(html.find("http://"), std::string::npos);
    EXPECT_EQ(html.find("https://"), std::string::npos);
    EXPECT_EQ(html.find("<link"), std::string::npos);
    EXPECT_EQ(html.find("<script src"), std::string::npos);
    EXPECT_NE(html.find("Speedup vs torch.compile"), std::string::npos);
    EXPECT_NE(html.find("<svg"), std::string::npos);
    EXPECT_NE(html.find("torch.compile"), std::string::npos);
    EXPECT_NE(html.find("compile rel_err 0.2 &gt; bound 0.03"), std::string::npos) << "the peer's flags are shown";
  }
  // Without a peer: still well-formed, and it says how to add one.
  const BenchReport plain = SyntheticReport();
  const std::string html = RenderHtml(plain);
  EXPECT_EQ(CheckTags(html), "");
  EXPECT_NE(html.find("tools/bench_peer.py"), std::string::npos);
  // The checker itself catches what it must.
  EXPECT_NE(CheckTags("<div><span></div></span>"), "");
  EXPECT_NE(CheckTags("<table><tr>"), "");
  EXPECT_EQ(CheckTags("<p>a<br>b<input x=\"1\"></p><svg><line/></svg>"), "");
  // The markdown summary has one line per case and marks the failed check.
  const std::string md = MarkdownSummary(r);
  for (const auto& c : r.cases) EXPECT_NE(md.find("| " + c.id + " |"), std::string::npos);
  EXPECT_NE(md.find("✗"), std::string::npos);
  EXPECT_NE(md.find("1 variant(s) incorrect"), std::string::npos);
}

class BenchCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> n{0};
    dir_ = fs::temp_directory_path() / ("opfuse_bench_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  struct Result {
    int code = -1;
    std::string out, err;
  };
  Result Run(const std::string& args) {
    const fs::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string cmd =
        std::string("'") + OPFUSE_CLI_PATH + "' " + args + " >'" + out.string() + "' 2>'" + err.string() + "' </dev/null";
    const int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    r.out = Slurp(out);
    r.err = Slurp(err);
    return r;
  }
  fs::path dir_;
};

TEST_F(BenchCliTest, ReportMergesPeerAndRewritesAtomically) {
  const fs::path rep = dir_ / "run";
  BenchReport r = SyntheticReport();
  ASSERT_TRUE(WriteReport(r, rep.string()).ok());
  for (const char* f : {"bench_report.json", "bench_metrics.json", "report.html"}) EXPECT_TRUE(fs::exists(rep / f)) << f;
  for (const auto& e : fs::directory_iterator(rep))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << "leftover temp file " << e.path();
  std::ofstream(dir_ / "peer.json") << SyntheticPeer(r).dump();

  Result res = Run("bench report --dir '" + rep.string() + "' --peer '" + (dir_ / "peer.json").string() + "'");
  EXPECT_EQ(res.code, 0) << res.err;
  EXPECT_NE(res.out.find("compile µs"), std::string::npos) << res.out.substr(0, 400);
  EXPECT_NE(res.err.find("name no case"), std::string::npos) << res.err;
  auto j = ReadJsonFile((rep / "bench_report.json").string());
  ASSERT_TRUE(j.ok());
  auto merged = ReportFromJson(*j);
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  ASSERT_TRUE(merged->peer.has_value());
  EXPECT_EQ(merged->peer->torch, "2.5.0 (synthetic)");
  EXPECT_EQ(merged->peer->matched, static_cast<int>(r.cases.size()));
  const std::string html = Slurp(rep / "report.html");
  EXPECT_EQ(CheckTags(html), "");
  EXPECT_NE(html.find("2.5.0 (synthetic)"), std::string::npos);
  auto metrics = ReadJsonFile((rep / "bench_metrics.json").string());
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ((*metrics)["rows"].size(), r.cases.size() * 5);

  if (const char* keep = std::getenv("OPFUSE_BENCH_SYNTHETIC_DIR")) {
    std::error_code ec;
    fs::create_directories(keep, ec);
    for (const char* f : {"bench_report.json", "bench_metrics.json", "report.html"})
      fs::copy_file(rep / f, fs::path(keep) / f, fs::copy_options::overwrite_existing, ec);
  }
}

TEST_F(BenchCliTest, ReportExitCodes) {
  // Missing directory.
  Result res = Run("bench report --dir '" + (dir_ / "nope").string() + "'");
  EXPECT_EQ(res.code, 2);
  EXPECT_NE(res.err.find("no such directory"), std::string::npos) << res.err;
  EXPECT_EQ(std::count(res.err.begin(), res.err.end(), '\n'), 1) << res.err;
  // A directory without a report.
  res = Run("bench report --dir '" + dir_.string() + "'");
  EXPECT_EQ(res.code, 2);
  EXPECT_NE(res.err.find("bench_report.json"), std::string::npos) << res.err;
  // Malformed bench_report.json.
  const fs::path rep = dir_ / "run";
  fs::create_directories(rep);
  std::ofstream(rep / "bench_report.json") << "{\"schema\": 1, \"cases\": [";
  res = Run("bench report --dir '" + rep.string() + "'");
  EXPECT_EQ(res.code, 2);
  // A good report, a malformed peer.json: exit 2 and the report untouched.
  BenchReport r = SyntheticReport();
  ASSERT_TRUE(WriteReport(r, rep.string()).ok());
  const std::string before = Slurp(rep / "bench_report.json");
  std::ofstream(dir_ / "bad_peer.json") << "{\"schema\": 1, \"device\": \"x\", \"results\": [{\"id\": 3}";
  res = Run("bench report --dir '" + rep.string() + "' --peer '" + (dir_ / "bad_peer.json").string() + "'");
  EXPECT_EQ(res.code, 2);
  EXPECT_NE(res.err.find("peer"), std::string::npos) << res.err;
  nlohmann::json wrong_field = SyntheticPeer(r);
  wrong_field["results"][0]["eager_us"] = "slow";
  std::ofstream(dir_ / "bad_peer2.json") << wrong_field.dump();
  res = Run("bench report --dir '" + rep.string() + "' --peer '" + (dir_ / "bad_peer2.json").string() + "'");
  EXPECT_EQ(res.code, 2);
  EXPECT_NE(res.err.find("results[0].eager_us"), std::string::npos) << res.err;
  res = Run("bench report --dir '" + rep.string() + "' --peer '" + (dir_ / "missing.json").string() + "'");
  EXPECT_EQ(res.code, 2);
  EXPECT_EQ(Slurp(rep / "bench_report.json"), before) << "a failed merge must not touch the report";
  // Without --peer: re-renders, exit 0.
  res = Run("bench report --dir '" + rep.string() + "'");
  EXPECT_EQ(res.code, 0) << res.err;
}

TEST_F(BenchCliTest, OpsListCasesAndFlags) {
  Result res = Run("bench ops --list-cases --json --ops 'rmsnorm|swiglu' --rows 1,8");
  ASSERT_EQ(res.code, 0) << res.err;
  auto j = nlohmann::json::parse(res.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << res.out.substr(0, 300);
  EXPECT_EQ(j["schema"], 1);
  EXPECT_EQ(j["cases"].size(), 8u);  // 2 ops x 2 widths x 2 rows
  for (const auto& c : j["cases"]) EXPECT_TRUE(c["op"] == "rmsnorm" || c["op"] == "swiglu");
  res = Run("bench ops --list-cases");
  EXPECT_EQ(res.code, 0) << res.err;
  EXPECT_NE(res.out.find("patterns/attention/bf16/rows=512/h=2048"), std::string::npos);
  EXPECT_NE(res.out.find("skipped patterns/attention/bf16/rows=16384/h=2048"), std::string::npos);
  // Bad flags: exit 2 with one line naming the flag.
  for (const char* bad : {"--rows 0", "--rows 1,x", "--widths 999", "--variants unfused,fast", "--ops 'rms('",
                          "--suite tiny", "--dtype i32", "--min-samples -3"}) {
    res = Run(std::string("bench ops --list-cases ") + bad);
    EXPECT_EQ(res.code, 2) << bad << ": " << res.err;
    EXPECT_FALSE(res.err.empty()) << bad;
  }
  res = Run("bench");
  EXPECT_EQ(res.code, 2) << "a group without a subcommand is a usage error";
}

// cases.json as `bench ops` writes it passes the peer script's own contract check (no torch needed).
TEST_F(BenchCliTest, CasesJsonPassesThePeerContractCheck) {
  if (std::system("python3 --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  for (const char* dtype : {"bf16", "f32"}) {
    Result res = Run(std::string("bench ops --list-cases --json --dtype ") + dtype);
    ASSERT_EQ(res.code, 0) << res.err;
    const fs::path cases = dir_ / "cases.json";
    std::ofstream(cases) << res.out;
    const std::string cmd = std::string("python3 '") + OPFUSE_SOURCE_DIR + "/tools/bench_peer.py' --cases '" +
                            cases.string() + "' --check >'" + (dir_ / "peer_out.txt").string() + "' 2>&1";
    const int status = std::system(cmd.c_str());
    const std::string out = Slurp(dir_ / "peer_out.txt");
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
    EXPECT_NE(out.find("269 case(s) valid, 0 unsupported"), std::string::npos) << out;
  }
}

TEST_F(BenchCliTest, OpsWithoutGpuSaysSoAndWritesNothing) {
#ifdef OPFUSE_WITH_CUDA
  if (cuda::QueryDevice().ok()) GTEST_SKIP() << "a GPU is present: the real run is tests/gpu/bench_timing_test.cc";
#endif
  const fs::path out = dir_ / "out";
  Result res = Run("bench ops --ops exp2 --rows 1 --out '" + out.string() + "'");
  EXPECT_EQ(res.code, 2) << res.err;  // Unavailable: exit 2, as every "no CUDA device" of the CLI
  EXPECT_NE(res.err.find("no CUDA device"), std::string::npos) << res.err;
  EXPECT_EQ(std::count(res.err.begin(), res.err.end(), '\n'), 1) << res.err;
  EXPECT_FALSE(fs::exists(out)) << "nothing may be written without a GPU";
}

}  // namespace
}  // namespace opfuse::bench
