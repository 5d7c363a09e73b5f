// `opfuse generate --model DIR` with a config.json it must refuse: exit 2 and one line on stderr
// naming the key, before any weight is read. DIR is a copy of a committed family fixture
// (tests/data/families/) with one key of its config.json changed, so the only thing wrong is that key.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;

struct Case {
  const char* family;
  const char* patch;    // merged into config.json (a null value removes the key)
  const char* args;     // extra generate flags
  const char* message;  // a substring stderr must hold
};

class ModelConfigCli : public ::testing::TestWithParam<Case> {};

TEST_P(ModelConfigCli, RefusedWithExitTwoAndOneLine) {
  const Case& c = GetParam();
  const fs::path src = fs::path(OPFUSE_SOURCE_DIR) / "tests/data/families" / c.family;
  const fs::path dir = fs::path(::testing::TempDir()) / ("opfuse_cfgcli_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(src / "model.safetensors", dir / "model.safetensors");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(src / "config.json"));
  j.merge_patch(nlohmann::json::parse(c.patch));
  std::ofstream(dir / "config.json") << j.dump(2);
  const auto r = opfuse::testing::RunOpfuseCli(
      "generate --model '" + dir.string() + "' --ids 1,2 --max-new-tokens 1 " + c.args, "cfgcli");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Refusals, ModelConfigCli,
    ::testing::Values(
        Case{"llama", R"({"rope_parameters": {"rope_type": "longrope"}})", "", "rope_type 'longrope' is not implemented"},
        Case{"llama", R"({"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}})", "",
             "'partial_rotary_factor' = 0.5 is not implemented"},
        Case{"llama", R"({"hidden_act": "gelu_pytorch_tanh"})", "", "hidden_act 'gelu_pytorch_tanh' is not implemented"},
        Case{"llama", R"({"model_type": "phi3"})", "", "unsupported model_type 'phi3'"},
        Case{"llama", R"({"quantization_config": {"quant_method": "gptq", "bits": 4}})", "", "quantized checkpoints"},
        Case{"llama", R"({"logits_scaling": 8.0})", "", "key 'logits_scaling' = 8.0 is not understood"},
        Case{"llama", R"({"dtype": "bfloat16", "torch_dtype": "float16"})", "", "disagree"},
        Case{"mistral", R"({"sliding_window": -16})", "", "'sliding_window' must be positive, got -16"},
        Case{"qwen3", R"({"layer_types": ["full_attention", "chunked_attention"]})", "", "layer_types[1]"},
        Case{"llama", R"({"max_position_embeddings": 4611686018427387904})", "", "implausibly large"}),
    [](const auto& info) { return std::string(info.param.family) + "_" + std::to_string(info.index); });

// A sliding window shorter than the context runs (windowed attention on the CPU backend).
TEST(ModelConfigCli, SlidingWindowShorterThanTheContextRuns) {
  const fs::path src = fs::path(OPFUSE_SOURCE_DIR) / "tests/data/families/mistral";
  const fs::path dir = fs::path(::testing::TempDir()) / ("opfuse_cfgcli_ok_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(src / "model.safetensors", dir / "model.safetensors");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(src / "config.json"));
  j["sliding_window"] = 16;
  std::ofstream(dir / "config.json") << j.dump(2);
  const auto r = opfuse::testing::RunOpfuseCli(
      "generate --model '" + dir.string() + "' --ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18 --max-new-tokens 4", "cfgcli_ok");
  EXPECT_EQ(r.code, 0) << r.err;
  fs::remove_all(dir);
}

}  // namespace
