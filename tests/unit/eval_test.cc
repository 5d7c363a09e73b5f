// `opfuse eval` host side (bench/eval.h): the problem suite loads (>= 30, both dtypes, both phases,
// every family of issue 7), problems become the right TensorSpecs (fills, row-leading, remake for
// the sampled check), the summary counts failures as 0, the baseline file is validated, and the CPU
// backend's trial protocol rejects planted wrong host candidates — zeros, half the output, an
// input mutation, a read of the (poisoned) output before writing it — while the reference passes.
#include <algorithm>
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "bench/eval.h"
#include "runtime/cpu/cpu_executor.h"

namespace opfuse::bench {
namespace {

const std::string kDir = std::string(OPFUSE_SOURCE_DIR) + "/eval/problems";

TEST(EvalProblems, SuiteCoversTheIssueList) {
  auto ps = LoadProblems(kDir);
  ASSERT_TRUE(ps.ok()) << ps.status().ToString();
  EXPECT_GE(ps->size(), 30u);
  std::set<std::string> names, dtypes, phases;
  for (const auto& p : *ps) {
    EXPECT_TRUE(names.insert(p.name).second) << p.name;
    dtypes.insert(DTypeName(p.c.dtype));
    phases.insert(p.c.phase);
    EXPECT_FALSE(p.description.empty()) << p.name;
    EXPECT_EQ(p.c.id, "eval/" + p.name);
    auto g = ParseGraph(p.c.graph);
    EXPECT_TRUE(g.ok()) << p.name;
    // Every problem can be checked: its reference plan (sampled rows for big ones) builds.
    auto plan = PlanCheck(p.c, 16);
    ASSERT_TRUE(plan.ok()) << p.name << ": " << plan.status().ToString();
    EXPECT_EQ(static_cast<int64_t>(plan->rows.size()), plan->reference.rows) << p.name;
  }
  EXPECT_EQ(dtypes, (std::set<std::string>{"bf16", "f32"}));
  EXPECT_EQ(phases, (std::set<std::string>{"decode", "prefill"}));
  for (const char* family : {"rms_norm_", "add_rms_norm_", "layer_norm_", "softmax_bf16", "softmax_scaled_", "softmax_masked_",
                             "swiglu_", "geglu_", "gelu_", "silu_", "rope_", "matmul_bias_", "matmul_gelu_", "matmul_silu_",
                             "matmul_residual_", "rms_norm_matmul_", "gemv_bf16_m1", "gemv_bf16_m16", "attention_bf16_prefill",
                             "attention_bf16_decode", "embedding_", "argmax_", "logsumexp_"}) {
    EXPECT_TRUE(std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(family, 0) == 0; }))
        << "no problem of family " << family;
  }
}

TEST(EvalProblems, SpecsFromTheGraph) {
  auto emb = ProblemFromText("emb_bf16_prefill", R"(graph e
param table: bf16[100, 64]
input ids: i32[128]
y = embedding(table, ids)
output y
)", "x.ofg");
  ASSERT_TRUE(emb.ok()) << emb.status().ToString();
  EXPECT_EQ(emb->c.inputs[1].fill, Fill::kIds);
  EXPECT_EQ(emb->c.inputs[1].id_range, 100);
  EXPECT_TRUE(emb->c.inputs[1].rows_leading);
  EXPECT_FALSE(emb->c.inputs[0].rows_leading);
  EXPECT_FALSE(emb->c.inputs[0].rotate);
  auto sampled = emb->c.remake(16);
  ASSERT_TRUE(sampled.ok()) << sampled.status().ToString();
  EXPECT_EQ(sampled->inputs[1].shape, (std::vector<int64_t>{16}));
  EXPECT_EQ(sampled->inputs[0].shape, (std::vector<int64_t>{100, 64}));

  auto pos = ProblemFromText("lg", "graph l\ninput x: f32[4, 8]\ny = log(x)\noutput y\n", "x.ofg");
  ASSERT_TRUE(pos.ok());
  EXPECT_EQ(pos->c.inputs[0].fill, Fill::kPositive);

  auto attn = ProblemFromText("attention_f32_x", R"(graph a
input q: f32[128, 4, 16]
param k: f32[256, 2, 16]
param v: f32[256, 2, 16]
y = attention(q, k, v) {causal=1}
output y
)", "x.ofg");
  ASSERT_TRUE(attn.ok());
  EXPECT_FALSE(attn->c.rows_independent);
  EXPECT_EQ(attn->c.op, "attention");

  EXPECT_EQ(ProblemFromText("sym", "graph s\ninput x: f32[T, 8]\ny = neg(x)\noutput y\n", "s.ofg").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ProblemFromText("ints", "graph s\ninput x: i32[4, 8]\ny = neg(x)\noutput y\n", "s.ofg").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ProblemFromText("Bad-Name", "graph s\ninput x: f32[4]\ny = neg(x)\noutput y\n", "s.ofg").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ProblemFromText("broken", "graph s\ninput x: f32[4]\ny = nosuchop(x)\noutput y\n", "s.ofg").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadProblems("/nonexistent/eval").status().code(), StatusCode::kNotFound);
}

TEST(EvalProblems, Select) {
  auto ps = LoadProblems(kDir);
  ASSERT_TRUE(ps.ok());
  auto two = SelectProblems(*ps, "gemv_bf16_m8,rms_norm_bf16_decode");
  ASSERT_TRUE(two.ok());
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].name, "gemv_bf16_m8");
  EXPECT_EQ(SelectProblems(*ps, "nope").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectProblems(*ps, "gemv_bf16_m8,gemv_bf16_m8").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectProblems(*ps, "gemv_bf16_m8,").status().code(), StatusCode::kInvalidArgument);
}

EvalResult Res(const std::string& name, bool correct, double us) {
  EvalResult r;
  r.problem = name;
  r.compiled = true;
  r.correct = correct;
  r.runtime_us = us;
  return r;
}

TEST(EvalSummary, FailuresCountZeroAndGeomeanOverCorrect) {
  nlohmann::json base = {{"schema", 1},
                         {"problems",
                          {{"a", {{"torch_eager", {{"us", 10.0}}}, {"opfuse_unfused", {{"us", 4.0}}}}},
                           {"b", {{"torch_eager", {{"us", 10.0}}}}},
                           {"c", {{"torch_eager", {{"us", 10.0}}}}},
                           {"d", {{"torch_eager", {{"us", 10.0}}}}}}}};
  std::vector<EvalResult> rs = {Res("a", true, 4.0), Res("b", true, 20.0), Res("c", false, kNaN), Res("d", true, 0.5)};
  ApplyBaseline(base, rs);
  EXPECT_DOUBLE_EQ(rs[0].speedup.at("torch_eager"), 2.5);
  EXPECT_DOUBLE_EQ(rs[0].speedup.at("opfuse_unfused"), 1.0);
  EXPECT_EQ(rs[2].speedup.count("torch_eager"), 0u);
  EXPECT_TRUE(rs[3].review);  // 20x: flagged
  auto eager_of = [](const std::vector<FastSummary>& sums) {
    return *std::find_if(sums.begin(), sums.end(), [](const FastSummary& s) { return s.against == "torch_eager"; });
  };
  // d's 20x is held out until the run is repeated with --accept-flagged.
  const FastSummary held = eager_of(Summarize(rs));
  EXPECT_EQ(held.problems, 4);
  EXPECT_EQ(held.correct, 3);
  EXPECT_DOUBLE_EQ(held.fast_0, 0.75);
  EXPECT_DOUBLE_EQ(held.fast_1, 0.25);  // a (2.5x); b is slower; c failed; d held out
  EXPECT_DOUBLE_EQ(held.fast_2, 0.25);
  EXPECT_NEAR(held.geomean, std::sqrt(2.5 * 0.5), 1e-9);
  EXPECT_EQ(held.review, 1);
  EXPECT_EQ(held.held_out, 1);
  const FastSummary accepted = eager_of(Summarize(rs, /*accept_flagged=*/true));
  EXPECT_DOUBLE_EQ(accepted.fast_1, 0.5);  // a (2.5x) and d (20x)
  EXPECT_DOUBLE_EQ(accepted.fast_2, 0.5);
  EXPECT_NEAR(accepted.geomean, std::cbrt(2.5 * 0.5 * 20), 1e-9);
  EXPECT_EQ(accepted.review, 1);
  EXPECT_EQ(accepted.held_out, 0);
  auto j = EvalToJson(rs, {{"backend", "cuda"}});
  EXPECT_EQ(j["results"].size(), 4u);
  EXPECT_TRUE(j["results"][2]["runtime_us"].is_null());
  EXPECT_EQ(j["summary"][1]["held_out"], 1);
  EXPECT_EQ(EvalToJson(rs, {{"accept_flagged", true}})["summary"][1]["held_out"], 0);
  const std::string md = EvalMarkdown(rs, "torch_eager");
  EXPECT_NE(md.find("speedup > 10x: held out until --accept-flagged"), std::string::npos);
  EXPECT_NE(md.find("torch_eager (primary)"), std::string::npos);
  EXPECT_NE(EvalMarkdown(rs, "torch_eager", true).find("speedup > 10x: accepted after review"), std::string::npos);
}

TEST(EvalBaseline, MergeRefusesAnotherDevice) {
  nlohmann::json file;
  ASSERT_TRUE(MergeBaseline(file, "opfuse_unfused", {{"name", "GPU A"}}, {{"p", {{"us", 1.0}}}}, "cmd").ok());
  EXPECT_EQ(file["problems"]["p"]["opfuse_unfused"]["us"], 1.0);
  EXPECT_EQ(MergeBaseline(file, "opfuse_unfused", {{"name", "GPU B"}}, {{"p", {{"us", 2.0}}}}, "cmd").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadBaseline("/nonexistent/baseline_time.json").status().code(), StatusCode::kNotFound);
}

// ---------------------------------------------------------------- planted host candidates

EvalProblem Small() {
  auto p = ProblemFromText("rms_norm_f32_small", R"(# small RMSNorm
graph r
input x: f32[8, 64]
param w: f32[64]
y = rms_norm(x, w) {eps=1e-05}
output y
)", "small.ofg");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

// The correct candidate: the CPU reference itself.
Status Reference(const EvalProblem& p, const std::vector<const HostTensor*>& in, const std::vector<HostTensor*>& out) {
  auto g = ParseGraph(p.c.graph);
  if (!g.ok()) return g.status();
  std::map<std::string, HostTensor> named;
  for (size_t i = 0; i < in.size(); ++i) named[p.c.inputs[i].name] = *in[i];
  OPFUSE_ASSIGN_OR_RETURN(auto r, RunGraphCpu(*g, named));
  for (size_t i = 0; i < out.size(); ++i) *out[i] = r.at(p.c.outputs[i].name);
  return Status::Ok();
}

EvalResult RunPlanted(const EvalProblem& p, HostCandidate c) {
  CpuEvalOptions o;
  o.candidate_name = "planted";
  o.make_candidate = [c](const EvalProblem&) -> StatusOr<HostCandidate> { return c; };
  auto r = RunEvalCpu({p}, o);
  EXPECT_TRUE(r.ok());
  return r->front();
}

TEST(EvalCpuHarness, ReferencePassesEveryTrial) {
  const EvalProblem p = Small();
  const EvalResult r = RunPlanted(p, [&](auto& in, auto& out) { return Reference(p, in, out); });
  EXPECT_TRUE(r.compiled);
  EXPECT_TRUE(r.correct) << r.error;
  EXPECT_LT(r.rel_err, 1e-6);
}

TEST(EvalCpuHarness, RejectsZeros) {
  const EvalProblem p = Small();
  const EvalResult r = RunPlanted(p, [](auto&, auto& out) {
    for (auto* o : out) std::fill(o->data.begin(), o->data.end(), 0);
    return Status::Ok();
  });
  EXPECT_FALSE(r.correct);
  EXPECT_NE(r.error.find("all 512 elements are zero"), std::string::npos) << r.error;
}

TEST(EvalCpuHarness, RejectsHalfTheOutput) {
  const EvalProblem p = Small();
  const EvalResult r = RunPlanted(p, [&](auto& in, auto& out) {
    HostTensor full(out[0]->dtype, out[0]->shape);
    std::vector<HostTensor*> tmp = {&full};
    OPFUSE_RETURN_IF_ERROR(Reference(p, in, tmp));
    std::copy(full.data.begin(), full.data.begin() + full.data.size() / 2, out[0]->data.begin());
    return Status::Ok();
  });
  EXPECT_FALSE(r.correct);
  EXPECT_NE(r.error.find("256 of 512 elements NaN"), std::string::npos) << r.error;
}

TEST(EvalCpuHarness, RejectsInputMutation) {
  const EvalProblem p = Small();
  const EvalResult r = RunPlanted(p, [&](auto& in, auto& out) {
    OPFUSE_RETURN_IF_ERROR(Reference(p, in, out));
    const_cast<HostTensor*>(in[0])->set(3, 42.0);  // writes into its input after computing
    return Status::Ok();
  });
  EXPECT_FALSE(r.correct);
  EXPECT_NE(r.error.find("input x was modified"), std::string::npos) << r.error;
  EXPECT_EQ(r.rule, kRuleInputs);
}

// An output that does not depend on the input: under i.i.d. uniform[-1, 1) inputs the logsumexp of
// 32000 values is ln(32000 * E[e^u]) = 10.5349 for every row, well within the bf16 bound; the
// row-scaled trial catches it.
TEST(EvalCpuHarness, RejectsAnInputIndependentOutput) {
  auto p = ProblemFromText("logsumexp_bf16_small", R"(# logsumexp over a vocabulary
graph l
input x: bf16[4, 32000]
m = max(x)
xs = sub(x, m)
e = exp(xs)
s = sum(e)
l = log(s)
y = add(l, m)
output y
)", "small.ofg");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const EvalResult r = RunPlanted(*p, [&](auto&, auto& out) {
    for (int64_t i = 0; i < out[0]->numel(); ++i) out[0]->set(i, 10.534930543);
    return Status::Ok();
  });
  EXPECT_FALSE(r.correct);
  EXPECT_EQ(r.rule, kRuleReference);
  EXPECT_EQ(r.error.find("(uniform)"), std::string::npos) << "caught on the uniform trial: " << r.error;
}

TEST(EvalCpuHarness, RejectsReadingTheUninitialisedOutput) {
  const EvalProblem p = Small();
  const EvalResult r = RunPlanted(p, [&](auto& in, auto& out) {
    HostTensor full(out[0]->dtype, out[0]->shape);
    std::vector<HostTensor*> tmp = {&full};
    OPFUSE_RETURN_IF_ERROR(Reference(p, in, tmp));
    for (int64_t i = 0; i < full.numel(); ++i) out[0]->set(i, out[0]->get(i) * 0.0 + full.get(i));  // "accumulates" into y
    return Status::Ok();
  });
  EXPECT_FALSE(r.correct);
  EXPECT_NE(r.error.find("NaN"), std::string::npos) << r.error;
}

TEST(EvalCpuHarness, RejectsAWrongAnswerOnALaterTrial) {
  // Right on the first trial's inputs only (a kernel that caches its first answer): later trials
  // have fresh inputs, so it fails there.
  const EvalProblem p = Small();
  auto cached = std::make_shared<HostTensor>();
  const EvalResult r = RunPlanted(p, [&, cached](auto& in, auto& out) {
    if (cached->data.empty()) {
      OPFUSE_RETURN_IF_ERROR(Reference(p, in, out));
      *cached = *out[0];
    } else {
      *out[0] = *cached;
    }
    return Status::Ok();
  });
  EXPECT_FALSE(r.correct);
  EXPECT_NE(r.error.find("reference: trial 2 (row-scaled):"), std::string::npos) << r.error;
  EXPECT_EQ(r.rule, kRuleReference);
}

TEST(EvalCpuHarness, CandidateThatDoesNotBuildIsNotCompiled) {
  const EvalProblem p = Small();
  CpuEvalOptions o;
  o.make_candidate = [](const EvalProblem&) -> StatusOr<HostCandidate> { return InvalidArgument("syntax error"); };
  auto r = RunEvalCpu({p}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->front().compiled);
  EXPECT_FALSE(r->front().correct);
}

TEST(EvalCpuHarness, OpfuseFusedPlanIsCorrectOnDecodeProblems) {
  auto all = LoadProblems(kDir);
  ASSERT_TRUE(all.ok());
  auto ps = SelectProblems(*all, "add_rms_norm_bf16_decode,softmax_masked_f32_decode,rope_bf16_decode,argmax_f32_decode");
  ASSERT_TRUE(ps.ok()) << ps.status().ToString();
  CpuEvalOptions o;
  auto r = RunEvalCpu(*ps, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& x : *r) EXPECT_TRUE(x.correct) << x.problem << ": " << x.error;
}

}  // namespace
}  // namespace opfuse::bench
