// Expected Llama tensors and the weights check (model/llama/weights.h), and the random-weight
// writer behind `opfuse init-weights`: the tiny config round-trips through the loader and the check;
// the same seed gives the same bytes and another seed different ones; the values have the intended
// distribution (mean ~0, std ~0.02; norms exactly 1); and the check catches missing, misshapen,
// wrongly typed and unexpected tensors.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "model/llama/weights.h"
#include "ir/host_tensor.h"

namespace opfuse::llama {
namespace {

namespace fs = std::filesystem;

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> n{0};
    dir_ = fs::temp_directory_path() / ("opfuse_weights_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path Sub(const std::string& name) {
    fs::path p = dir_ / name;
    fs::create_directories(p);
    return p;
  }
  static std::string Slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  // Writes a directory holding `specs` (zero-filled) as model.safetensors.
  static void WriteSpecs(const fs::path& d, const std::vector<StTensorSpec>& specs) {
    ASSERT_TRUE(WriteSafetensors((d / "model.safetensors").string(), specs, {},
                                 [](size_t, std::span<uint8_t>) { return Status::Ok(); })
                    .ok());
  }
  static std::vector<StTensorSpec> SpecsFor(const LlamaConfig& c, StDType t = StDType::kF32) {
    std::vector<StTensorSpec> specs;
    for (const auto& e : ExpectedTensors(c)) specs.push_back({e.name, t, e.shape});
    return specs;
  }
  fs::path dir_;
};

TEST_F(WeightsTest, ExpectedNamesAndShapes) {
  LlamaConfig c = *BuiltinConfig("tiny");
  auto ts = ExpectedTensors(c);
  EXPECT_EQ(ts.size(), 2u * 9 + 3);
  auto find = [&](const std::string& n) -> const ExpectedTensor* {
    for (const auto& t : ts)
      if (t.name == n) return &t;
    return nullptr;
  };
  ASSERT_NE(find("model.layers.1.self_attn.k_proj.weight"), nullptr);
  EXPECT_EQ(find("model.layers.1.self_attn.k_proj.weight")->shape, (std::vector<int64_t>{32, 64}));  // GQA: 2 kv heads × 16
  EXPECT_EQ(find("model.layers.0.mlp.down_proj.weight")->shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(find("model.layers.0.input_layernorm.weight")->init, WeightInit::kOnes);
  EXPECT_NE(find("lm_head.weight"), nullptr);
  EXPECT_EQ(find("model.layers.0.self_attn.q_proj.bias"), nullptr);
  c.tie_word_embeddings = true;
  c.attention_bias = true;
  ts = ExpectedTensors(c);
  EXPECT_EQ(ts.size(), 2u * 12 + 2);
  EXPECT_EQ(find("lm_head.weight"), nullptr);
  ASSERT_NE(find("model.layers.1.self_attn.v_proj.bias"), nullptr);
  EXPECT_EQ(find("model.layers.1.self_attn.v_proj.bias")->shape, (std::vector<int64_t>{32}));
  // Parameter count agrees with the expected shapes.
  int64_t total = 0;
  for (const auto& t : ts) {
    int64_t n = 1;
    for (auto d : t.shape) n *= d;
    total += n;
  }
  EXPECT_EQ(total, c.ParameterCount());
}

TEST_F(WeightsTest, RandomWeightsRoundTripDeterministic) {
  LlamaConfig c = *BuiltinConfig("tiny");
  const fs::path a = Sub("a"), b = Sub("b"), s1 = Sub("seed1");
  ASSERT_TRUE(WriteRandomWeights(c, a.string(), 7, StDType::kF32).ok());
  ASSERT_TRUE(WriteRandomWeights(c, b.string(), 7, StDType::kF32).ok());
  ASSERT_TRUE(WriteRandomWeights(c, s1.string(), 8, StDType::kF32).ok());
  EXPECT_EQ(Slurp(a / "model.safetensors"), Slurp(b / "model.safetensors"));
  EXPECT_NE(Slurp(a / "model.safetensors"), Slurp(s1 / "model.safetensors"));

  auto cfg = LoadConfigFile((a / "config.json").string());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(ConfigToJson(*cfg), ConfigToJson(c));
  auto d = SafetensorsDir::Open(a.string());
  ASSERT_TRUE(d.ok()) << d.status().message();
  Status chk = CheckWeights(*cfg, *d);
  EXPECT_TRUE(chk.ok()) << chk.message();

  // Distribution: a matrix is normal(0, 0.02); a norm is all ones.
  auto* q = d->Find("model.layers.0.mlp.up_proj.weight");
  ASSERT_NE(q, nullptr);
  auto bytes = q->file->Data(*q->info);
  const size_t n = bytes.size() / 4;
  double sum = 0, sumsq = 0;
  for (size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, bytes.data() + 4 * i, 4);
    sum += v;
    sumsq += double(v) * v;
  }
  const double mean = sum / n, sd = std::sqrt(sumsq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(sd, 0.02, 0.002);
  auto* norm = d->Find("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  auto nb = norm->file->Data(*norm->info);
  for (size_t i = 0; i < nb.size() / 4; ++i) {
    float v;
    std::memcpy(&v, nb.data() + 4 * i, 4);
    ASSERT_EQ(v, 1.0f);
  }
  // Two different matrices are not the same stream.
  auto* k = d->Find("model.layers.0.self_attn.k_proj.weight");
  auto* v = d->Find("model.layers.0.self_attn.v_proj.weight");
  EXPECT_NE(std::memcmp(k->file->Data(*k->info).data(), v->file->Data(*v->info).data(), k->info->nbytes()), 0);
}

TEST_F(WeightsTest, Bf16WeightsAndConfigDtype) {
  LlamaConfig c = *BuiltinConfig("tiny");
  const fs::path a = Sub("bf16");
  ASSERT_TRUE(WriteRandomWeights(c, a.string(), 1, StDType::kBF16).ok());
  auto cfg = LoadConfigFile((a / "config.json").string());
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->torch_dtype, "bfloat16");
  auto d = SafetensorsDir::Open(a.string());
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(CheckWeights(*cfg, *d).ok());
  auto* e = d->Find("model.embed_tokens.weight");
  EXPECT_EQ(e->info->dtype, StDType::kBF16);
  EXPECT_EQ(e->info->nbytes(), 256u * 64 * 2);
  uint16_t first;
  std::memcpy(&first, e->file->Data(*e->info).data(), 2);
  EXPECT_GT(std::fabs(BF16ToFloat(first)), 0.0f);
  EXPECT_LT(std::fabs(BF16ToFloat(first)), 0.2f);
  EXPECT_FALSE(WriteRandomWeights(c, Sub("i32").string(), 1, StDType::kI32).ok());
}

TEST_F(WeightsTest, CheckFindsEachProblem) {
  LlamaConfig c = *BuiltinConfig("tiny");
  auto check = [&](const std::vector<StTensorSpec>& specs) {
    static int n = 0;
    const fs::path d = Sub("case" + std::to_string(n++));
    WriteSpecs(d, specs);
    auto dir = SafetensorsDir::Open(d.string());
    EXPECT_TRUE(dir.ok()) << dir.status().message();
    Status s = dir.ok() ? CheckWeights(c, *dir) : dir.status();
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return s.message();
  };
  auto specs = SpecsFor(c);
  EXPECT_TRUE([&] {
    const fs::path d = Sub("good");
    WriteSpecs(d, specs);
    return CheckWeights(c, *SafetensorsDir::Open(d.string())).ok();
  }());

  auto missing = specs;
  missing.pop_back();  // lm_head.weight
  EXPECT_NE(check(missing).find("missing 'lm_head.weight' [256, 64]"), std::string::npos);

  auto shape = specs;
  shape[2].shape = {64, 63};
  EXPECT_NE(check(shape).find("'" + specs[2].name + "' has shape [64, 63], expected [64, 64]"), std::string::npos);

  auto dtype = specs;
  dtype[3].dtype = StDType::kI32;
  EXPECT_NE(check(dtype).find("has dtype I32, expected F32, F16 or BF16"), std::string::npos);

  auto mixed = specs;
  mixed[3].dtype = StDType::kBF16;
  EXPECT_NE(check(mixed).find("mixed weight dtypes"), std::string::npos);

  auto extra = specs;
  extra.push_back({"model.layers.2.mlp.up_proj.weight", StDType::kF32, {128, 64}});
  EXPECT_NE(check(extra).find("unexpected tensor 'model.layers.2.mlp.up_proj.weight'"), std::string::npos);

  auto many = specs;
  many.resize(2);
  std::string m = check(many);
  EXPECT_NE(m.find("19 problems"), std::string::npos) << m;
  EXPECT_NE(m.find("and 11 more"), std::string::npos) << m;

  // Accepted extras: a tied lm_head of the right shape, legacy inv_freq buffers.
  LlamaConfig tied = c;
  tied.tie_word_embeddings = true;
  auto ok_extra = specs;  // still has lm_head.weight
  ok_extra.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", StDType::kF32, {8}});
  const fs::path d = Sub("tied");
  WriteSpecs(d, ok_extra);
  Status s = CheckWeights(tied, *SafetensorsDir::Open(d.string()));
  EXPECT_TRUE(s.ok()) << s.message();
}

// Large tensors are filled by several threads, each starting its generator where one generator
// would be: the bytes must not depend on the thread count (odd sizes: a last half pair; chunks
// that are not a multiple of anything in particular).
TEST(LlamaWeights, RandomTensorBytesDoNotDependOnTheThreadCount) {
  for (StDType dt : {StDType::kF32, StDType::kBF16}) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{3'000'001}}) {
      ExpectedTensor e{"model.layers.0.mlp.up_proj.weight", {static_cast<int64_t>(n)}, WeightInit::kNormal};
      const size_t bytes = n * StDTypeSize(dt);
      std::vector<uint8_t> one(bytes, 0xAB);
      FillRandomTensor(e, 11, dt, one, 1);
      for (int threads : {2, 3, 8, 0}) {
        std::vector<uint8_t> many(bytes, 0xCD);  // poisoned: every byte must be written
        FillRandomTensor(e, 11, dt, many, threads);
        EXPECT_EQ(many, one) << StDTypeName(dt) << " n=" << n << " threads=" << threads;
      }
      if (n > 1) {  // and not a constant: the generator moved
        std::vector<uint8_t> other(bytes);
        FillRandomTensor(e, 12, dt, other, 1);
        EXPECT_NE(other, one);
      }
    }
  }
}

}  // namespace
}  // namespace opfuse::llama
