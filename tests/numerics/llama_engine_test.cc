// The engine on the CPU backend with the built-in `tiny` config (f32, random weights):
//  * the KV cache is right: prefill of a whole prompt gives the same last-token logits as prefill
//    of its prefix followed by decode steps (every strategy);
//  * strategies run different kernels yet agree (same greedy tokens, logits within f32 rounding);
//  * batched prompts of different lengths give each sequence what it gets alone;
//  * sampling is deterministic per seed; context overflow and bad input are InvalidArgument.
// Agreement with Hugging Face itself is llama_family_test.cc (LlamaHfFixture).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "model/llama/engine.h"
#include "scheduler/should_fuse.h"
#include "rel_error.h"

namespace opfuse::llama {
namespace {

std::unique_ptr<Engine> Make(Strategy s, int64_t batch = 1, int64_t context = 64) {
  EngineOptions o;
  o.backend = "cpu";
  o.strategy = s;
  o.batch = batch;
  o.max_context = context;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().message();
  return e.ok() ? std::move(*e) : nullptr;
}

using opfuse::testing::RelError;

const std::vector<int32_t> kPrompt = {1, 17, 42, 99, 3, 250, 7, 128};
constexpr Strategy kAll[] = {Strategy::kNeverFuse, Strategy::kAlwaysFuse, Strategy::kSmartSchedule};

TEST(LlamaEngine, DecodeMatchesPrefill) {
  for (Strategy s : kAll) {
    SCOPED_TRACE(StrategyName(s));
    auto whole = Make(s);
    auto split = Make(s);
    ASSERT_TRUE(whole && split);
    auto ref = whole->Prefill(0, kPrompt);
    ASSERT_TRUE(ref.ok()) << ref.status().message();
    auto first = split->Prefill(0, std::span(kPrompt).first(5));
    ASSERT_TRUE(first.ok()) << first.status().message();
    std::vector<float> logits;
    for (size_t t = 5; t < kPrompt.size(); ++t) {
      Status st = split->Decode(std::span(kPrompt).subspan(t, 1), nullptr, &logits);
      ASSERT_TRUE(st.ok()) << st.message();
    }
    EXPECT_EQ(split->length(0), static_cast<int64_t>(kPrompt.size()));
    EXPECT_LT(RelError(logits, *ref), 1e-5);
    EXPECT_GT(split->kernels_per_decode_step(), 0);
  }
}

TEST(LlamaEngine, StrategiesAgreeButRunDifferentKernels) {
  GenerateOptions g;
  g.max_new_tokens = 6;
  g.keep_logits = true;
  std::vector<GenerateResult> results;
  std::vector<int> kernels;
  for (Strategy s : kAll) {
    auto e = Make(s);
    ASSERT_TRUE(e);
    auto r = e->Generate({kPrompt}, g);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ(r->tokens[0].size(), 6u);
    ASSERT_EQ(r->logits[0].size(), 6u);
    EXPECT_EQ(r->decode_steps, 5);
    kernels.push_back(e->kernels_per_decode_step());
    results.push_back(std::move(*r));
  }
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_EQ(results[i].tokens, results[0].tokens) << StrategyName(kAll[i]);
    for (size_t step = 0; step < 6; ++step)
      EXPECT_LT(RelError(results[i].logits[0][step], results[0].logits[0][step]), 1e-4) << StrategyName(kAll[i]) << " step " << step;
  }
  EXPECT_GT(kernels[0], kernels[1]) << "never_fuse must run more steps than always_fuse";
}

TEST(LlamaEngine, BatchedPromptsOfDifferentLengths) {
  const std::vector<std::vector<int32_t>> prompts = {kPrompt, {1, 5, 9}, {1, 200, 201, 202, 203}};
  GenerateOptions g;
  g.max_new_tokens = 5;
  g.keep_logits = true;
  auto batched = Make(Strategy::kAlwaysFuse, 3);
  ASSERT_TRUE(batched);
  auto rb = batched->Generate(prompts, g);
  ASSERT_TRUE(rb.ok()) << rb.status().message();
  for (size_t b = 0; b < prompts.size(); ++b) {
    auto single = Make(Strategy::kAlwaysFuse, 1);
    auto rs = single->Generate({prompts[b]}, g);
    ASSERT_TRUE(rs.ok()) << rs.status().message();
    EXPECT_EQ(rb->tokens[b], rs->tokens[0]) << "sequence " << b;
    for (size_t step = 0; step < rs->logits[0].size(); ++step)
      EXPECT_LT(RelError(rb->logits[b][step], rs->logits[0][step]), 1e-5) << "sequence " << b << " step " << step;
  }
}

TEST(LlamaEngine, SeededSamplingIsDeterministic) {
  auto e = Make(Strategy::kAlwaysFuse);
  ASSERT_TRUE(e);
  GenerateOptions g;
  g.max_new_tokens = 12;
  g.sampling = {1.5, 50, 0.95, 7};
  auto a = e->Generate({kPrompt}, g);
  auto b = e->Generate({kPrompt}, g);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  g.sampling.seed = 8;
  auto c = e->Generate({kPrompt}, g);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->tokens, c->tokens);  // 12 draws at T=1.5 from ~50 tokens: equal only by a ~1e-20 chance
  g.sampling = {};
  auto greedy = e->Generate({kPrompt}, g);
  ASSERT_TRUE(greedy.ok());
  EXPECT_NE(greedy->tokens, a->tokens);
}

// The prompt-length ladder and the nearest plan (log2; the shorter on a tie).
TEST(LlamaEngine, PrefillPlanLengths) {
  EXPECT_EQ(PrefillPlanLengths(64), (std::vector<int64_t>{32}));
  EXPECT_EQ(PrefillPlanLengths(20), (std::vector<int64_t>{20}));
  EXPECT_EQ(PrefillPlanLengths(2048), (std::vector<int64_t>{32, 128, 512, 2048}));
  EXPECT_EQ(PrefillPlanLengths(100000), (std::vector<int64_t>{32, 128, 512, 2048, 8192}));
  const std::vector<int64_t> l = {32, 128, 512, 2048};
  EXPECT_EQ(NearestPrefillPlan(l, 1), 0u);
  EXPECT_EQ(NearestPrefillPlan(l, 64), 0u);   // 2^6: as far from 2^5 as from 2^7 — the shorter
  EXPECT_EQ(NearestPrefillPlan(l, 65), 1u);
  EXPECT_EQ(NearestPrefillPlan(l, 300), 2u);  // 2^8.2
  EXPECT_EQ(NearestPrefillPlan(l, 1500), 3u);
  EXPECT_EQ(NearestPrefillPlan(l, 100000), 3u);
}

// smart_schedule decides the prefill graph per prompt length: with a profile in which a group's
// ops one by one are faster at 32 rows and its fused kernel at 128, the engine holds two prefill
// plans — the group unfused in the 32-token one, fused in the 128-token one —, runs each prompt on
// the plan of its nearest length, and both give always_fuse's tokens. Without such a profile the
// lengths share one plan where their verdicts agree.
TEST(LlamaEngine, SmartPrefillPlanPerPromptLength) {
  auto plain = Make(Strategy::kSmartSchedule, 1, 256);
  ASSERT_TRUE(plain);
  const Graph& g128 = plain->prefill_graph(128);
  const FusionGroup* target = nullptr;
  scheduler::GroupShape shape;
  for (const auto& grp : g128.groups) {
    if (!grp.decision.fuse) continue;
    shape = scheduler::DescribeGroup(g128, grp, {{"T", 128}});
    if (!shape.pattern.empty() && shape.rows == 128 && shape.cols) {
      target = &grp;
      break;
    }
  }
  ASSERT_NE(target, nullptr) << "a fused prefill group with a profile key and T rows";
  const std::vector<int> nodes = target->nodes;
  std::string entries;
  for (auto [rows, unfused, fused] : {std::tuple{32, 1.0, 10.0}, std::tuple{128, 10.0, 1.0}})
    entries += fmt::format(R"({}{{"pattern": "{}", "dtype": "{}", "shape": {{"rows": {}, "cols": {}}},
        "variants_us": {{"unfused": {}, "library": {}, "jit": {}}}, "samples": 10}})",
                           entries.empty() ? "" : ",", shape.pattern, shape.dtype, rows, *shape.cols, unfused, fused, fused);
  const std::string path = ::testing::TempDir() + "/opfuse_prefill_plans_profile.json";
  {
    std::ofstream f(path);
    f << fmt::format(R"({{"schema": 1, "device": {{"name": "Test GPU", "sm": "9.0", "driver": "hand-written",
        "copy_gbps": 4000, "launch_us": 2.5}}, "entries": [{}]}})", entries);
  }
  EngineOptions o;
  o.backend = "cpu";
  o.strategy = Strategy::kSmartSchedule;
  o.max_context = 256;
  o.profile_path = path;
  auto e = Engine::Create(o);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ((*e)->prefill_plans(), 2);
  EXPECT_EQ((*e)->prefill_plan_length(8), 32);
  EXPECT_EQ((*e)->prefill_plan_length(100), 128);
  auto fused_in = [&](const Graph& g) {
    for (const auto& grp : g.groups)
      if (grp.nodes == nodes) return std::optional<bool>(grp.decision.fuse);
    return std::optional<bool>();
  };
  const std::optional<bool> short_plan = fused_in((*e)->prefill_graph(8));
  const std::optional<bool> long_plan = fused_in((*e)->prefill_graph(100));
  ASSERT_TRUE(short_plan.has_value() && long_plan.has_value());
  EXPECT_FALSE(*short_plan) << (*e)->prefill_graph(8).groups.size();
  EXPECT_TRUE(*long_plan);
  // each plan runs, and gives always_fuse's tokens
  auto always = Make(Strategy::kAlwaysFuse, 1, 256);
  ASSERT_TRUE(always);
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 100; ++i) long_prompt.push_back((i * 37 + 11) % 256);
  GenerateOptions gen;
  gen.max_new_tokens = 4;
  for (const auto& prompt : {kPrompt, long_prompt}) {
    (*e)->Reset();
    always->Reset();
    auto a = always->Generate({prompt}, gen);
    auto b = (*e)->Generate({prompt}, gen);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->tokens, b->tokens) << prompt.size() << " tokens";
    EXPECT_GT((*e)->kernels_per_prefill(), 0);
  }
  // the plain engine (no profile): its lengths' plans where the cost model's verdicts agree are one
  EXPECT_GE(plain->prefill_plans(), 1);
  EXPECT_LE(plain->prefill_plans(), 2);
  std::remove(path.c_str());
}

TEST(LlamaEngine, ContextAndInputErrors) {
  auto e = Make(Strategy::kAlwaysFuse, 1, 8);
  ASSERT_TRUE(e);
  std::vector<int32_t> long_prompt(9, 5);
  auto r = e->Generate({long_prompt}, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("longer than the context of 8"), std::string::npos) << r.status().message();
  GenerateOptions g;
  g.max_new_tokens = 4;
  r = e->Generate({std::vector<int32_t>(6, 5)}, g);  // 6 + 4 - 1 = 9 positions > 8
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("exceeds the context"), std::string::npos) << r.status().message();
  g.max_new_tokens = 3;  // 6 + 3 - 1 = 8 fits exactly
  EXPECT_TRUE(e->Generate({std::vector<int32_t>(6, 5)}, g).ok());
  EXPECT_EQ(e->Prefill(0, std::vector<int32_t>{1, 256}).status().code(), StatusCode::kInvalidArgument);  // vocab 256
  EXPECT_EQ(e->Generate({kPrompt, kPrompt}, {}).status().code(), StatusCode::kInvalidArgument);  // batch 1
  EngineOptions o;
  o.max_context = 100000;
  EXPECT_EQ(Engine::Create(o).status().code(), StatusCode::kInvalidArgument);
  o.max_context = 0;
  o.backend = "tpu";
  EXPECT_EQ(Engine::Create(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace opfuse::llama
