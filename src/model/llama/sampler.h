// Token sampling from one sequence's logits: greedy (argmax) and seeded temperature / top-k /
// top-p sampling, with Hugging Face's order of warpers (temperature, then top-k, then top-p).
//
// Design note: sampling is host work on a [vocab] row of f32 logits, so it is plain C++ with no
// dependence on the backend. It must be deterministic for a seed on every platform, hence a
// SplitMix64 generator and our own uniform draw (std::uniform_real_distribution is
// implementation-defined). Distribution() returns the exact probabilities the sampler draws from,
// so tests can check warpers on hand-computable inputs and then check the sampler's frequencies
// against that distribution. Ties: argmax returns the lowest index (as torch.argmax); sorting by
// probability breaks ties by index, so a distribution never depends on sort stability.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "opfuse/status.h"

namespace opfuse::llama {

struct SamplingParams {
  double temperature = 0;  // 0: greedy (argmax); > 0: sample from softmax(logits / temperature)
  int64_t top_k = 0;       // 0: off; else keep the k most likely tokens (ties at the k-th value kept)
  double top_p = 1.0;      // 1: off; else keep the smallest most-likely set whose mass reaches top_p
  uint64_t seed = 0;
  bool greedy() const { return temperature == 0; }
};

// InvalidArgument naming the field: temperature < 0 or not finite, top_k < 0, top_p not in (0, 1].
Status ValidateSamplingParams(const SamplingParams& p);

// Index of the largest logit (the lowest such index on ties; NaN never wins). -1 for an empty row.
int64_t Argmax(std::span<const float> logits);

// The probabilities sampling draws from (zeros for tokens the warpers removed; sums to 1).
// Greedy params give a one-hot at Argmax.
std::vector<double> SamplingDistribution(std::span<const float> logits, const SamplingParams& p);

class Sampler {
 public:
  // `stream` separates sequences of one batch: each (seed, stream) pair has its own generator.
  explicit Sampler(const SamplingParams& p, uint64_t stream = 0);
  // Draws one token from SamplingDistribution(logits, params).
  int64_t Sample(std::span<const float> logits);
  const SamplingParams& params() const { return p_; }

 private:
  double Uniform();  // [0, 1)
  SamplingParams p_;
  uint64_t state_;
};

}  // namespace opfuse::llama
