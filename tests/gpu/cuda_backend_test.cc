// CUDA backend, first slice: device info, the caching allocator, and cuBLASLt matmul numerics.
//
// Design: every test skips (GTEST_SKIP with QueryDevice()'s reason) when there is no usable GPU,
// so test_gpu runs green on CPU-only machines; built without OPFUSE_CUDA there is one skipped
// placeholder. Matmul numerics follow DESIGN.md "Measuring": fresh signed random inputs
// (std::random_device seed, printed), outputs poisoned with 0xFF bytes (NaN for every float type)
// before each run, comparison with a float64 CPU reference computed from the very values the GPU
// saw (already rounded to the input dtype), norm-wise relative error with per-dtype bounds
// (bf16 1e-2, f16 2e-3, f32 1e-5, tf32 5e-3), all-zero / NaN outputs rejected, inputs checked
// unmodified. Shapes include M=1 (decode GEMV), odd M, K and N not multiples of 8 (f32/tf32),
// transpose_b both ways, with and without bias, and relu/gelu epilogues.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "ir/host_tensor.h"

#ifdef OPFUSE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "gpu/gpu_test_util.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/cublaslt_matmul.h"
#include "cuda/cuda_check.h"
#include "cuda/device.h"
#endif

namespace opfuse {
namespace {

#ifndef OPFUSE_WITH_CUDA

TEST(CudaBackendTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without OPFUSE_CUDA"; }

#else

using cuda::CachingAllocator;
using cuda::MatmulArgs;
using cuda::MatmulEpilogue;
using cuda::MatmulType;

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = cuda::QueryDevice();
    if (!d.ok()) GTEST_SKIP() << d.status().message();
    info_ = *d;
  }
  cuda::DeviceInfo info_;
};

// ------------------------------------------------------------------ device info

TEST(CudaBackendNoGpu, QueryDeviceNeverCrashes) {
  // On any machine: either a sane device or a clean Unavailable("no CUDA device: ...").
  auto d = cuda::QueryDevice();
  if (!d.ok()) {
    EXPECT_EQ(d.status().code(), StatusCode::kUnavailable) << d.status().ToString();
    EXPECT_NE(d.status().message().find("no CUDA device"), std::string::npos) << d.status().message();
  }
}

TEST_F(CudaBackendTest, DeviceInfoSane) {
  std::printf("device: %s\n", info_.ToString().c_str());
  EXPECT_FALSE(info_.name.empty());
  EXPECT_GE(info_.major, 7);
  EXPECT_EQ(info_.arch, "sm_" + std::to_string(info_.major) + std::to_string(info_.minor));
  EXPECT_GT(info_.sm_count, 0);
  EXPECT_GT(info_.l2_bytes, 1 << 20);
  EXPECT_GT(info_.total_memory_bytes, int64_t{1} << 30);
  EXPECT_GE(info_.max_shared_mem_per_block, 48 * 1024);
  EXPECT_GE(info_.max_shared_mem_per_block_optin, info_.max_shared_mem_per_block);
  EXPECT_GT(info_.driver_version, 0);
  EXPECT_GT(info_.runtime_version, 0);
  if (info_.major == 9) {  // Hopper: H100 has 132 (SXM) or 114 (PCIe) SMs, 50 MiB L2; H200 132 SMs, 60 MiB
    EXPECT_GE(info_.sm_count, 100);
    EXPECT_GE(info_.l2_bytes, int64_t{40} << 20);
    EXPECT_GE(info_.max_shared_mem_per_block_optin, 200 * 1024);
  }
}

// ------------------------------------------------------------------ allocator

TEST(CudaBackendAllocator, RoundSize) {  // pure host logic, runs without a GPU
  EXPECT_EQ(CachingAllocator::RoundSize(1), 256u);
  EXPECT_EQ(CachingAllocator::RoundSize(256), 256u);
  EXPECT_EQ(CachingAllocator::RoundSize(257), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(4096), 4096u);
  EXPECT_EQ(CachingAllocator::RoundSize(4097), 5120u);
  EXPECT_EQ(CachingAllocator::RoundSize(8192), 8192u);
  EXPECT_EQ(CachingAllocator::RoundSize(size_t{3} << 20), size_t{3} << 20);
  EXPECT_EQ(CachingAllocator::RoundSize((size_t{100} << 20) + 1), size_t{102} << 20);
  for (size_t s = 1; s < (size_t{256} << 20); s = s * 3 + 7) {
    size_t r = CachingAllocator::RoundSize(s);
    EXPECT_GE(r, s);
    EXPECT_EQ(r % 256, 0u) << s;
    EXPECT_LE(r, s + s / 4 + 256) << s;
  }
}

TEST_F(CudaBackendTest, AllocatorReuseAndStats) {
  CachingAllocator alloc;
  auto p = alloc.Allocate(1000);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_NE(*p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % 256, 0u);
  auto s = alloc.stats();
  EXPECT_EQ(s.num_allocs, 1);
  EXPECT_EQ(s.num_cache_hits, 0);
  EXPECT_EQ(s.num_device_mallocs, 1);
  EXPECT_EQ(s.bytes_in_use, 1024);
  EXPECT_EQ(s.bytes_requested, 1000);
  EXPECT_EQ(s.bytes_cached, 0);
  // The block is usable memory.
  ASSERT_OK(cuda::CudaStatus(cudaMemset(*p, 0x5a, 1000), "cudaMemset"));

  void* first = *p;
  ASSERT_OK(alloc.Free(first));
  s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.bytes_cached, 1024);

  auto q = alloc.Allocate(1000);  // same size: a cache hit, same pointer
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, first);
  auto r = alloc.Allocate(900);  // same class, but the cached one is taken: a new block
  ASSERT_TRUE(r.ok());
  EXPECT_NE(*r, first);
  s = alloc.stats();
  EXPECT_EQ(s.num_allocs, 3);
  EXPECT_EQ(s.num_cache_hits, 1);
  EXPECT_EQ(s.num_device_mallocs, 2);
  EXPECT_EQ(s.bytes_in_use, 2048);
  EXPECT_EQ(s.peak_bytes_in_use, 2048);

  // Another stream never gets a block freed for the default stream.
  cudaStream_t st = nullptr;
  ASSERT_OK(cuda::CudaStatus(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate"));
  ASSERT_OK(alloc.Free(*q));
  auto other = alloc.Allocate(1000, st);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, first);
  EXPECT_EQ(alloc.stats().num_cache_hits, 1);
  ASSERT_OK(alloc.Free(*other));
  ASSERT_OK(alloc.Free(*r));
  EXPECT_FALSE(alloc.Free(reinterpret_cast<void*>(0x1234)).ok());  // not ours
  EXPECT_TRUE(alloc.Free(nullptr).ok());

  s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.bytes_cached, 3 * 1024);
  ASSERT_OK(alloc.EmptyCache());
  s = alloc.stats();
  EXPECT_EQ(s.bytes_cached, 0);
  EXPECT_EQ(s.num_device_frees, 3);
  ASSERT_OK(cuda::CudaStatus(cudaStreamDestroy(st), "cudaStreamDestroy"));

  // DeviceBuffer returns its block on destruction.
  {
    auto b = cuda::DeviceBuffer::Make(alloc, 4096);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(alloc.stats().bytes_in_use, 4096);
  }
  EXPECT_EQ(alloc.stats().bytes_in_use, 0);
  EXPECT_EQ(alloc.stats().bytes_cached, 4096);
}

TEST_F(CudaBackendTest, AllocatorOutOfMemoryIsAStatus) {
  CachingAllocator alloc;
  auto keep = alloc.Allocate(1 << 20);
  ASSERT_TRUE(keep.ok());
  ASSERT_OK(alloc.Free(*keep));  // one cached block, which the OOM path must release
  const size_t huge = size_t{1} << 50;  // 1 PiB
  auto p = alloc.Allocate(huge);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("out of memory"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find(std::to_string(huge)), std::string::npos) << p.status().message();
  auto s = alloc.stats();
  EXPECT_EQ(s.num_oom_retries, 1);
  EXPECT_EQ(s.bytes_cached, 0);
  // The device is still usable afterwards.
  auto q = alloc.Allocate(4096);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ASSERT_OK(alloc.Free(*q));
}

// ------------------------------------------------------------------ matmul

struct MatmulCase {
  MatmulType type;
  int64_t m, n, k;
  bool transpose_b;
  bool bias;
  MatmulEpilogue epilogue = MatmulEpilogue::kNone;
};

std::string CaseName(const ::testing::TestParamInfo<MatmulCase>& info) {
  const auto& c = info.param;
  std::string s = std::string(cuda::MatmulTypeName(c.type)) + "_M" + std::to_string(c.m) + "_N" + std::to_string(c.n) +
                  "_K" + std::to_string(c.k) + (c.transpose_b ? "_BT" : "_B") + (c.bias ? "_bias" : "");
  if (c.epilogue == MatmulEpilogue::kRelu) s += "_relu";
  if (c.epilogue == MatmulEpilogue::kGelu) s += "_gelu";
  return s;
}

DType StorageType(MatmulType t) {
  switch (t) {
    case MatmulType::kF32:
    case MatmulType::kTF32: return DType::kF32;
    case MatmulType::kF16: return DType::kF16;
    case MatmulType::kBF16: return DType::kBF16;
  }
  return DType::kF32;
}

double Bound(MatmulType t) {
  switch (t) {
    case MatmulType::kBF16: return 1e-2;
    case MatmulType::kF16: return 2e-3;
    case MatmulType::kF32: return 1e-5;
    case MatmulType::kTF32: return 5e-3;
  }
  return 0;
}

struct DeviceCopy {
  CachingAllocator* alloc;
  void* ptr = nullptr;
  ~DeviceCopy() { if (ptr) (void)alloc->Free(ptr); }
};

class CudaBackendMatmulTest : public CudaBackendTest, public ::testing::WithParamInterface<MatmulCase> {};

TEST_P(CudaBackendMatmulTest, MatchesCpuFloat64) {
  const MatmulCase c = GetParam();
  const uint64_t seed = std::random_device{}();
  std::printf("[ seed     ] %s seed %llu\n", CaseName({c, 0}).c_str(), static_cast<unsigned long long>(seed));
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const DType dt = StorageType(c.type);
  HostTensor a(dt, {c.m, c.k});
  HostTensor b(dt, c.transpose_b ? std::vector<int64_t>{c.n, c.k} : std::vector<int64_t>{c.k, c.n});
  HostTensor bias(dt, {c.n});
  FillRandom(a, rng);
  FillRandom(b, rng);
  FillRandom(bias, rng);

  // float64 reference from the stored (rounded) values.
  std::vector<double> av(a.numel()), bv(b.numel()), ref(static_cast<size_t>(c.m * c.n));
  for (int64_t i = 0; i < a.numel(); ++i) av[i] = a.get(i);
  for (int64_t i = 0; i < b.numel(); ++i) bv[i] = b.get(i);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double acc = 0;
      for (int64_t kk = 0; kk < c.k; ++kk)
        acc += av[i * c.k + kk] * (c.transpose_b ? bv[j * c.k + kk] : bv[kk * c.n + j]);
      if (c.bias) acc += bias.get(j);
      if (c.epilogue == MatmulEpilogue::kRelu) acc = std::max(acc, 0.0);
      if (c.epilogue == MatmulEpilogue::kGelu)
        acc = 0.5 * acc * (1 + std::tanh(std::sqrt(2 / M_PI) * (acc + 0.044715 * acc * acc * acc)));
      ref[i * c.n + j] = acc;
    }
  }

  CachingAllocator& alloc = CachingAllocator::ForDevice(info_.ordinal);
  cudaStream_t stream = nullptr;
  ASSERT_OK(cuda::CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  auto upload = [&](const HostTensor& h, DeviceCopy& d) {
    auto p = alloc.Allocate(h.data.size(), stream);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    d.ptr = *p;
    ASSERT_OK(cuda::CudaStatus(cudaMemcpyAsync(d.ptr, h.data.data(), h.data.size(), cudaMemcpyHostToDevice, stream),
                               "cudaMemcpyAsync"));
  };
  DeviceCopy da{&alloc}, db{&alloc}, dbias{&alloc}, dc{&alloc};
  upload(a, da);
  upload(b, db);
  upload(bias, dbias);
  HostTensor out(dt, {c.m, c.n});
  {
    auto p = alloc.Allocate(out.data.size(), stream);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    dc.ptr = *p;
  }
  ASSERT_OK(cuda::CudaStatus(cudaMemsetAsync(dc.ptr, 0xFF, out.data.size(), stream), "poison"));  // NaN

  MatmulArgs args;
  args.type = c.type;
  args.m = c.m;
  args.n = c.n;
  args.k = c.k;
  args.a = da.ptr;
  args.b = db.ptr;
  args.bias = c.bias ? dbias.ptr : nullptr;
  args.c = dc.ptr;
  args.transpose_b = c.transpose_b;
  args.epilogue = c.epilogue;
  ASSERT_OK(cuda::Matmul(args, stream));

  ASSERT_OK(cuda::CudaStatus(cudaMemcpyAsync(out.data.data(), dc.ptr, out.data.size(), cudaMemcpyDeviceToHost, stream),
                             "cudaMemcpyAsync"));
  HostTensor a_back(dt, a.shape), b_back(dt, b.shape);
  ASSERT_OK(cuda::CudaStatus(cudaMemcpyAsync(a_back.data.data(), da.ptr, a.data.size(), cudaMemcpyDeviceToHost, stream),
                             "cudaMemcpyAsync"));
  ASSERT_OK(cuda::CudaStatus(cudaMemcpyAsync(b_back.data.data(), db.ptr, b.data.size(), cudaMemcpyDeviceToHost, stream),
                             "cudaMemcpyAsync"));
  ASSERT_OK(cuda::CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  ASSERT_OK(cuda::CudaStatus(cudaStreamDestroy(stream), "cudaStreamDestroy"));
  EXPECT_EQ(a_back.data, a.data) << "A was modified";
  EXPECT_EQ(b_back.data, b.data) << "B was modified";

  double num = 0, den = 0;
  int64_t nonfinite = 0, nonzero = 0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double o = out.get(i);
    if (!std::isfinite(o)) {
      ++nonfinite;
      continue;
    }
    if (o != 0) ++nonzero;
    num += (o - ref[i]) * (o - ref[i]);
    den += ref[i] * ref[i];
  }
  ASSERT_EQ(nonfinite, 0) << "non-finite outputs (unwritten or NaN)";
  ASSERT_GT(nonzero, 0) << "all-zero output";
  const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
  EXPECT_LE(rel, Bound(c.type)) << CaseName({c, 0}) << " relative error " << rel;
  std::printf("[ rel err  ] %s %.3e (bound %.0e)\n", CaseName({c, 0}).c_str(), rel, Bound(c.type));
}

std::vector<MatmulCase> AllCases() {
  struct Shape { int64_t m, n, k; };
  // Aligned shapes (every row 16-byte aligned for 2-byte types): decode GEMV, odd M, prefill-ish.
  const std::vector<Shape> aligned = {{1, 2048, 2048}, {1, 5632, 2048}, {7, 256, 512}, {64, 384, 1024},
                                      {33, 512, 2048}, {128, 256, 96}};
  // K and N not multiples of 8 (and N = 1): for the 4-byte types.
  const std::vector<Shape> odd = {{7, 13, 45}, {5, 100, 37}, {1, 9, 77}, {3, 1, 5}, {17, 1001, 259}};
  std::vector<MatmulCase> cases;
  for (MatmulType t : {MatmulType::kBF16, MatmulType::kF16, MatmulType::kF32, MatmulType::kTF32}) {
    std::vector<Shape> shapes = aligned;
    if (t == MatmulType::kF32 || t == MatmulType::kTF32) shapes.insert(shapes.end(), odd.begin(), odd.end());
    for (const Shape& s : shapes)
      for (bool tb : {false, true})
        for (bool bias : {false, true}) cases.push_back({t, s.m, s.n, s.k, tb, bias});
  }
  // Activation epilogues (with and without bias).
  for (MatmulType t : {MatmulType::kBF16, MatmulType::kF32}) {
    cases.push_back({t, 7, 256, 512, true, true, MatmulEpilogue::kRelu});
    cases.push_back({t, 7, 256, 512, true, false, MatmulEpilogue::kRelu});
    cases.push_back({t, 16, 256, 512, true, true, MatmulEpilogue::kGelu});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, CudaBackendMatmulTest, ::testing::ValuesIn(AllCases()), CaseName);

TEST_F(CudaBackendTest, MatmulPlansAreCachedAndArgsChecked) {
  auto eng = cuda::MatmulEngine::Create();
  ASSERT_TRUE(eng.ok()) << eng.status().ToString();
  CachingAllocator& alloc = CachingAllocator::ForDevice(info_.ordinal);
  const int64_t m = 4, n = 64, k = 32;
  auto a = alloc.Allocate(m * k * 2), b = alloc.Allocate(k * n * 2), c = alloc.Allocate(m * n * 2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_OK(cuda::CudaStatus(cudaMemset(*a, 0x3c, m * k * 2), "memset"));  // f16 ~1.06
  ASSERT_OK(cuda::CudaStatus(cudaMemset(*b, 0x3c, k * n * 2), "memset"));
  MatmulArgs args{MatmulType::kF16, m, n, k, *a, *b, nullptr, *c};
  ASSERT_OK((*eng)->Matmul(args, nullptr));
  ASSERT_OK((*eng)->Matmul(args, nullptr));
  EXPECT_EQ((*eng)->plan_misses(), 1);
  EXPECT_EQ((*eng)->cached_plans(), 1u);
  args.transpose_b = true;
  ASSERT_OK((*eng)->Matmul(args, nullptr));
  EXPECT_EQ((*eng)->plan_misses(), 2);
  ASSERT_OK(cuda::CudaStatus(cudaDeviceSynchronize(), "sync"));

  MatmulArgs bad = args;
  bad.m = -1;
  EXPECT_EQ((*eng)->Matmul(bad, nullptr).code(), StatusCode::kInvalidArgument);
  bad = args;
  bad.a = nullptr;
  EXPECT_EQ((*eng)->Matmul(bad, nullptr).code(), StatusCode::kInvalidArgument);
  bad = args;
  bad.m = 0;
  EXPECT_TRUE((*eng)->Matmul(bad, nullptr).ok());  // empty output: nothing to do
  ASSERT_OK(alloc.Free(*a));
  ASSERT_OK(alloc.Free(*b));
  ASSERT_OK(alloc.Free(*c));
}

#endif  // OPFUSE_WITH_CUDA

}  // namespace
}  // namespace opfuse
