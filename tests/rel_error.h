// RelError: the logits check the engine tests share — max |a - b| / max |b| over two vectors of
// the same length (a non-fatal failure when the lengths differ or b is all zero; the latter returns
// infinity, so a bound on it fails too).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace opfuse::testing {

inline double RelError(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - b[i]));
    den = std::max(den, std::abs(double(b[i])));
  }
  EXPECT_GT(den, 0) << "all-zero logits";
  return den > 0 ? num / den : INFINITY;
}

}  // namespace opfuse::testing
