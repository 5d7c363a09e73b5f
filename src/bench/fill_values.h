// The values the benchmark and evaluator fill inputs with, as one formula for the host (the CPU
// backend of `opfuse eval`, tests) and the device (bench/cuda/bench_kernels.cu, which fills
// gigabytes of rotated inputs in milliseconds): counter-based, so element i of a tensor depends
// only on (seed, i) and never on a launch shape or an RNG's state. Never zeros for kUniform
// (DESIGN.md "Measuring": never time or test on zeros). The distributions are bench::Dist
// (op_suite.h says what each is for).
#pragma once
#include <cmath>
#include <cstdint>

#include "bench/op_suite.h"

#if defined(__CUDACC__)
#define OPFUSE_HD __host__ __device__ __forceinline__
#else
#define OPFUSE_HD inline
#endif

namespace opfuse::bench {

OPFUSE_HD uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// 24 random bits of (seed, i).
OPFUSE_HD uint64_t RandomBits24(uint64_t seed, int64_t i) {
  return SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(i))) >> 40;
}

// Uniform in [-1, 1).
OPFUSE_HD float UniformSigned(uint64_t seed, int64_t i) {
  return static_cast<float>(RandomBits24(seed, i)) * (2.0f / 16777216.0f) - 1.0f;
}

// Element i of a tensor whose rows (dim 0) hold `row_len` elements, with distribution `d`;
// `positive`: |v| + 0.5 (Fill::kPositive).
OPFUSE_HD float FillValue(Dist d, uint64_t seed, int64_t i, int64_t row_len, bool positive) {
  float v = UniformSigned(seed, i);
  switch (d) {
    case Dist::kUniform:
      break;
    case Dist::kRowScaled: {
      const int64_t r = row_len > 0 ? i / row_len : 0;
      const float scale = exp2f(2.0f * UniformSigned(seed ^ 0x5ca1e5ca1e5ca1e5ull, r));
      const float offset = UniformSigned(seed ^ 0x0ff5e70ff5e70ff5ull, r);
      v = scale * v + offset;
      break;
    }
    case Dist::kOutliers: {
      const uint64_t h = SplitMix64(seed ^ 0x07e1e707e1e707e1ull ^ SplitMix64(static_cast<uint64_t>(i)));
      if ((h & 255) == 0) v = (v < 0 ? -1.0f : 1.0f) * (16.0f + 48.0f * static_cast<float>((h >> 8) & 0xFFFF) / 65536.0f);
      break;
    }
    case Dist::kNormal: {  // Box-Muller on two 24-bit uniforms in (0, 1]
      const float u1 = (static_cast<float>(RandomBits24(seed ^ 0x6a55a6a55a6a55a6ull, i)) + 1.0f) / 16777216.0f;
      const float u2 = static_cast<float>(RandomBits24(seed ^ 0x1b873593cc9e2d51ull, i)) / 16777216.0f;
      v = 3.0f * sqrtf(-2.0f * logf(u1)) * cosf(6.28318530718f * u2);
      break;
    }
  }
  return positive ? fabsf(v) + 0.5f : v;
}

// Ids uniform in [0, range).
OPFUSE_HD int32_t FillId(uint64_t seed, int64_t i, uint64_t range) {
  return static_cast<int32_t>(SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(i))) % range);
}

// The row length FillValue takes for a tensor of `shape`: the elements per index of dim 0 (a 1-D
// or scalar tensor is one row).
inline int64_t FillRowLen(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t k = shape.size() >= 2 ? 1 : 0; k < shape.size(); ++k) n *= shape[k];
  return n;
}

}  // namespace opfuse::bench
