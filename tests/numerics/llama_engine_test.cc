// The engine on the CPU backend with the built-in `tiny` config (f32, random weights):
//  * the KV cache is right: prefill of a whole prompt gives the same last-token logits as prefill
//    of its prefix followed by decode steps (every strategy);
//  * strategies run different kernels yet agree (same greedy tokens, logits within f32 rounding);
//  * batched prompts of different lengths give each sequence what it gets alone;
//  * sampling is deterministic per seed; context overflow and bad input are InvalidArgument.
// Agreement with Hugging Face itself is llama_family_test.cc (LlamaHfFixture).
#include <cmath>

#include <gtest/gtest.h>

#include "model/llama/engine.h"
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
