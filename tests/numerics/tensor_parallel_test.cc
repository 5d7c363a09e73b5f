// Tensor parallelism on the CPU backend (docs/tensor_parallel.md): the model split over 2 and 4
// ranks (one thread each, the in-process communicator) must give what one rank gives — and what
// transformers gives — on every committed family fixture (tests/data/families: biases on q/k/v/o
// and the MLP, tied embeddings, q/k norms, sliding windows, KV heads fewer than the ranks at 4),
// under every strategy; batched prompts of different lengths too. Configs that do not split are
// refused with one line naming the reason. tests/gpu/tensor_parallel_gpu_test.cc: the same on GPUs.
#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/llama/engine.h"
#include "rel_error.h"
#include "model/llama/tensor_parallel.h"

namespace opfuse::llama {
namespace {

std::string FamilyDir(const std::string& family) { return std::string(OPFUSE_SOURCE_DIR) + "/tests/data/families/" + family; }

using opfuse::testing::RelError;

StatusOr<std::unique_ptr<Engine>> Make(const std::string& dir, Strategy s, int64_t tp, int64_t batch = 1) {
  EngineOptions o;
  o.model_dir = dir;
  o.strategy = s;
  o.tensor_parallel = tp;
  o.batch = batch;
  o.max_context = 64;
  return Engine::Create(o);
}

class TensorParallelFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelFamily, RanksGiveOneRanksLogitsAndTransformersTokens) {
  const std::string dir = FamilyDir(GetParam());
  const nlohmann::json ex = nlohmann::json::parse(std::ifstream(dir + "/expected.json"));
  const auto prompt = ex.at("prompt").get<std::vector<int32_t>>();
  const auto tokens = ex.at("tokens").get<std::vector<int32_t>>();
  const auto hf = ex.at("logits").get<std::vector<std::vector<float>>>();
  GenerateOptions g;
  g.max_new_tokens = static_cast<int64_t>(tokens.size());
  g.keep_logits = true;
  for (Strategy s : {Strategy::kNeverFuse, Strategy::kAlwaysFuse, Strategy::kSmartSchedule}) {
    auto one = Make(dir, s, 1);
    ASSERT_TRUE(one.ok()) << one.status().message();
    auto ref = (*one)->Generate({prompt}, g);
    ASSERT_TRUE(ref.ok()) << ref.status().message();
    for (int64_t tp : {2, 4}) {
      SCOPED_TRACE(fmt::format("{} tp={}", StrategyName(s), tp));
      auto e = Make(dir, s, tp);
      ASSERT_TRUE(e.ok()) << e.status().message();
      EXPECT_EQ((*e)->tensor_parallel(), tp);
      auto r = (*e)->Generate({prompt}, g);
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ(r->tokens[0], tokens);
      ASSERT_EQ(r->logits[0].size(), hf.size());
      for (size_t step = 0; step < hf.size(); ++step) {
        EXPECT_LE(RelError(r->logits[0][step], ref->logits[0][step]), 1e-5) << "step " << step;
        EXPECT_LE(RelError(r->logits[0][step], hf[step]), 1e-4) << "step " << step;
      }
      // Every layer all_reduces twice (o_proj, down_proj) and the logits are gathered once, per
      // prefill and per decode step.
      const int64_t L = (*e)->config().num_hidden_layers;
      EXPECT_EQ((*e)->collectives(), static_cast<int64_t>(tokens.size()) * (2 * L + 1));
      EXPECT_GE((*e)->collective_ms(), 0.0);
      // The rank's graph holds its heads only: the caches are [B, S, LocalKvHeads, D].
      const Graph& dg = (*e)->decode_graph();
      const auto cache = dg.FindValue("past.0.key");
      ASSERT_TRUE(cache.has_value());
      EXPECT_EQ(dg.values[*cache].type.shape[2].value, LocalKvHeads((*e)->config(), tp));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, TensorParallelFamily,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3", "mistral_window", "qwen2_window"),
                         [](const auto& info) { return info.param; });

// Batched sequences of different lengths on the built-in tiny config: the same greedy tokens and
// logits as one rank, per sequence.
TEST(TensorParallel, BatchedPromptsOfDifferentLengthsMatchOneRank) {
  const std::vector<std::vector<int32_t>> prompts = {{1, 17, 42, 99, 3}, {7, 250}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
  GenerateOptions g;
  g.max_new_tokens = 5;
  g.keep_logits = true;
  auto run = [&](int64_t tp) -> StatusOr<GenerateResult> {
    EngineOptions o;
    o.backend = "cpu";
    o.batch = 3;
    o.max_context = 32;
    o.tensor_parallel = tp;
    OPFUSE_ASSIGN_OR_RETURN(auto e, Engine::Create(o));
    return e->Generate(prompts, g);
  };
  auto ref = run(1), two = run(2);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(two->tokens, ref->tokens);
  for (size_t b = 0; b < prompts.size(); ++b)
    for (size_t s = 0; s < ref->logits[b].size(); ++s) EXPECT_LE(RelError(two->logits[b][s], ref->logits[b][s]), 1e-5);
}

TEST(TensorParallel, ConfigsThatDoNotSplitAreRefusedNamingWhy) {
  EngineOptions o;
  o.backend = "cpu";
  o.tensor_parallel = 3;  // tiny: 4 heads
  auto e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.status().message(), "--tensor-parallel 3: num_attention_heads 4 is not a multiple of 3");
  o.tensor_parallel = 0;
  e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--tensor-parallel must be >= 1"), std::string::npos) << e.status().message();
  o.tensor_parallel = 8;  // 4 heads over 8 ranks
  e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("num_attention_heads 4 is not a multiple of 8"), std::string::npos);
  // On cuda, a machine without a GPU (or one GPU per rank) says so before anything is built.
  if (!Engine::CheckBackend("cuda").ok()) {
    o.tensor_parallel = 2;
    o.backend = "cuda";
    e = Engine::Create(o);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), StatusCode::kUnavailable) << e.status().message();
  }
}

}  // namespace
}  // namespace opfuse::llama
