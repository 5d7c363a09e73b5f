// Sampler: warpers on hand-computable distributions (probabilities 1/2, 1/4, 1/8, 1/8), then the
// sampler's observed frequencies against those distributions, determinism per seed, validation.
#include <cmath>
#include <map>

#include <gtest/gtest.h>

#include "model/llama/sampler.h"

namespace opfuse::llama {
namespace {

// log-probabilities of [1/2, 1/4, 1/8, 1/8] shuffled: token 2 is the most likely.
const std::vector<float> kLogits = {std::log(0.125f), std::log(0.25f), std::log(0.5f), std::log(0.125f)};

void ExpectDist(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "token " << i;
}

TEST(Sampler, ArgmaxFirstOfTiesAndSkipsNan) {
  EXPECT_EQ(Argmax(kLogits), 2);
  EXPECT_EQ(Argmax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(Argmax(std::vector<float>{NAN, -5, NAN, -7}), 1);
  EXPECT_EQ(Argmax(std::vector<float>{}), -1);
}

TEST(Sampler, TemperatureOneIsSoftmax) {
  ExpectDist(SamplingDistribution(kLogits, {1.0}), {0.125, 0.25, 0.5, 0.125});
}

TEST(Sampler, TemperatureSharpens) {
  // p^(1/T) with T = 0.5: squares, renormalised (1/64 + 1/16 + 1/4 + 1/64 = 22/64).
  ExpectDist(SamplingDistribution(kLogits, {0.5}), {1.0 / 22, 4.0 / 22, 16.0 / 22, 1.0 / 22});
}

TEST(Sampler, TopK) {
  ExpectDist(SamplingDistribution(kLogits, {1.0, 2}), {0, 1.0 / 3, 2.0 / 3, 0});
  ExpectDist(SamplingDistribution(kLogits, {1.0, 1}), {0, 0, 1, 0});
  // Ties at the k-th value are kept: k = 3 keeps both 1/8 tokens.
  ExpectDist(SamplingDistribution(kLogits, {1.0, 3}), {0.125, 0.25, 0.5, 0.125});
}

TEST(Sampler, TopP) {
  // 0.5 < 0.7, 0.5 + 0.25 >= 0.7: the two most likely tokens.
  ExpectDist(SamplingDistribution(kLogits, {1.0, 0, 0.7}), {0, 1.0 / 3, 2.0 / 3, 0});
  // Mass 0.5 reaches 0.5 with one token.
  ExpectDist(SamplingDistribution(kLogits, {1.0, 0, 0.5}), {0, 0, 1, 0});
  // top-k then top-p: k = 3 leaves [1/8, 1/4, 1/2, 1/8] (tie kept), p = 0.8 needs three tokens (0.875 >= 0.8).
  auto d = SamplingDistribution(kLogits, {1.0, 3, 0.8});
  EXPECT_NEAR(d[2] + d[1], 6.0 / 7, 1e-6);
  EXPECT_NEAR(d[0], 1.0 / 7, 1e-6);  // the first of the tied 1/8 tokens (lower index)
  EXPECT_EQ(d[3], 0);
}

TEST(Sampler, GreedyIsOneHot) { ExpectDist(SamplingDistribution(kLogits, {0.0}), {0, 0, 1, 0}); }

TEST(Sampler, FrequenciesMatchDistribution) {
  for (SamplingParams p : {SamplingParams{1.0}, SamplingParams{0.5, 0, 1.0, 7}, SamplingParams{1.0, 2, 1.0, 3},
                           SamplingParams{1.0, 0, 0.7, 11}}) {
    const auto want = SamplingDistribution(kLogits, p);
    Sampler s(p);
    constexpr int kN = 40000;
    std::vector<int> count(4, 0);
    for (int i = 0; i < kN; ++i) count[s.Sample(kLogits)]++;
    for (int t = 0; t < 4; ++t) {
      // 5 standard deviations of a binomial proportion.
      const double sd = std::sqrt(want[t] * (1 - want[t]) / kN);
      EXPECT_NEAR(count[t] / double(kN), want[t], 5 * sd + 1e-9) << "token " << t << " T=" << p.temperature
                                                                 << " k=" << p.top_k << " p=" << p.top_p;
    }
  }
}

TEST(Sampler, DeterministicPerSeedAndStream) {
  std::vector<float> logits(100);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(i * 0.37) * 2);
  auto draw = [&](uint64_t seed, uint64_t stream) {
    Sampler s({1.0, 0, 1.0, seed}, stream);
    std::vector<int64_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.Sample(logits));
    return out;
  };
  EXPECT_EQ(draw(42, 0), draw(42, 0));
  EXPECT_NE(draw(42, 0), draw(43, 0));
  EXPECT_NE(draw(42, 0), draw(42, 1));
}

TEST(Sampler, Validation) {
  EXPECT_TRUE(ValidateSamplingParams({0.0}).ok());
  EXPECT_TRUE(ValidateSamplingParams({0.8, 40, 0.95, 1}).ok());
  auto bad = [](SamplingParams p, const char* word) {
    Status s = ValidateSamplingParams(p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(word), std::string::npos) << s.message();
  };
  bad({-1.0}, "temperature");
  bad({NAN}, "temperature");
  bad({1.0, -2}, "top-k");
  bad({1.0, 0, 0.0}, "top-p");
  bad({1.0, 0, 1.5}, "top-p");
}

}  // namespace
}  // namespace opfuse::llama
