// opfuse's engine against Hugging Face transformers on the committed tiny model
// (tests/data/tiny_llama: `opfuse init-weights --config tiny --dtype f32`, ~420 KB, and
// expected.json made by `tools/hf_compare.py --make-fixture` — transformers' LlamaForCausalLM, f32,
// greedy with its KV cache). Every strategy on the CPU backend must produce the same greedy tokens
// and logits within f32 rounding of the reference (max |diff| / max |ref| per step <= 1e-4).
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/llama/engine.h"

namespace opfuse::llama {
namespace {

TEST(LlamaHfFixture, EveryStrategyMatchesTransformers) {
  const std::string dir = std::string(OPFUSE_SOURCE_DIR) + "/tests/data/tiny_llama";
  std::ifstream f(dir + "/expected.json");
  ASSERT_TRUE(f) << "missing " << dir << "/expected.json (make it with tools/hf_compare.py --make-fixture)";
  const nlohmann::json ex = nlohmann::json::parse(f);
  const auto prompt = ex.at("prompt").get<std::vector<int32_t>>();
  const auto tokens = ex.at("tokens").get<std::vector<int32_t>>();
  const auto logits = ex.at("logits").get<std::vector<std::vector<float>>>();
  ASSERT_EQ(tokens.size(), logits.size());
  ASSERT_GE(tokens.size(), 4u);
  for (Strategy s : {Strategy::kNeverFuse, Strategy::kAlwaysFuse, Strategy::kSmartSchedule}) {
    SCOPED_TRACE(StrategyName(s));
    EngineOptions o;
    o.model_dir = dir;
    o.strategy = s;
    auto e = Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    GenerateOptions g;
    g.max_new_tokens = static_cast<int64_t>(tokens.size());
    g.keep_logits = true;
    auto r = (*e)->Generate({prompt}, g);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->tokens[0], tokens);
    ASSERT_EQ(r->logits[0].size(), logits.size());
    for (size_t step = 0; step < logits.size(); ++step) {
      const auto& a = r->logits[0][step];
      const auto& b = logits[step];
      ASSERT_EQ(a.size(), b.size());
      double num = 0, den = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        num = std::max(num, std::abs(double(a[i]) - b[i]));
        den = std::max(den, std::abs(double(b[i])));
      }
      ASSERT_GT(den, 0);
      EXPECT_LE(num / den, 1e-4) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace opfuse::llama
