// `opfuse profile`'s host side: the model's fused groups cut out as benchmark cases
// (bench/group_cases.h), measured cases turned into profile entries, resuming, and the validation
// of smart's choice (bench/profile_build.h); plus the CLI's GPU-free modes (--list-cases,
// --validate) and its errors. The validation numbers here are hand-written test inputs, not
// measurements (the measured profile is examples/profiles/, written on the GPU).
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "bench/builtin_graphs.h"
#include "bench/group_cases.h"
#include "bench/profile_build.h"
#include "cli_runner.h"
#include "pass_test_util.h"

namespace opfuse::testing {
namespace {

Graph Layer() {
  auto g = ParseGraph(bench::kLlamaDecoderLayerOfg);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return *g;
}

// The layer's groups as `opfuse profile` finds them: bf16 matmuls join fuse_matmul's groups (the
// norms, RoPE and SwiGLU with them); `patterns`: with fuse_matmul off (`--disable fuse_matmul`), the
// pattern groups on their own.
bench::GroupCases Extract(std::vector<int64_t> rows, std::vector<DType> dts = {DType::kBF16}, bool patterns = false) {
  bench::GroupCaseOptions o;
  o.values = std::move(rows);
  o.dtypes = std::move(dts);
  if (patterns) o.config.disabled.insert("fuse_matmul");
  auto c = bench::ExtractGroupCases(Layer(), o);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : bench::GroupCases{};
}

const bench::GroupCase* Find(const bench::GroupCases& c, const std::string& pattern, int64_t rows) {
  for (const auto& x : c.cases)
    if (x.key.pattern == pattern && x.key.rows == rows) return &x;
  return nullptr;
}

TEST(ProfileCases, BuiltinLayerMatchesTheExampleFile) {
  EXPECT_EQ(std::string(bench::kLlamaDecoderLayerOfg),
            ReadFile(std::string(OPFUSE_SOURCE_DIR) + "/examples/graphs/llama_decoder_layer.ofg"));
}

TEST(ProfileCases, LlamaLayerMatmulGroupsAndKeys) {
  const auto c = Extract({1, 2, 128});
  // input norm + q, k, v + RoPE on q and k; post-attention add_rms_norm + gate, up + SwiGLU
  ASSERT_EQ(c.groups.size(), 2u);
  EXPECT_TRUE(c.skipped.empty()) << c.skipped.front().id << ": " << c.skipped.front().reason;
  EXPECT_EQ(c.cases.size(), 6u);
  // keys follow should_fuse's DescribeGroup: the kind and K, cols = the matmuls' columns together
  const auto* qkv = Find(c, "matmul:norm_siblings_rope:k2048", 2);
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->key.cols, 2048 + 256 + 256);
  EXPECT_EQ(qkv->c.phase, "decode");
  EXPECT_TRUE(qkv->c.unfused_is_library_ops);
  const auto* mlp = Find(c, "matmul:norm_swiglu:k2048", 128);
  ASSERT_NE(mlp, nullptr);
  EXPECT_EQ(mlp->key.cols, 2 * 5632);
  EXPECT_EQ(mlp->c.phase, "prefill");
  EXPECT_TRUE(mlp->c.unfused_is_library_ops);
  // the weights are inputs of the case, with their own shapes; the activations lead with the rows
  bool saw_weight = false;
  for (const auto& t : mlp->c.inputs)
    if (!t.rows_leading) saw_weight = saw_weight || (t.shape == std::vector<int64_t>{5632, 2048});
  EXPECT_TRUE(saw_weight);
  // the remade (check) case keeps the flag: its unfused variant is the same alternative
  auto small = mlp->c.remake(3);
  ASSERT_TRUE(small.ok()) << small.status().message();
  EXPECT_TRUE(small->unfused_is_library_ops);
  // a matmul case has no JIT form; its unfused and library variants apply
  EXPECT_FALSE(bench::VariantApplies(*mlp, "jit"));
  EXPECT_TRUE(bench::VariantApplies(*mlp, "unfused"));
  EXPECT_TRUE(bench::VariantApplies(*mlp, "library"));
  // f32 matmuls are not GEMV groups: the pattern groups stay cases of their own there
  const auto f = Extract({1}, {DType::kF32});
  EXPECT_EQ(f.groups.size(), 5u);
  EXPECT_NE(Find(f, "swiglu", 1), nullptr);
  EXPECT_TRUE(bench::VariantApplies(*Find(f, "swiglu", 1), "jit"));
}

TEST(ProfileCases, LlamaLayerGroupsAndKeys) {
  const auto c = Extract({1, 128}, {DType::kBF16}, /*patterns=*/true);
  // rms_norm, rope (q), rope (k), add_rms_norm, swiglu
  ASSERT_EQ(c.groups.size(), 5u);
  EXPECT_TRUE(c.skipped.empty()) << c.skipped.front().id << ": " << c.skipped.front().reason;
  // keys follow should_fuse's DescribeGroup: rows = product of the widest output's leading dims
  const auto* n1 = Find(c, "rms_norm", 1);
  ASSERT_NE(n1, nullptr);
  EXPECT_EQ(n1->key.cols, 2048);
  EXPECT_EQ(n1->key.dtype, "bf16");
  EXPECT_EQ(n1->c.phase, "decode");
  ASSERT_NE(Find(c, "rms_norm", 128), nullptr);
  EXPECT_EQ(Find(c, "rms_norm", 128)->c.phase, "prefill");
  const auto* rq = Find(c, "rope", 32);  // q: [T=1, 32 heads, 64]
  ASSERT_NE(rq, nullptr);
  EXPECT_EQ(rq->key.cols, 64);
  EXPECT_NE(Find(c, "rope", 4), nullptr);      // k at T=1: 4 kv heads
  EXPECT_NE(Find(c, "rope", 4096), nullptr);   // q at T=128
  EXPECT_NE(Find(c, "rope", 512), nullptr);    // k at T=128
  const auto* sw = Find(c, "swiglu", 128);
  ASSERT_NE(sw, nullptr);
  EXPECT_EQ(sw->key.cols, 5632);
  const auto* arn = Find(c, "add_rms_norm", 1);
  ASSERT_NE(arn, nullptr);
  EXPECT_EQ(arn->c.outputs.size(), 2u);  // the normed value and the residual sum (used by the final add)
  EXPECT_EQ(c.cases.size(), 10u);        // 5 groups x 2 row counts, no duplicate keys here
}

TEST(ProfileCases, DuplicateKeysAreMeasuredOnce) {
  // rope k at T=8 is [8, 4, 64]: rows 32, cols 64 — the same key as rope q at T=1.
  const auto c = Extract({1, 8}, {DType::kBF16}, true);
  int rope32 = 0;
  for (const auto& x : c.cases) rope32 += x.key.pattern == "rope" && x.key.rows == 32;
  EXPECT_EQ(rope32, 1);
}

TEST(ProfileCases, CaseGraphsAreStaticRunnableAndShrinkForTheCheck) {
  const auto c = Extract({128});
  for (const auto& gc : c.cases) {
    SCOPED_TRACE(gc.c.id);
    auto g = ParseGraph(gc.c.graph);
    ASSERT_TRUE(g.ok()) << g.status().message() << "\n" << gc.c.graph;
    EXPECT_TRUE(g->Symbols().empty());
    ASSERT_TRUE(gc.c.remake);
    auto small = gc.c.remake(3);
    ASSERT_TRUE(small.ok()) << small.status().message();
    ASSERT_EQ(small->inputs.size(), gc.c.inputs.size());
    for (size_t i = 0; i < gc.c.inputs.size(); ++i) {
      EXPECT_EQ(small->inputs[i].name, gc.c.inputs[i].name);
      if (gc.c.inputs[i].rows_leading) {
        EXPECT_EQ(gc.c.inputs[i].shape[0], 128);
        EXPECT_EQ(small->inputs[i].shape[0], 3);
      } else {
        EXPECT_EQ(small->inputs[i].shape, gc.c.inputs[i].shape);  // weights keep their shape
      }
    }
    // the check plan of a 128-row case samples rows through remake
    auto plan = bench::PlanCheck(gc.c, 16);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    EXPECT_EQ(plan->rows.size(), 16u);
    EXPECT_EQ(plan->reference.rows, 16);
    // bytes: every input and output once
    int64_t bytes = 0;
    for (const auto& t : gc.c.inputs) bytes += t.nbytes();
    for (const auto& t : gc.c.outputs) bytes += t.nbytes();
    EXPECT_EQ(gc.c.bytes, bytes);
  }
}

TEST(ProfileCases, RetypedDtypes) {
  const auto c = Extract({1}, {DType::kBF16, DType::kF32});
  ASSERT_NE(Find(c, "matmul:norm_swiglu:k2048", 1), nullptr);
  ASSERT_NE(Find(c, "swiglu", 1), nullptr);
  int f32 = 0;
  for (const auto& x : c.cases)
    if (x.key.dtype == "f32") {
      ++f32;
      for (const auto& t : x.c.inputs) EXPECT_EQ(t.dtype, DType::kF32) << x.c.id;
    }
  EXPECT_EQ(f32, 5);
}

TEST(ProfileCases, Errors) {
  bench::GroupCaseOptions o;
  o.values = {1};
  o.symbol = "S";
  auto r = bench::ExtractGroupCases(Layer(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no symbol 'S'"), std::string::npos) << r.status().message();
  o.symbol = "T";
  o.values = {0};
  EXPECT_FALSE(bench::ExtractGroupCases(Layer(), o).ok());
  o.values = {};
  EXPECT_FALSE(bench::ExtractGroupCases(Layer(), o).ok());
  // a graph with nothing to fuse
  auto single = ParseGraph("graph g\ninput x: f32[T, 8]\ny = exp(x)\noutput y\n");
  ASSERT_TRUE(single.ok());
  o.values = {4};
  auto none = bench::ExtractGroupCases(*single, o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no fusible group"), std::string::npos) << none.status().message();
}

bench::CaseResult Result(const std::string& id, std::vector<std::tuple<std::string, double, bool>> vs) {
  bench::CaseResult r;
  r.id = id;
  for (auto& [name, us, ok] : vs) {
    bench::VariantResult v;
    v.name = name;
    v.us = us;
    v.samples = 30;
    v.correct = ok;
    if (!ok) v.check_error = "rel_err 1e+00 > 3e-02";
    r.variants.push_back(v);
  }
  return r;
}

TEST(ProfileBuild, EntryKeepsOnlyCorrectMeasuredVariants) {
  const auto c = Extract({1}, {DType::kBF16}, true);
  const auto* gc = Find(c, "rms_norm", 1);
  ASSERT_NE(gc, nullptr);
  std::vector<std::string> warnings;
  auto e = bench::ProfileEntryFor(*gc, Result(gc->c.id, {{"unfused", 9.0, true}, {"library", 2.0, true}, {"jit", 1.5, false}}),
                                  &warnings);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->pattern, "rms_norm");
  EXPECT_EQ(e->rows, 1);
  EXPECT_EQ(e->cols, 2048);
  EXPECT_EQ(e->unfused_us, 9.0);
  EXPECT_EQ(e->library_us, 2.0);
  EXPECT_FALSE(e->jit_us.has_value());  // wrong result: never a fast entry
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("wrong result"), std::string::npos) << warnings[0];
  warnings.clear();
  EXPECT_FALSE(bench::ProfileEntryFor(*gc, Result(gc->c.id, {{"unfused", 9.0, false}}), &warnings).has_value());
  EXPECT_EQ(warnings.size(), 2u);
}

scheduler::ProfileDb DbFor(const bench::GroupCases& c, const std::function<std::tuple<double, double, double>(const bench::GroupCase&)>& us) {
  scheduler::ProfileDb db;
  db.device = {"Test GPU (hand-written numbers)", "9.0", "", 3000, 2};
  for (const auto& gc : c.cases) {
    auto [u, l, j] = us(gc);
    scheduler::ProfileEntry e;
    e.pattern = gc.key.pattern;
    e.dtype = gc.key.dtype;
    e.rows = gc.key.rows;
    e.cols = gc.key.cols;
    e.unfused_us = u;
    e.library_us = l;
    e.jit_us = j;
    db.entries.push_back(e);
  }
  return db;
}

TEST(ProfileBuild, ResumeSkipsMeasuredCases) {
  const auto c = Extract({1, 2}, {DType::kBF16}, true);
  auto db = DbFor(c, [](const bench::GroupCase&) { return std::tuple{5.0, 2.0, 2.5}; });
  EXPECT_TRUE(bench::RemainingCases(c.cases, db, {"unfused", "library", "jit"}).empty());
  db.entries[0].jit_us.reset();
  auto rest = bench::RemainingCases(c.cases, db, {"unfused", "library", "jit"});
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].key, c.cases[0].key);
  EXPECT_TRUE(bench::RemainingCases(c.cases, db, {"unfused", "library"}).empty());
  EXPECT_EQ(bench::RemainingCases(c.cases, scheduler::ProfileDb{}, {"jit"}).size(), c.cases.size());
}

TEST(ProfileBuild, MatmulGroupsAreDoneWithoutJitAndDeclinedMeansOpsOneByOne) {
  const auto c = Extract({1, 2, 4});
  ASSERT_EQ(c.cases.size(), 6u);
  // Hand-written: the fused group wins at 1 and 2 rows, its ops one by one at 4 (norm_swiglu only).
  auto db = DbFor(c, [](const bench::GroupCase& gc) {
    const bool split = gc.key.pattern == "matmul:norm_swiglu:k2048" && gc.key.rows == 4;
    return std::tuple{split ? 20.0 : 30.0, split ? 26.0 : 21.0, 0.0};
  });
  for (auto& e : db.entries) e.jit_us.reset();  // never measured for a matmul group
  EXPECT_TRUE(bench::RemainingCases(c.cases, db, {"unfused", "library", "jit"}).empty());
  db.entries[0].unfused_us.reset();
  EXPECT_EQ(bench::RemainingCases(c.cases, db, {"unfused", "library", "jit"}).size(), 1u);
  db.entries[0].unfused_us = 30.0;
  bench::GroupCaseOptions o;
  o.values = {1, 2, 4};
  auto v = bench::ValidateProfile(Layer(), o, c.cases, db);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->points, 6);
  EXPECT_EQ(v->within, 6);
  bool saw_split = false;
  for (const auto& row : v->rows) {
    const bool split = row.key.pattern == "matmul:norm_swiglu:k2048" && row.key.rows == 4;
    EXPECT_EQ(row.best, split ? "unfused" : "library") << row.key.ToString();
    EXPECT_EQ(row.smart, split ? "unfused" : "library") << row.key.ToString();  // declined: its ops one by one
    saw_split = saw_split || split;
  }
  EXPECT_TRUE(saw_split);
}

TEST(ProfileBuild, ValidationPicksUnfusedWhereFusionLoses) {
  const auto c = Extract({1, 2, 4, 8}, {DType::kBF16}, true);
  // Hand-written: fused wins everywhere except swiglu, where unfused is fastest at every row count,
  // and rms_norm's JIT kernel is 50% slower than the library kernel.
  auto db = DbFor(c, [](const bench::GroupCase& gc) {
    const double r = static_cast<double>(gc.key.rows);
    if (gc.key.pattern == "swiglu") return std::tuple{3.0 + 0.01 * r, 4.0 + 0.01 * r, 4.5 + 0.01 * r};
    if (gc.key.pattern == "rms_norm") return std::tuple{8.0 + r, 2.0 + 0.1 * r, 3.0 + 0.15 * r};
    return std::tuple{6.0 + r, 2.0 + 0.1 * r, 2.1 + 0.1 * r};
  });
  bench::GroupCaseOptions o;
  o.values = {1, 2, 4, 8};
  o.config.disabled.insert("fuse_matmul");
  auto v = bench::ValidateProfile(Layer(), o, c.cases, db);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->points, static_cast<int>(c.cases.size()));
  EXPECT_EQ(v->within, v->points);
  EXPECT_LE(v->worst_ratio, 1.03);
  bool saw_swiglu = false, saw_rms = false;
  for (const auto& row : v->rows) {
    if (row.key.pattern == "swiglu") {
      saw_swiglu = true;
      EXPECT_EQ(row.best, "unfused");
      EXPECT_EQ(row.smart, "unfused");
      EXPECT_NE(row.fusion_loses.find("unfused"), std::string::npos) << row.fusion_loses;
      if (row.key.rows == 2 || row.key.rows == 4) {  // interior points: left out, the neighbours decide
        EXPECT_EQ(row.smart_loo, "unfused") << row.reason_loo;
        EXPECT_EQ(row.source_loo, "profile");
      }
    }
    if (row.key.pattern == "rms_norm") {
      saw_rms = true;
      EXPECT_EQ(row.smart, "library");
      EXPECT_NE(row.fusion_loses.find("jit"), std::string::npos) << row.fusion_loses;
    }
  }
  EXPECT_TRUE(saw_swiglu && saw_rms);
  const std::string md = bench::ValidationMarkdown(*v);
  EXPECT_NE(md.find("| swiglu | bf16 |"), std::string::npos) << md;
  EXPECT_EQ(bench::ValidationJson(*v)["points"], v->points);
}

// ---------------------------------------------------------------- CLI (no GPU needed)
using Cli = CliResult;
Cli RunCli(const std::string& args) { return RunOpfuseCli(args, "profile"); }

TEST(ProfileCli, ListCases) {
  Cli c = RunCli("profile --list-cases --rows 1,64");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("2 fusible groups"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("profile/matmul:norm_swiglu:k2048/bf16/rows=64/cols=11264"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("4 cases"), std::string::npos) << c.out;
  Cli p = RunCli("profile --list-cases --rows 1,64 --disable fuse_matmul");
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("5 fusible groups"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("profile/add_rms_norm/bf16/rows=64/cols=2048"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("10 cases"), std::string::npos) << p.out;
}

TEST(ProfileCli, ValidateAnExistingProfile) {
  const auto c = Extract({1, 2});
  auto db = DbFor(c, [](const bench::GroupCase&) { return std::tuple{5.0, 2.0, 2.5}; });
  const std::string path = ::testing::TempDir() + "opfuse_profile_validate.json";
  ASSERT_TRUE(db.Save(path).ok());
  Cli r = RunCli("profile --validate --rows 1,2 --json --out " + path);
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["validation"]["points"], 4);  // 2 matmul groups x 2 row counts
  EXPECT_EQ(j["validation"]["within"], 4);
  for (const auto& row : j["validation"]["rows"]) EXPECT_EQ(row["smart"], "library");
}

TEST(ProfileCli, BadInputExits2) {
  EXPECT_EQ(RunCli("profile --list-cases --rows 0").code, 2);
  EXPECT_EQ(RunCli("profile --list-cases --dtypes i32").code, 2);
  EXPECT_EQ(RunCli("profile --list-cases --variants fast").code, 2);
  EXPECT_EQ(RunCli("profile --list-cases --graph /nonexistent.ofg").code, 2);
  EXPECT_EQ(RunCli("profile --list-cases --symbol Q").code, 2);
  Cli missing = RunCli("profile --validate --out /nonexistent/profile.json");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("profile"), std::string::npos);
  const std::string bad = ::testing::TempDir() + "opfuse_profile_bad.json";
  std::ofstream(bad) << "{\"schema\": 1, \"device\": ";
  EXPECT_EQ(RunCli("profile --validate --out " + bad).code, 2);
}

TEST(ProfileCli, WithoutAGpuSaysSo) {
#ifdef OPFUSE_WITH_CUDA
  GTEST_SKIP() << "built with CUDA: a device may be present (the GPU run is in tools/gpu_check.sh)";
#endif
  const std::string out = ::testing::TempDir() + "opfuse_profile_nogpu.json";
  std::remove(out.c_str());
  Cli r = RunCli("profile --rows 1 --out " + out);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("no CUDA device"), std::string::npos) << r.err;
  std::ifstream f(out);
  EXPECT_FALSE(f.good());  // nothing written
}

}  // namespace
}  // namespace opfuse::testing
