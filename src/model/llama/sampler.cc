// Sampler (see sampler.h): temperature -> top-k -> top-p over a sorted copy of the row, then an
// inverse-CDF draw. O(V log V) per token on the host, negligible next to a decode step.
#include "model/llama/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

namespace opfuse::llama {

Status ValidateSamplingParams(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    return InvalidArgument(fmt::format("temperature must be a finite number >= 0 (0 = greedy), got {}", p.temperature));
  if (p.top_k < 0) return InvalidArgument(fmt::format("top-k must be >= 0 (0 = off), got {}", p.top_k));
  if (!(p.top_p > 0 && p.top_p <= 1))
    return InvalidArgument(fmt::format("top-p must be in (0, 1] (1 = off), got {}", p.top_p));
  return Status::Ok();
}

int64_t Argmax(std::span<const float> logits) {
  int64_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[best]) best = static_cast<int64_t>(i);
  }
  if (best < 0 && !logits.empty()) best = 0;  // all NaN: a defined answer, the caller's checks catch NaN logits
  return best;
}

std::vector<double> SamplingDistribution(std::span<const float> logits, const SamplingParams& p) {
  const size_t V = logits.size();
  std::vector<double> prob(V, 0.0);
  if (V == 0) return prob;
  if (p.greedy()) {
    prob[Argmax(logits)] = 1.0;
    return prob;
  }
  // Token order: most likely first, ties by index.
  std::vector<int64_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  size_t keep = V;
  // top-k: the k largest, plus anything tied with the k-th (HF keeps logits >= the k-th value).
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < V) {
    keep = static_cast<size_t>(p.top_k);
    while (keep < V && logits[order[keep]] == logits[order[keep - 1]]) ++keep;
  }
  // softmax(logits / T) over the kept tokens, in f64.
  const double mx = logits[order[0]] / p.temperature;
  std::vector<double> e(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += e[i] = std::exp(logits[order[i]] / p.temperature - mx);
  for (auto& x : e) x /= sum;
  // top-p: the shortest prefix whose mass reaches top_p (at least one token).
  if (p.top_p < 1) {
    double cum = 0;
    size_t n = 0;
    while (n < keep && (n == 0 || cum < p.top_p)) cum += e[n++];
    keep = n;
    sum = cum;
    for (size_t i = 0; i < keep; ++i) e[i] /= sum;
  }
  for (size_t i = 0; i < keep; ++i) prob[order[i]] = e[i];
  return prob;
}

Sampler::Sampler(const SamplingParams& p, uint64_t stream) : p_(p) {
  state_ = p.seed * 0x9e3779b97f4a7c15ull ^ (stream + 1) * 0xd1b54a32d192ed03ull;
}

double Sampler::Uniform() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);  // SplitMix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

int64_t Sampler::Sample(std::span<const float> logits) {
  if (p_.greedy()) return Argmax(logits);
  const std::vector<double> prob = SamplingDistribution(logits, p_);
  const double u = Uniform();
  double cum = 0;
  int64_t last = -1;
  for (size_t i = 0; i < prob.size(); ++i) {
    if (prob[i] == 0) continue;
    last = static_cast<int64_t>(i);
    cum += prob[i];
    if (u < cum) return last;
  }
  return last;  // rounding left u above the total: the last kept token
}

}  // namespace opfuse::llama
