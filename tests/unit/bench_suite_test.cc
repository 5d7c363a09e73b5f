// The op benchmark case list (src/bench/op_suite.h): every op the issue names is present at every
// required size and width, ids are unique, bytes/flops agree with formulas worked out by hand,
// every graph parses, verifies and declares exactly the case's inputs/outputs, the filters do
// what they say, the correctness-check plan samples the right rows, and the small cases run on the
// CPU reference (which is what the GPU run checks each variant against).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "bench/fill_values.h"
#include "bench/harness.h"
#include "bench/op_suite.h"
#include "runtime/cpu/cpu_executor.h"

namespace opfuse::bench {
namespace {

const OpCase* Find(const OpSuite& s, const std::string& id) {
  for (const auto& c : s.cases)
    if (c.id == id) return &c;
  return nullptr;
}

OpSuite Default() {
  auto s = BuildOpSuite(SuiteFilter{});
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

TEST(BenchSuite, EveryIssueOpAtEveryRequiredSize) {
  const OpSuite s = Default();
  const std::vector<std::string> micro = {"exp2", "log2", "sin", "recip", "sqrt", "add", "mul",
                                          "mod",  "less_than", "gather", "cast", "sum", "max"};
  const std::vector<std::string> patterns = {"matmul",  "softmax",     "gelu",   "attention", "layernorm",
                                             "rmsnorm", "add_rmsnorm", "swiglu", "geglu",     "rope"};
  EXPECT_EQ(MicroOps(), micro);
  EXPECT_EQ(PatternOps(), patterns);
  const std::vector<int64_t> rows = {1, 8, 32, 512, 2048, 16384};
  std::map<std::string, std::vector<int64_t>> widths;
  for (const auto& op : micro) widths[op] = {2048, 4096};
  for (const char* op : {"softmax", "gelu", "layernorm", "rmsnorm", "add_rmsnorm", "rope", "matmul"}) widths[op] = {2048, 4096};
  widths["swiglu"] = widths["geglu"] = {5632, 4096};
  widths["attention"] = {2048};
  std::set<std::string> skipped;
  for (const auto& k : s.skipped) skipped.insert(k.id);
  int expected = 0;
  for (const auto& [op, ws] : widths) {
    const std::string suite = std::find(micro.begin(), micro.end(), op) != micro.end() ? "micro" : "patterns";
    for (int64_t w : ws)
      for (int64_t r : rows) {
        const std::string id = CaseId(suite, op, DType::kBF16, r, w);
        if (op == "attention" && r == 16384) {
          EXPECT_TRUE(skipped.count(id)) << id << " should be listed as skipped, with a reason";
          continue;
        }
        ++expected;
        const OpCase* c = Find(s, id);
        ASSERT_NE(c, nullptr) << "missing case " << id;
        EXPECT_EQ(c->op, op);
        EXPECT_EQ(c->suite, suite);
        EXPECT_EQ(c->rows, r);
        EXPECT_EQ(c->width, w);
        EXPECT_EQ(c->dtype, DType::kBF16);
        EXPECT_EQ(c->phase, r <= 32 ? "decode" : "prefill") << id;
        EXPECT_GT(c->bytes, 0) << id;
      }
  }
  EXPECT_EQ(static_cast<int>(s.cases.size()), expected) << "cases outside the grid";
  ASSERT_EQ(s.skipped.size(), 1u);
  EXPECT_NE(s.skipped[0].reason.find("16384"), std::string::npos) << s.skipped[0].reason;
}

TEST(BenchSuite, IdsUniqueAndStable) {
  const OpSuite s = Default();
  std::set<std::string> ids;
  for (const auto& c : s.cases) EXPECT_TRUE(ids.insert(c.id).second) << "duplicate id " << c.id;
  EXPECT_NE(Find(s, "patterns/rmsnorm/bf16/rows=32/h=2048"), nullptr);
  EXPECT_NE(Find(s, "micro/less_than/bf16/rows=1/h=4096"), nullptr);
  EXPECT_NE(Find(s, "patterns/swiglu/bf16/rows=16384/h=5632"), nullptr);
}

TEST(BenchSuite, BytesAndFlopsByHand) {
  const OpSuite s = Default();
  auto get = [&](const std::string& id) {
    const OpCase* c = Find(s, id);
    EXPECT_NE(c, nullptr) << id;
    return c ? *c : OpCase{};
  };
  // rmsnorm: x and y [32, 2048] bf16 + w [2048]; 4 flops per element (square, accumulate,
  // normalise, weight) + 3 per row (mean, +eps, rsqrt).
  OpCase c = get("patterns/rmsnorm/bf16/rows=32/h=2048");
  EXPECT_EQ(c.bytes, 32 * 2048 * 2 * 2 + 2048 * 2);
  EXPECT_EQ(c.bytes, 266240);
  EXPECT_EQ(c.flops, 4 * 32 * 2048 + 3 * 32);
  // matmul [8, 2048] x [5632, 2048]^T: a + b + y, 2 flops per MAC.
  c = get("patterns/matmul/bf16/rows=8/h=2048");
  EXPECT_EQ(c.bytes, (8 * 2048 + 5632 * 2048 + 8 * 5632) * 2);
  EXPECT_EQ(c.flops, int64_t{2} * 8 * 5632 * 2048);
  EXPECT_EQ(c.attrs["n"], 5632);
  EXPECT_EQ(c.attrs["k"], 2048);
  c = get("patterns/matmul/bf16/rows=512/h=4096");
  EXPECT_EQ(c.flops, int64_t{2} * 512 * 4096 * 4096);
  // attention prefill T = S = 512, causal: query i sees i + 1 keys -> 512 * 513 / 2 pairs;
  // QK^T and PV each 2 flops per MAC over D = 64, for 32 query heads.
  c = get("patterns/attention/bf16/rows=512/h=2048");
  EXPECT_EQ(c.kv_len, 512);
  EXPECT_EQ(c.bytes, (2 * 512 * 32 * 64 + 2 * 512 * 4 * 64) * 2);
  EXPECT_EQ(c.flops, int64_t{4} * 32 * 64 * (512 * 513 / 2));
  // attention decode: one query over S = 2048 keys sees all of them.
  c = get("patterns/attention/bf16/rows=1/h=2048");
  EXPECT_EQ(c.kv_len, 2048);
  EXPECT_EQ(c.bytes, (2 * 1 * 32 * 64 + 2 * 2048 * 4 * 64) * 2);
  EXPECT_EQ(c.flops, int64_t{4} * 32 * 64 * 2048);
  // attention decode with 32 queries over 2048 keys: query i sees 2048 - 31 + i keys.
  c = get("patterns/attention/bf16/rows=32/h=2048");
  int64_t pairs = 0;
  for (int i = 0; i < 32; ++i) pairs += 2048 - 31 + i;
  EXPECT_EQ(c.flops, 4 * 32 * 64 * pairs);
  // gather: only the 8 gathered table rows are read, plus the ids and the output.
  c = get("micro/gather/bf16/rows=8/h=2048");
  EXPECT_EQ(c.bytes, 8 * 2048 * 2 + 8 * 4 + 8 * 2048 * 2);
  EXPECT_EQ(c.flops, 0);
  // less_than: two bf16 inputs, a bool (1 byte) output; 1 flop per element.
  c = get("micro/less_than/bf16/rows=32/h=4096");
  EXPECT_EQ(c.bytes, 32 * 4096 * (2 + 2 + 1));
  EXPECT_EQ(c.flops, 32 * 4096);
  // cast bf16 -> f32.
  c = get("micro/cast/bf16/rows=8/h=2048");
  EXPECT_EQ(c.bytes, 8 * 2048 * (2 + 4));
  EXPECT_EQ(c.attrs["to"], "f32");
  // sum keeps the axis: y [rows, 1]; width - 1 additions per row.
  c = get("micro/sum/bf16/rows=512/h=2048");
  EXPECT_EQ(c.bytes, 512 * 2048 * 2 + 512 * 2);
  EXPECT_EQ(c.flops, 512 * 2047);
  // add_rmsnorm: x, r, y, s [rows, w] + w[w].
  c = get("patterns/add_rmsnorm/bf16/rows=8/h=4096");
  EXPECT_EQ(c.bytes, 4 * 8 * 4096 * 2 + 4096 * 2);
  EXPECT_EQ(c.flops, 5 * 8 * 4096 + 3 * 8);
  // rope at 2048: 32 heads of 64; cos/sin [T, 1, 64].
  c = get("patterns/rope/bf16/rows=8/h=2048");
  EXPECT_EQ(c.bytes, 2 * 8 * 32 * 64 * 2 + 2 * 8 * 64 * 2);
  EXPECT_EQ(c.flops, 3 * 8 * 2048);
  EXPECT_EQ(c.inputs[0].shape, (std::vector<int64_t>{8, 32, 64}));
  c = get("patterns/rope/bf16/rows=8/h=4096");
  EXPECT_EQ(c.inputs[0].shape, (std::vector<int64_t>{8, 32, 128}));
  // swiglu / geglu: g, u, y.
  c = get("patterns/swiglu/bf16/rows=2048/h=5632");
  EXPECT_EQ(c.bytes, 3 * 2048 * 5632 * 2);
  EXPECT_EQ(c.flops, 5 * 2048 * 5632);
  EXPECT_EQ(get("patterns/geglu/bf16/rows=2048/h=5632").flops, 6 * 2048 * 5632);
  // f32: every float tensor 4 bytes.
  auto f32 = MakeOpCase("exp2", DType::kF32, 8, 2048);
  ASSERT_TRUE(f32.ok());
  EXPECT_EQ(f32->bytes, 2 * 8 * 2048 * 4);
  EXPECT_EQ(f32->id, "micro/exp2/f32/rows=8/h=2048");
}

TEST(BenchSuite, GraphsParseVerifyAndMatchTheirSpecs) {
  for (DType dt : {DType::kBF16, DType::kF32}) {
    SuiteFilter f;
    f.dtype = dt;
    auto s = BuildOpSuite(f);
    ASSERT_TRUE(s.ok()) << s.status().message();
    for (const auto& c : s->cases) {
      auto g = ParseGraph(c.graph);
      ASSERT_TRUE(g.ok()) << c.id << ": " << g.status().message() << "\n" << c.graph;
      ASSERT_EQ(g->inputs.size(), c.inputs.size()) << c.id;
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        const Value& v = g->values[g->inputs[i]];
        EXPECT_EQ(v.name, c.inputs[i].name) << c.id;
        EXPECT_EQ(v.type.dtype, c.inputs[i].dtype) << c.id << " " << v.name;
        auto shape = BindShape(v.type.shape, {});
        ASSERT_TRUE(shape.ok()) << c.id << ": shapes must be static";
        EXPECT_EQ(*shape, c.inputs[i].shape) << c.id << " " << v.name;
        if (c.inputs[i].rows_leading) { EXPECT_EQ(c.inputs[i].shape[0], c.rows) << c.id << " " << v.name; }
      }
      ASSERT_EQ(g->outputs.size(), c.outputs.size()) << c.id;
      for (size_t i = 0; i < c.outputs.size(); ++i) {
        const Value& v = g->values[g->outputs[i]];
        EXPECT_EQ(v.name, c.outputs[i].name) << c.id;
        EXPECT_EQ(v.type.dtype, c.outputs[i].dtype) << c.id << " " << v.name;
        auto shape = BindShape(v.type.shape, {});
        ASSERT_TRUE(shape.ok()) << c.id;
        EXPECT_EQ(*shape, c.outputs[i].shape) << c.id << " " << v.name;
      }
      EXPECT_TRUE(g->Symbols().empty()) << c.id;
      EXPECT_EQ(g->nodes.size(), 1u) << c.id << ": one op per case";
    }
  }
}

TEST(BenchSuite, Filters) {
  SuiteFilter f;
  f.suite = "micro";
  auto s = BuildOpSuite(f);
  ASSERT_TRUE(s.ok());
  for (const auto& c : s->cases) EXPECT_EQ(c.suite, "micro");
  EXPECT_EQ(s->cases.size(), 13u * 2 * 6);

  f = SuiteFilter{};
  f.ops_regex = "rmsnorm";  // full match: add_rmsnorm is not included
  f.rows = {1, 8, 32};
  s = BuildOpSuite(f);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->cases.size(), 6u);
  for (const auto& c : s->cases) {
    EXPECT_EQ(c.op, "rmsnorm");
    EXPECT_EQ(c.phase, "decode");
  }

  f = SuiteFilter{};
  f.widths = {5632};
  s = BuildOpSuite(f);
  ASSERT_TRUE(s.ok());
  for (const auto& c : s->cases) EXPECT_TRUE(c.op == "swiglu" || c.op == "geglu") << c.id;
  EXPECT_EQ(s->cases.size(), 2u * 6);

  f = SuiteFilter{};
  f.dtype = DType::kF16;
  f.ops_regex = "gelu|softmax";
  f.rows = {100};  // a custom row count: prefill (> 64)
  s = BuildOpSuite(f);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->cases.size(), 4u);
  for (const auto& c : s->cases) {
    EXPECT_NE(c.id.find("/f16/"), std::string::npos);
    EXPECT_EQ(c.phase, "prefill");
  }

  // Bad filters are errors that name the flag.
  f = SuiteFilter{};
  f.ops_regex = "rms(";
  EXPECT_EQ(BuildOpSuite(f).status().code(), StatusCode::kInvalidArgument);
  f = SuiteFilter{};
  f.widths = {1000};
  auto bad = BuildOpSuite(f);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("1000"), std::string::npos);
  f = SuiteFilter{};
  f.rows = {0};
  EXPECT_EQ(BuildOpSuite(f).status().code(), StatusCode::kInvalidArgument);
  f = SuiteFilter{};
  f.suite = "nope";
  EXPECT_EQ(BuildOpSuite(f).status().code(), StatusCode::kInvalidArgument);
  f = SuiteFilter{};
  f.ops_regex = "nothing_matches";
  EXPECT_EQ(BuildOpSuite(f).status().code(), StatusCode::kInvalidArgument);
  f = SuiteFilter{};
  f.dtype = DType::kI32;
  EXPECT_EQ(BuildOpSuite(f).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeOpCase("frobnicate", DType::kBF16, 1, 2048).status().code(), StatusCode::kInvalidArgument);
}

TEST(BenchSuite, CasesJsonContract) {
  SuiteFilter f;
  f.rows = {32};
  auto s = BuildOpSuite(f);
  ASSERT_TRUE(s.ok());
  const nlohmann::json j = SuiteToJson(*s);
  EXPECT_EQ(j["schema"], 1);
  // The peer (tools/bench_peer.py) takes opfuse's measuring constants and bounds from here.
  EXPECT_EQ(j["harness"], HarnessJson());
  EXPECT_EQ(j["harness"]["gate_lead_us"], kGateLeadUs);
  EXPECT_EQ(j["harness"]["max_sets"], kMaxRotatedSets);
  ASSERT_TRUE(j["cases"].is_array());
  EXPECT_EQ(j["cases"].size(), s->cases.size());
  for (size_t i = 0; i < j["cases"].size(); ++i) {
    const auto& c = j["cases"][i];
    for (const char* k : {"id", "suite", "op", "dtype", "phase", "rows", "width", "inputs", "outputs", "attrs", "bytes",
                          "flops", "bound", "graph"})
      EXPECT_TRUE(c.contains(k)) << c["id"] << " lacks " << k;
    double want = 0;
    for (const auto& o : s->cases[i].outputs) want = std::max(want, ErrorBound(o.dtype, s->cases[i].op));
    EXPECT_EQ(c["bound"].get<double>(), want) << c["id"];
    for (const auto& t : c["inputs"]) {
      EXPECT_TRUE(t["name"].is_string());
      EXPECT_TRUE(t["dtype"].is_string());
      EXPECT_TRUE(t["shape"].is_array());
    }
  }
  auto find = [&](const std::string& id) {
    for (const auto& c : j["cases"])
      if (c["id"] == id) return c;
    return nlohmann::json();
  };
  const auto rms = find("patterns/rmsnorm/bf16/rows=32/h=2048");
  EXPECT_EQ(rms["suite"], "patterns");
  EXPECT_EQ(rms["phase"], "decode");
  EXPECT_DOUBLE_EQ(rms["attrs"]["eps"].get<double>(), 1e-5);
  EXPECT_EQ(rms["inputs"][0]["name"], "x");
  EXPECT_EQ(rms["inputs"][1]["name"], "w");
  EXPECT_EQ(rms["inputs"][1]["shape"], nlohmann::json::array({2048}));
  EXPECT_EQ(find("micro/log2/bf16/rows=32/h=2048")["attrs"]["positive"], 1);
  EXPECT_EQ(find("micro/sqrt/bf16/rows=32/h=2048")["attrs"]["positive"], 1);
  EXPECT_EQ(find("micro/mod/bf16/rows=32/h=2048")["attrs"]["positive_b"], 1);
  EXPECT_EQ(find("micro/less_than/bf16/rows=32/h=2048")["outputs"][0]["dtype"], "bool");
  const auto gather = find("micro/gather/bf16/rows=32/h=2048");
  EXPECT_EQ(gather["inputs"][0]["name"], "table");
  EXPECT_EQ(gather["inputs"][0]["shape"], nlohmann::json::array({32000, 2048}));
  EXPECT_EQ(gather["inputs"][1]["dtype"], "i32");
  const auto attn = find("patterns/attention/bf16/rows=32/h=2048");
  EXPECT_EQ(attn["attrs"]["causal"], 1);
  EXPECT_EQ(attn["attrs"]["hq"], 32);
  EXPECT_EQ(attn["attrs"]["hkv"], 4);
  EXPECT_EQ(attn["attrs"]["d"], 64);
  EXPECT_DOUBLE_EQ(attn["attrs"]["scale"].get<double>(), 0.125);
  EXPECT_EQ(attn["inputs"][1]["shape"], nlohmann::json::array({2048, 4, 64}));
  EXPECT_EQ(find("patterns/add_rmsnorm/bf16/rows=32/h=2048")["outputs"].size(), 2u);
  EXPECT_EQ(find("patterns/matmul/bf16/rows=32/h=2048")["inputs"][1]["shape"], nlohmann::json::array({5632, 2048}));
}

TEST(BenchSuite, CheckPlanSamplesRows) {
  auto small = MakeOpCase("rmsnorm", DType::kBF16, 32, 2048);
  ASSERT_TRUE(small.ok());
  auto p = PlanCheck(*small, 16);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->rows.size(), 32u);
  EXPECT_EQ(p->reference.id, small->id);

  auto big = MakeOpCase("rmsnorm", DType::kBF16, 16384, 2048);
  ASSERT_TRUE(big.ok());
  p = PlanCheck(*big, 16);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->rows.size(), 16u);
  EXPECT_EQ(p->rows.front(), 0);
  EXPECT_EQ(p->rows.back(), 16383);
  for (size_t i = 1; i < p->rows.size(); ++i) EXPECT_LT(p->rows[i - 1], p->rows[i]);
  EXPECT_EQ(p->reference.rows, 16);
  EXPECT_EQ(p->reference.inputs[0].shape, (std::vector<int64_t>{16, 2048}));
  EXPECT_EQ(p->reference.inputs[1].shape, (std::vector<int64_t>{2048}));

  // Attention: the last 16 query rows over all 2048 keys.
  auto attn = MakeOpCase("attention", DType::kBF16, 2048, 2048);
  ASSERT_TRUE(attn.ok());
  p = PlanCheck(*attn, 16);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->rows.size(), 16u);
  EXPECT_EQ(p->rows.front(), 2032);
  EXPECT_EQ(p->rows.back(), 2047);
  EXPECT_EQ(p->reference.kv_len, 2048);
  EXPECT_EQ(p->reference.inputs[0].shape, (std::vector<int64_t>{16, 32, 64}));
  EXPECT_EQ(p->reference.inputs[1].shape, (std::vector<int64_t>{2048, 4, 64}));
}

TEST(BenchSuite, RandomCheckRowsDifferPerSeed) {
  auto big = MakeOpCase("rmsnorm", DType::kBF16, 16384, 2048);
  ASSERT_TRUE(big.ok());
  auto a = PlanCheck(*big, 16, 1), a2 = PlanCheck(*big, 16, 1), b = PlanCheck(*big, 16, 2);
  ASSERT_TRUE(a.ok() && a2.ok() && b.ok());
  ASSERT_EQ(a->rows.size(), 16u);
  EXPECT_EQ(a->rows, a2->rows);  // reproducible from the seed
  EXPECT_NE(a->rows, b->rows);
  for (size_t i = 1; i < a->rows.size(); ++i) EXPECT_LT(a->rows[i - 1], a->rows[i]);
  EXPECT_GE(a->rows.front(), 0);
  EXPECT_LT(a->rows.back(), 16384);
  EXPECT_EQ(a->reference.rows, 16);
  // Not the fixed spread (a kernel that knows it computes only those rows).
  auto spread = PlanCheck(*big, 16);
  EXPECT_NE(a->rows, spread->rows);
  // Attention keeps the last query rows (the reference is exact only there).
  auto attn = MakeOpCase("attention", DType::kBF16, 2048, 2048);
  auto pa = PlanCheck(*attn, 16, 7);
  ASSERT_TRUE(pa.ok());
  EXPECT_EQ(pa->rows.front(), 2032);
}

TEST(BenchSuite, FillDistributions) {
  constexpr int64_t kRows = 64, kLen = 1024, kN = kRows * kLen;
  auto stats = [&](Dist d, bool positive) {
    std::vector<double> row_mean(kRows, 0), row_sq(kRows, 0);
    double big = 0, sum = 0, sq = 0, lo = 1e30;
    for (int64_t i = 0; i < kN; ++i) {
      const double v = FillValue(d, 12345, i, kLen, positive);
      EXPECT_TRUE(std::isfinite(v));
      row_mean[i / kLen] += v / kLen;
      row_sq[i / kLen] += v * v / kLen;
      big += std::fabs(v) >= 16;
      sum += v, sq += v * v, lo = std::min(lo, v);
    }
    double smin = 1e30, smax = 0, mmin = 1e30, mmax = -1e30;
    for (int r = 0; r < kRows; ++r) {
      const double sd = std::sqrt(std::max(row_sq[r] - row_mean[r] * row_mean[r], 0.0));
      smin = std::min(smin, sd), smax = std::max(smax, sd);
      mmin = std::min(mmin, row_mean[r]), mmax = std::max(mmax, row_mean[r]);
    }
    return std::map<std::string, double>{{"big", big / kN}, {"mean", sum / kN}, {"sd", std::sqrt(sq / kN - sum * sum / kN / kN)},
                                         {"row_sd_ratio", smax / smin}, {"row_mean_spread", mmax - mmin}, {"min", lo}};
  };
  auto u = stats(Dist::kUniform, false);
  EXPECT_NEAR(u["sd"], 1 / std::sqrt(3.0), 0.01);
  EXPECT_EQ(u["big"], 0);
  EXPECT_LT(u["row_sd_ratio"], 1.2);
  auto rs = stats(Dist::kRowScaled, false);
  EXPECT_GT(rs["row_sd_ratio"], 4);      // scales 2^[-2, 2) per row
  EXPECT_GT(rs["row_mean_spread"], 1);   // offsets in [-1, 1) per row
  auto out = stats(Dist::kOutliers, false);
  EXPECT_GT(out["big"], 0.5 / 256);
  EXPECT_LT(out["big"], 2.0 / 256);
  auto nrm = stats(Dist::kNormal, false);
  EXPECT_NEAR(nrm["sd"], 3, 0.1);
  EXPECT_NEAR(nrm["mean"], 0, 0.05);
  EXPECT_GE(stats(Dist::kNormal, true)["min"], 0.5);  // |v| + 0.5 for log/sqrt inputs
  EXPECT_STREQ(DistName(Dist::kRowScaled), "row-scaled");
}

TEST(BenchSuite, RowwiseRelativeError) {
  HostTensor ref(DType::kF32, {4, 8}), out(DType::kF32, {4, 8});
  for (int64_t i = 0; i < 32; ++i) ref.set(i, 1.0 + i), out.set(i, 1.0 + i);
  EXPECT_EQ(RowwiseRelativeError(out, ref).worst, 0);
  out.set(2 * 8 + 3, 1.0 + 19 + 0.5);  // row 2 off by 0.5
  RowError e = RowwiseRelativeError(out, ref);
  EXPECT_EQ(e.row, 2);
  double norm = 0;
  for (int k = 0; k < 8; ++k) norm += (17.0 + k) * (17.0 + k);
  EXPECT_NEAR(e.worst, 0.5 / std::sqrt(norm), 1e-12);
  out.set(3 * 8, std::numeric_limits<double>::quiet_NaN());
  e = RowwiseRelativeError(out, ref);
  EXPECT_EQ(e.row, 3);
  EXPECT_TRUE(std::isinf(e.worst));
  // A row of zeros in the reference: the floor (1e-3 of the RMS row norm) keeps noise finite and small.
  HostTensor z(DType::kF32, {2, 4}), zo(DType::kF32, {2, 4});
  for (int64_t i = 0; i < 4; ++i) z.set(i, 100), zo.set(i, 100), z.set(4 + i, 0), zo.set(4 + i, 1e-9);
  e = RowwiseRelativeError(zo, z);
  EXPECT_EQ(e.row, 1);
  EXPECT_LT(e.worst, 1e-6);
  // Other shapes are an infinite error.
  EXPECT_TRUE(std::isinf(RowwiseRelativeError(HostTensor(DType::kF32, {4, 8}), HostTensor(DType::kF32, {8, 4})).worst));
}

// The last 16 query rows of a T = S causal attention are exactly attention with T = 16 over the
// same S keys: check it on the CPU reference, so the GPU check's sampling is sound.
TEST(BenchSuite, AttentionSampleEqualsFullRows) {
  auto full = MakeOpCase("attention", DType::kF32, 80, 2048, 80);
  ASSERT_TRUE(full.ok());
  auto p = PlanCheck(*full, 16);
  ASSERT_TRUE(p.ok());
  auto g = ParseGraph(full->graph);
  auto gs = ParseGraph(p->reference.graph);
  ASSERT_TRUE(g.ok() && gs.ok());
  auto in = RandomInputs(*g, {}, 7);
  auto out = RunGraphCpu(*g, in);
  ASSERT_TRUE(out.ok()) << out.status().message();
  std::map<std::string, HostTensor> sub = in;
  HostTensor q(DType::kF32, {16, 32, 64});
  const size_t row = 32 * 64 * 4;
  std::memcpy(q.data.data(), in.at("q").data.data() + 64 * row, 16 * row);
  sub["q"] = q;
  auto out_s = RunGraphCpu(*gs, sub);
  ASSERT_TRUE(out_s.ok()) << out_s.status().message();
  HostTensor want(DType::kF32, {16, 32, 64});
  std::memcpy(want.data.data(), out->at("y").data.data() + 64 * row, 16 * row);
  EXPECT_EQ(RelativeError(out_s->at("y"), want), 0.0);
}

TEST(BenchSuite, RelativeErrorAndBounds) {
  HostTensor a(DType::kF32, {4}), b(DType::kF32, {4});
  for (int i = 0; i < 4; ++i) a.set(i, i + 1), b.set(i, i + 1);
  EXPECT_EQ(RelativeError(a, b), 0.0);
  a.set(0, 2);  // error 1 against norm sqrt(30)
  EXPECT_NEAR(RelativeError(a, b), 1.0 / std::sqrt(30.0), 1e-12);
  a.set(0, std::nan(""));
  EXPECT_TRUE(std::isinf(RelativeError(a, b)));
  a.set(0, std::numeric_limits<double>::infinity());
  b.set(0, std::numeric_limits<double>::infinity());
  EXPECT_EQ(RelativeError(a, b), 0.0);  // equal infinities are exact
  HostTensor c(DType::kF32, {5});
  EXPECT_TRUE(std::isinf(RelativeError(c, b)));  // shape mismatch
  EXPECT_EQ(ErrorBound(DType::kBool, "less_than"), 0.0);
  EXPECT_GT(ErrorBound(DType::kBF16, "rmsnorm"), ErrorBound(DType::kF16, "rmsnorm"));
  EXPECT_GT(ErrorBound(DType::kF32, "matmul"), ErrorBound(DType::kF32, "exp2"));
}

// Every decode case at rows = 1 runs on the CPU reference (what the GPU check runs).
TEST(BenchSuite, SmallCasesRunOnCpuReference) {
  SuiteFilter f;
  f.rows = {1};
  f.widths = {2048, 5632};
  auto s = BuildOpSuite(f);
  ASSERT_TRUE(s.ok());
  for (const auto& c : s->cases) {
    if (c.op == "gather") continue;  // a 32000-row table: covered by the GPU run, slow here
    auto g = ParseGraph(c.graph);
    ASSERT_TRUE(g.ok()) << c.id;
    auto out = RunGraphCpu(*g, RandomInputs(*g, {}, 1));
    ASSERT_TRUE(out.ok()) << c.id << ": " << out.status().message();
    EXPECT_EQ(out->size(), c.outputs.size()) << c.id;
  }
}

TEST(BenchSuite, RandomShapesSpec) {
  auto a = ParseRandomShapes("random:40");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->count, 40);
  EXPECT_FALSE(a->seed.has_value());
  auto b = ParseRandomShapes("random:3:12345");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->count, 3);
  EXPECT_EQ(b->seed.value_or(0), 12345u);
  for (const char* bad : {"", "random", "random:", "random:0", "random:-4", "random:x", "random:4:", "random:4:-1",
                          "random:4:1:2", "grid:4", "random:10001", "random:4:99999999999999999999"}) {
    auto r = ParseRandomShapes(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("random:N"), std::string::npos) << r.status().message();
  }
}

TEST(BenchSuite, ShapeListSpec) {
  auto a = ParseShapeList("172x169249,1x7,61x49152");
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_EQ(a->size(), 3u);
  EXPECT_EQ((*a)[0].rows, 172);
  EXPECT_EQ((*a)[0].width, 169249);
  EXPECT_EQ((*a)[1].rows, 1);
  EXPECT_EQ((*a)[1].width, 7);
  EXPECT_EQ((*a)[2].width, 49152);
  for (const char* bad : {"", ",", "172", "172x", "x5", "0x5", "5x0", "5x-1", "5x5,", "5x5,,6x6", "5y5", "5x5x5", "65536x262144"}) {
    auto r = ParseShapeList(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--shapes"), std::string::npos) << r.status().message();
  }
}

bool IsPrime(int64_t v) {
  if (v < 2) return false;
  for (int64_t d = 2; d * d <= v; ++d)
    if (v % d == 0) return false;
  return true;
}

TEST(BenchSuite, RandomShapesCoverTheRangesAndRepeatPerSeed) {
  const auto a = RandomShapes(600, 7), b = RandomShapes(600, 7), c = RandomShapes(600, 8);
  ASSERT_EQ(a.size(), 600u);
  int same = 0, primes = 0, odd = 0, model = 0, wide = 0, narrow = 0, one_row = 0, many_rows = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].rows, b[i].rows);
    EXPECT_EQ(a[i].width, b[i].width);
    same += a[i].rows == c[i].rows && a[i].width == c[i].width;
    EXPECT_GE(a[i].width, 1);
    EXPECT_LE(a[i].width, kMaxRandomWidth);
    EXPECT_GE(a[i].rows, 1);
    EXPECT_LE(a[i].rows, kMaxRandomRows);
    EXPECT_TRUE(a[i].rows * a[i].width <= kMaxRandomElements || a[i].rows == 1) << a[i].rows << "x" << a[i].width;
    primes += a[i].width > 2 && IsPrime(a[i].width);
    odd += a[i].width % 2;
    model += a[i].width == 4096 || a[i].width == 14336 || a[i].width == 128256 || a[i].width == 3584;
    wide += a[i].width >= 32000;
    narrow += a[i].width <= 64;
    one_row += a[i].rows == 1;
    many_rows += a[i].rows >= 4096;
  }
  EXPECT_LT(same, 30) << "another seed draws other shapes";
  EXPECT_GT(primes, 100);
  EXPECT_GT(odd, 150);
  EXPECT_GT(model, 10);
  EXPECT_GT(wide, 50);
  EXPECT_GT(narrow, 10);
  EXPECT_GT(one_row, 10);
  EXPECT_GT(many_rows, 50);
}

TEST(BenchSuite, RandomSweepCasesParseAndRunOnCpuReference) {
  SuiteFilter f;
  f.shapes = {{3, 7}, {1, 4999}, {5, 3}, {2, 2048}, {2, 2048}};
  f.shapes_spec = "random:5:1";
  auto s = BuildOpSuite(f);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->shapes, "random:5:1");
  EXPECT_EQ(SuiteToJson(*s).value("shapes", ""), "random:5:1");
  std::set<std::string> ops;
  for (const auto& c : s->cases) ops.insert(c.op);
  EXPECT_EQ(ops.size(), SweepOps().size());
  // 4 distinct shapes x 9 ops, less causal softmax at 5 x 3 (rows > width: skipped with the reason).
  EXPECT_EQ(s->cases.size(), 4 * SweepOps().size() - 1);
  ASSERT_EQ(s->skipped.size(), 1u);
  EXPECT_NE(s->skipped[0].reason.find("rows <= width"), std::string::npos) << s->skipped[0].reason;
  for (const auto& c : s->cases) {
    auto g = ParseGraph(c.graph);
    ASSERT_TRUE(g.ok()) << c.id << ": " << g.status().message() << "\n" << c.graph;
    auto out = RunGraphCpu(*g, RandomInputs(*g, {}, 3));
    ASSERT_TRUE(out.ok()) << c.id << ": " << out.status().message();
    ASSERT_EQ(out->size(), c.outputs.size()) << c.id;
    for (const auto& o : c.outputs) {
      const HostTensor& t = out->at(o.name);
      EXPECT_EQ(t.shape, o.shape) << c.id;
      for (int64_t i = 0; i < t.numel(); ++i) ASSERT_TRUE(std::isfinite(t.get(i))) << c.id << " element " << i;
    }
  }
  // logsumexp is the real thing: log(sum(exp(x))) per row.
  auto lse = MakeOpCase("logsumexp", DType::kF32, 2, 5);
  ASSERT_TRUE(lse.ok());
  auto g = ParseGraph(lse->graph);
  ASSERT_TRUE(g.ok());
  auto in = RandomInputs(*g, {}, 5);
  auto out = RunGraphCpu(*g, in);
  ASSERT_TRUE(out.ok()) << out.status().message();
  for (int r = 0; r < 2; ++r) {
    double sum = 0;
    for (int c = 0; c < 5; ++c) sum += std::exp(in.at("x").get(r * 5 + c));
    EXPECT_NEAR(out->at("y").get(r), std::log(sum), 1e-5);
  }
  // Causal softmax checks its last rows against a case of that many rows: the same mask.
  auto causal = MakeOpCase("softmax_causal", DType::kF32, 40, 64);
  ASSERT_TRUE(causal.ok());
  EXPECT_FALSE(causal->rows_independent);
  f.shapes = {{4, 4}};
  f.rows = {4};
  EXPECT_FALSE(BuildOpSuite(f).ok()) << "--shapes with --rows is refused";
}

TEST(BenchSuite, ParseIntList) {
  auto v = ParseIntList("1,8,32", "--rows");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, (std::vector<int64_t>{1, 8, 32}));
  for (const char* bad : {"", "1,,2", "a", "1,-2", "0", "3x"}) {
    auto r = ParseIntList(bad, "--rows");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    if (!r.ok()) { EXPECT_NE(r.status().message().find("--rows"), std::string::npos); }
  }
}

}  // namespace
}  // namespace opfuse::bench
