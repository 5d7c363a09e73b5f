// Destroying a stream returns what the process-wide caches hold for it (runtime/cuda/stream.h):
// the cuBLASLt workspace and the allocator's cached blocks; a block still live when its stream is
// retired goes back to the device when freed. And an engine created and destroyed repeatedly in
// one process leaves the device's free memory where the first one left it.
#ifdef OPFUSE_WITH_CUDA
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

#include "cuda/cuda_check.h"
#include "gpu/gpu_test_util.h"
#include "model/llama/engine.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/cublaslt_matmul.h"
#include "runtime/cuda/stream.h"

namespace opfuse {
namespace {

using StreamRelease = testing_gpu::WithGpu<>;

TEST_F(StreamRelease, DestroyStreamFreesWorkspaceAndCachedBlocks) {
  ASSERT_CUDA(cudaSetDevice(dev_.ordinal));
  auto eng = cuda::MatmulEngine::ForCurrentDevice();
  ASSERT_TRUE(eng.ok()) << eng.status().ToString();
  cuda::CachingAllocator& alloc = cuda::CachingAllocator::ForDevice(dev_.ordinal);
  cudaStream_t s = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t ws0 = (*eng)->workspaces();
  const int64_t m = 3, n = 64, k = 32;
  auto a = alloc.Allocate(m * k * 2, s), b = alloc.Allocate(k * n * 2, s), c = alloc.Allocate(m * n * 2, s);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_CUDA(cudaMemsetAsync(*a, 0x3c, m * k * 2, s));
  ASSERT_CUDA(cudaMemsetAsync(*b, 0x3c, k * n * 2, s));
  ASSERT_OK(cuda::Matmul({cuda::MatmulType::kF16, m, n, k, *a, *b, nullptr, *c}, s));
  EXPECT_EQ((*eng)->workspaces(), ws0 + 1);
  ASSERT_OK(alloc.Free(*a));  // cached under s
  ASSERT_OK(alloc.Free(*b));
  const cuda::AllocatorStats before = alloc.stats();
  EXPECT_GE(before.bytes_cached, static_cast<int64_t>(cuda::CachingAllocator::RoundSize(m * k * 2) +
                                                      cuda::CachingAllocator::RoundSize(k * n * 2)));
  ASSERT_OK(cuda::DestroyStream(s));
  const cuda::AllocatorStats after = alloc.stats();
  EXPECT_EQ((*eng)->workspaces(), ws0);
  EXPECT_EQ(after.num_device_frees, before.num_device_frees + 2);
  EXPECT_EQ(after.bytes_cached, before.bytes_cached - static_cast<int64_t>(cuda::CachingAllocator::RoundSize(m * k * 2) +
                                                                           cuda::CachingAllocator::RoundSize(k * n * 2)));
  // c was live when its stream went: freed now, it goes back to the device, not to a free list.
  ASSERT_OK(alloc.Free(*c));
  EXPECT_EQ(alloc.stats().bytes_cached, after.bytes_cached);
  EXPECT_EQ(alloc.stats().num_device_frees, after.num_device_frees + 1);
  EXPECT_TRUE(cuda::DestroyStream(nullptr).ok());
}

size_t FreeBytes() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  return free_b;
}

// Engines one after another, as `opfuse bench e2e` and the profiler create them: each must give
// back its device memory (its stream's cuBLASLt workspace was lost per engine before).
TEST_F(StreamRelease, EnginesCreatedAndDestroyedKeepDeviceMemory) {
  const std::string dir = std::string(OPFUSE_SOURCE_DIR) + "/tests/data/families/llama";
  size_t first = 0;
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    {
      llama::EngineOptions o;
      o.model_dir = dir;
      o.backend = "cuda";
      o.strategy = i % 2 ? llama::Strategy::kNeverFuse : llama::Strategy::kAlwaysFuse;
      o.batch = 4;  // prefill and batch-4 decode matmuls go to cuBLASLt on the engine's stream
      o.max_context = 64;
      auto e = llama::Engine::Create(o);
      ASSERT_TRUE(e.ok()) << e.status().message();
      llama::GenerateOptions g;
      g.max_new_tokens = 4;
      auto r = (*e)->Generate({{1, 2, 3, 4, 5, 6}, {6, 5, 4, 3, 2, 1}, {3, 4, 3, 4, 3, 4}, {9, 9, 9, 9, 9, 9}}, g);
      ASSERT_TRUE(r.ok()) << r.status().message();
    }
    ASSERT_CUDA(cudaDeviceSynchronize());
    if (i == 1) first = FreeBytes();  // after one engine of each strategy: the kernels are loaded
    if (i == 3) {
      const size_t now = FreeBytes();
      // 32 MiB a cuBLASLt workspace: two lost engines would be 64 MiB; allow the driver 8 MiB.
      EXPECT_GE(now + (size_t{8} << 20), first) << "free " << first << " -> " << now << " bytes";
    }
  }
}

}  // namespace
}  // namespace opfuse
#endif  // OPFUSE_WITH_CUDA
