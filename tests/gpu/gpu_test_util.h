// Shared pieces of the GPU tests (tests/gpu/*.cc, CUDA builds only): the fixture that skips with
// QueryDevice()'s reason where no GPU is usable, and the Status / cudaError_t assertion macros.
// Kept tiny on purpose: each test file owns its data set-up and comparisons.
#pragma once
#ifdef OPFUSE_WITH_CUDA
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>

#include "cuda/device.h"

// ASSERT on an opfuse::Status expression, printing the expression and the status.
#define ASSERT_OK(expr)                                     \
  do {                                                      \
    ::opfuse::Status _s = (expr);                           \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.ToString(); \
  } while (0)

// ASSERT on a cudaError_t expression, printing the expression and the CUDA error string.
#define ASSERT_CUDA(call)                                                     \
  do {                                                                        \
    cudaError_t _e = (call);                                                  \
    ASSERT_EQ(_e, cudaSuccess) << #call << ": " << cudaGetErrorString(_e);    \
  } while (0)

namespace opfuse::testing_gpu {

// Base fixture: skips every test of the suite without a usable GPU; dev_ describes the device.
// `Base` is ::testing::Test or ::testing::TestWithParam<P>.
template <class Base = ::testing::Test>
class WithGpu : public Base {
 protected:
  void SetUp() override {
    auto d = cuda::QueryDevice();
    if (!d.ok()) GTEST_SKIP() << d.status().message();
    dev_ = *d;
  }
  cuda::DeviceInfo dev_;
};

// A fresh random seed (printed, so a failing run can be replayed).
inline uint64_t FreshSeed() {
  uint64_t s = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(s));
  return s;
}

}  // namespace opfuse::testing_gpu
#endif  // OPFUSE_WITH_CUDA
