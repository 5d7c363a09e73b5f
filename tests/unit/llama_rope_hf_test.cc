// RoPE tables against transformers' own: tests/data/configs/rope_expected.json holds, for each
// rope config (default, linear, dynamic, llama3, yarn with and without mscale / attention_factor /
// truncate), the inverse frequencies and attention scaling transformers 5's ROPE_INIT_FUNCTIONS
// compute and the cos / sin its rotary module returns at a few positions
// (tools/make_family_fixtures.py). opfuse reads the same config file and must reproduce them to
// f32 rounding.
#include <cmath>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/llama/config.h"
#include "model/llama/graph_builder.h"

namespace opfuse::llama {
namespace {

TEST(LlamaRopeHf, TablesMatchTransformers) {
  const std::string dir = std::string(OPFUSE_SOURCE_DIR) + "/tests/data/configs";
  std::ifstream f(dir + "/rope_expected.json");
  ASSERT_TRUE(f) << "missing rope_expected.json (tools/make_family_fixtures.py)";
  const nlohmann::json ex = nlohmann::json::parse(f);
  std::set<std::string> types;
  for (const auto& [name, c] : ex.at("cases").items()) {
    SCOPED_TRACE(name);
    auto cfg = LoadConfigFile(dir + "/" + c.at("config").get<std::string>());
    ASSERT_TRUE(cfg.ok()) << cfg.status().message();
    types.insert(RopeTypeName(cfg->rope_scaling.type));
    const auto want = c.at("inv_freq").get<std::vector<double>>();
    const auto inv = RopeInvFreq(*cfg);
    ASSERT_EQ(inv.size(), want.size());
    for (size_t i = 0; i < inv.size(); ++i) EXPECT_NEAR(inv[i], want[i], 4e-7 * std::abs(want[i])) << "inv_freq " << i;
    EXPECT_NEAR(RopeAttentionScaling(*cfg), c.at("attention_scaling").get<double>(), 1e-6);
    const auto positions = c.at("positions").get<std::vector<int64_t>>();
    const RopeTables t = ComputeRopeTables(*cfg, positions.back() + 1);
    const int64_t D = cfg->head_dim;
    for (size_t k = 0; k < positions.size(); ++k) {
      const auto cos = c.at("cos").at(k).get<std::vector<double>>();
      const auto sin = c.at("sin").at(k).get<std::vector<double>>();
      ASSERT_EQ(static_cast<int64_t>(cos.size()), D);
      for (int64_t i = 0; i < D; ++i) {
        // |p * inv| reaches a few hundred radians: one ulp of the argument is ~3e-5 there.
        EXPECT_NEAR(t.cos[positions[k] * D + i], cos[i], 5e-5) << "cos p=" << positions[k] << " i=" << i;
        EXPECT_NEAR(t.sin[positions[k] * D + i], sin[i], 5e-5) << "sin p=" << positions[k] << " i=" << i;
      }
    }
  }
  // Every rope type transformers' Llama accepts and opfuse implements is covered.
  for (const char* t : {"default", "linear", "dynamic", "llama3", "yarn"}) EXPECT_TRUE(types.count(t)) << t;
}

}  // namespace
}  // namespace opfuse::llama
