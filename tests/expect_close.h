// ExpectClose: the output-vs-reference check the executor, GEMV and background-compile tests share.
// The output must be finite (a NaN is poison the run left unwritten), not all zero unless the
// reference is, and within Bound(dtype) in RelErr for float tensors (tests/jit_cases.h); integer
// tensors must be equal element by element.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "jit_cases.h"

namespace opfuse::testing_cases {

inline void ExpectClose(const std::string& what, const HostTensor& out, const HostTensor& ref) {
  ASSERT_EQ(out.shape, ref.shape) << what;
  bool any_nonzero = false, ref_nonzero = false;
  for (int64_t i = 0; i < out.numel(); ++i) {
    ASSERT_FALSE(std::isnan(out.get(i))) << what << ": NaN (poison left unwritten) at " << i;
    any_nonzero |= out.get(i) != 0;
    ref_nonzero |= ref.get(i) != 0;
  }
  if (ref_nonzero) {
    EXPECT_TRUE(any_nonzero) << what << ": all zero";
  }
  if (IsFloat(ref.dtype)) {
    EXPECT_LE(RelErr(out, ref), Bound(ref.dtype)) << what;
  } else {
    for (int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(out.get(i), ref.get(i)) << what << " at " << i;
  }
}

}  // namespace opfuse::testing_cases
