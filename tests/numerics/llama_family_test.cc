// opfuse's engine against Hugging Face transformers on the committed tiny models: tests/data/tiny_llama
// (opfuse init-weights, expected.json by tools/hf_compare.py --make-fixture) and one random-weight
// model per family (tests/data/families/{llama,mistral,qwen2,qwen3}, tools/make_family_fixtures.py with
// transformers 5: its save_pretrained config.json — 5.x keys — and safetensors, and its greedy
// tokens and f32 logits with the KV cache). Every weight is perturbed away from its init (norm
// weights around 1, biases nonzero), so a missing bias, a q/k norm or a rope scaling left out
// shows in the logits. Every strategy on the CPU backend must give transformers' greedy tokens and
// logits within f32 rounding (max |diff| / max |ref| per step <= 1e-4).
//
// The same model with its config as transformers 4.x writes it (config.v4.json: rope_theta +
// rope_scaling, torch_dtype) must give bit-identical logits, and a different rope_theta must not.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/llama/engine.h"
#include "rel_error.h"

namespace opfuse::llama {
namespace {

namespace fs = std::filesystem;

std::string DataDir(const std::string& sub) { return std::string(OPFUSE_SOURCE_DIR) + "/tests/data/" + sub; }
std::string FamilyDir(const std::string& family) { return DataDir("families/" + family); }

using opfuse::testing::RelError;

StatusOr<GenerateResult> RunEngine(const std::string& dir, Strategy s, const std::vector<int32_t>& prompt, int64_t steps) {
  EngineOptions o;
  o.model_dir = dir;
  o.strategy = s;
  OPFUSE_ASSIGN_OR_RETURN(auto e, Engine::Create(o));
  GenerateOptions g;
  g.max_new_tokens = steps;
  g.keep_logits = true;
  return e->Generate({prompt}, g);
}

// A copy of `family`'s directory with config.json replaced by `config` (weights hard-linked or copied).
std::string CopyWithConfig(const std::string& family, const nlohmann::json& config, const std::string& tag) {
  const fs::path d = fs::path(::testing::TempDir()) / ("opfuse_family_" + family + "_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  fs::copy_file(fs::path(FamilyDir(family)) / "model.safetensors", d / "model.safetensors");
  std::ofstream(d / "config.json") << config.dump(2);
  return d.string();
}

// A fixture directory under tests/data: config.json, model.safetensors and expected.json (prompt,
// transformers' greedy tokens and f32 logits per step).
class LlamaHfFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaHfFixture, EveryStrategyMatchesTransformers) {
  const std::string dir = DataDir(GetParam());
  std::ifstream f(dir + "/expected.json");
  ASSERT_TRUE(f) << "missing " << dir << "/expected.json (tools/make_family_fixtures.py, tools/hf_compare.py --make-fixture)";
  const nlohmann::json ex = nlohmann::json::parse(f);
  const auto prompt = ex.at("prompt").get<std::vector<int32_t>>();
  const auto tokens = ex.at("tokens").get<std::vector<int32_t>>();
  const auto logits = ex.at("logits").get<std::vector<std::vector<float>>>();
  ASSERT_EQ(tokens.size(), logits.size());
  ASSERT_GE(tokens.size(), 4u);
  for (Strategy s : {Strategy::kNeverFuse, Strategy::kAlwaysFuse, Strategy::kSmartSchedule}) {
    SCOPED_TRACE(StrategyName(s));
    auto r = RunEngine(dir, s, prompt, static_cast<int64_t>(tokens.size()));
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->tokens[0], tokens);
    ASSERT_EQ(r->logits[0].size(), logits.size());
    for (size_t step = 0; step < logits.size(); ++step)
      EXPECT_LE(RelError(r->logits[0][step], logits[step]), 1e-4) << "step " << step;
  }
}

// tests/data/tiny_llama: `opfuse init-weights --config tiny`, expected.json by tools/hf_compare.py
// --make-fixture; tests/data/families/*: tools/make_family_fixtures.py.
INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaHfFixture,
                         ::testing::Values("tiny_llama", "families/llama", "families/mistral", "families/qwen2",
                                           "families/qwen3", "families/mistral_window", "families/qwen2_window"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '/', '_');
                           return n;
                         });

class LlamaFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaFamily, TransformersFourConfigGivesTheSameLogits) {
  const std::string dir = FamilyDir(GetParam());
  std::ifstream f4(dir + "/config.v4.json"), f5(dir + "/config.json");
  ASSERT_TRUE(f4 && f5);
  const nlohmann::json v4 = nlohmann::json::parse(f4), v5 = nlohmann::json::parse(f5);
  ASSERT_TRUE(v5.contains("rope_parameters"));  // 5.x keys
  ASSERT_TRUE(v4.contains("rope_theta") && !v4.contains("rope_parameters"));  // 4.x keys
  const std::vector<int32_t> prompt = {1, 40, 41, 42, 43, 44};
  auto a = RunEngine(dir, Strategy::kNeverFuse, prompt, 3);
  auto b = RunEngine(CopyWithConfig(GetParam(), v4, "v4"), Strategy::kNeverFuse, prompt, 3);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(a->logits, b->logits);  // bit-identical
  // A different rope_theta must change the logits: the theta is really read from each generation.
  nlohmann::json other = v5;
  other["rope_parameters"]["rope_theta"] = v5["rope_parameters"]["rope_theta"].get<double>() * 0.5;
  auto c = RunEngine(CopyWithConfig(GetParam(), other, "theta"), Strategy::kNeverFuse, prompt, 3);
  ASSERT_TRUE(c.ok()) << c.status().message();
  double worst = 0;
  for (size_t s = 0; s < a->logits[0].size(); ++s) worst = std::max(worst, RelError(c->logits[0][s], a->logits[0][s]));
  EXPECT_GT(worst, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Families, LlamaFamily,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3", "mistral_window", "qwen2_window"),
                         [](const auto& info) { return info.param; });

// The window fixtures' 17 positions outrun their sliding windows (5; 4 on Qwen2's second layer):
// without the window the logits must differ, so the fixture test above really checks windowed
// attention.
TEST(LlamaWindow, TheWindowChangesTheLogits) {
  for (const std::string family : {"mistral_window", "qwen2_window"}) {
    SCOPED_TRACE(family);
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(FamilyDir(family) + "/config.json"));
    ASSERT_GT(cfg.value("sliding_window", 0), 0);
    const std::vector<int32_t> prompt = {1, 17, 93, 140, 5, 66, 121, 30, 8};
    auto a = RunEngine(FamilyDir(family), Strategy::kAlwaysFuse, prompt, 6);
    cfg["sliding_window"] = 1000;  // longer than the context: full attention
    auto b = RunEngine(CopyWithConfig(family, cfg, "nowindow"), Strategy::kAlwaysFuse, prompt, 6);
    ASSERT_TRUE(a.ok()) << a.status().message();
    ASSERT_TRUE(b.ok()) << b.status().message();
    double worst = 0;
    for (size_t s = 0; s < a->logits[0].size(); ++s) worst = std::max(worst, RelError(a->logits[0][s], b->logits[0][s]));
    EXPECT_GT(worst, 1e-3);
  }
}

}  // namespace
}  // namespace opfuse::llama
