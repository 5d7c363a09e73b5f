// `opfuse generate --model DIR --prompt TEXT` for a Llama-3-style and a Qwen2-style directory whose
// tokenizer is a tokenizer.json (the committed fixtures of tests/data/tokenizers/): the prompt is
// encoded by that tokenizer (Llama-3 prepends <|begin_of_text|>, Qwen2 nothing), the model runs,
// and the new tokens come back as text. The model is `opfuse init-weights --config FILE` on a tiny
// config of the family with the tokenizer's vocabulary size, so every id the model can emit decodes.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;
using opfuse::testing::RunOpfuseCli;

struct Case {
  const char* tokenizer;   // tests/data/tokenizers/<name>
  const char* model_type;  // the family of the tiny model
  bool bos;                // the tokenizer prepends its BOS
};

class PromptText : public ::testing::TestWithParam<Case> {};

TEST_P(PromptText, GenerateEncodesThePromptAndPrintsText) {
  const Case& c = GetParam();
  const fs::path tok = fs::path(OPFUSE_SOURCE_DIR) / "tests/data/tokenizers" / c.tokenizer;
  const fs::path work = fs::path(::testing::TempDir()) / (std::string("opfuse_prompt_") + c.tokenizer + "_" + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::create_directories(work);
  // The vocabulary: every id of the model's vocab and added tokens.
  const nlohmann::json tj = nlohmann::json::parse(std::ifstream(tok / "tokenizer.json"));
  int64_t vocab = 0;
  for (const auto& [k, v] : tj.at("model").at("vocab").items()) vocab = std::max<int64_t>(vocab, v.get<int64_t>() + 1);
  for (const auto& a : tj.at("added_tokens")) vocab = std::max<int64_t>(vocab, a.at("id").get<int64_t>() + 1);
  nlohmann::json cfg = {{"model_type", c.model_type}, {"hidden_size", 64}, {"intermediate_size", 96},
                        {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                        {"vocab_size", vocab}, {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-6},
                        {"bos_token_id", nullptr}, {"eos_token_id", nullptr}};
  std::ofstream(work / "config.json") << cfg.dump();
  const fs::path dir = work / "model";
  auto r = RunOpfuseCli("init-weights --config '" + (work / "config.json").string() + "' --out '" + dir.string() + "'", "prompt");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    if (fs::exists(tok / f)) fs::copy_file(tok / f, dir / f);

  const std::string prompt = "Hello, world! The year 2024: 你好 🙂";
  auto ids = RunOpfuseCli("tokenize --model '" + dir.string() + "' --json '" + prompt + "'", "prompt");
  ASSERT_EQ(ids.code, 0) << ids.err;
  const nlohmann::json tj2 = nlohmann::json::parse(ids.out);
  const auto want = tj2.at("ids").get<std::vector<int64_t>>();
  ASSERT_GE(want.size(), 5u);
  r = RunOpfuseCli("generate --model '" + dir.string() + "' --prompt '" + prompt + "' --max-new-tokens 4", "prompt");
  ASSERT_EQ(r.code, 0) << r.err;
  // The engine saw as many ids as the tokenizer gives (BOS included when the tokenizer adds one) ...
  EXPECT_NE(r.out.find("[0] prompt " + std::to_string(want.size()) + " tokens"), std::string::npos) << r.out;
  const int64_t bos = tj2.at("bos").is_null() ? -1 : tj2.at("bos").get<int64_t>();
  EXPECT_EQ(want.front() == bos, c.bos) << ids.out;
  // ... and printed the new tokens as text.
  EXPECT_NE(r.out.find("[0] text: "), std::string::npos) << r.out;
  fs::remove_all(work);
}

INSTANTIATE_TEST_SUITE_P(TokenizerJson, PromptText,
                         ::testing::Values(Case{"llama3_bpe", "llama", true}, Case{"qwen2_bpe", "qwen2", false}),
                         [](const auto& info) { return std::string(info.param.tokenizer); });

}  // namespace
