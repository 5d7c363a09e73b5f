// See bench_kernels.h. Grid-stride kernels sized from the SM count; the copy kernel issues four
// independent 16-byte loads per thread before its stores so enough bytes are in flight to reach
// HBM bandwidth (a plain one-load loop stalls on latency).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include <fmt/format.h>

#include "bench/cuda/bench_kernels.h"
#include "cuda/cuda_check.h"

namespace opfuse::bench {
namespace {

constexpr int kThreads = 256;

// One 16-byte vector per thread on a grid that covers the copy (docs/BENCHMARKS.md): at 134 MB and
// 1 GiB it reaches cudaMemcpy's level, faster than a grid-stride loop with 4 vectors in flight on
// 8 x SMs blocks (the kernel before) and than a grid of n / 4 threads.
__global__ void Copy16Kernel(const int4* __restrict__ src, int4* __restrict__ dst, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i];
}

__device__ __forceinline__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SpinKernel(unsigned long long ns) {
  const unsigned long long start = GlobalTimerNs();
  while (GlobalTimerNs() - start < ns) __nanosleep(200);
}

__global__ void GateKernel(const volatile unsigned long long* release, volatile unsigned long long* running,
                           unsigned long long ticket, unsigned long long max_ns, volatile unsigned* timed_out) {
  *running = ticket;
  __threadfence_system();
  const unsigned long long start = GlobalTimerNs();
  while (*release < ticket) {
    if (GlobalTimerNs() - start > max_ns) {
      *timed_out = 1u;
      __threadfence_system();
      return;
    }
    __nanosleep(100);
  }
}

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__global__ void FillKernel(T* __restrict__ p, int64_t n, uint64_t seed, bool positive, Dist dist, int64_t row_len) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = FromFloat<T>(FillValue(dist, seed, i, row_len, positive));
}

__global__ void FillIdsKernel(int32_t* __restrict__ p, int64_t n, uint64_t range, uint64_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = FillId(seed, i, range);
}

unsigned GridFor(int64_t work_items, int sm_count, int blocks_per_sm) {
  const int64_t want = (work_items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(want, int64_t{std::max(sm_count, 1)} * blocks_per_sm)));
}

}  // namespace

Status LaunchCopy16(const void* src, void* dst, size_t bytes, cudaStream_t stream) {
  if (bytes % 16 || reinterpret_cast<uintptr_t>(src) % 16 || reinterpret_cast<uintptr_t>(dst) % 16)
    return InvalidArgument(fmt::format("copy kernel: {} bytes / pointers not 16-byte aligned", bytes));
  const int64_t n = static_cast<int64_t>(bytes / 16);
  if (n == 0) return Status::Ok();
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > int64_t{0x7fffffff}) return InvalidArgument(fmt::format("copy kernel: {} bytes is more than one grid covers", bytes));
  Copy16Kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<const int4*>(src), static_cast<int4*>(dst), n);
  OPFUSE_CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status LaunchSpin(double us, cudaStream_t stream) {
  const double ns = std::max(0.0, us) * 1e3;
  SpinKernel<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(ns));
  OPFUSE_CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status LaunchGate(const volatile uint64_t* release, volatile uint64_t* running, uint64_t ticket, double max_us,
                  volatile uint32_t* timed_out, cudaStream_t stream) {
  if (!release || !running || !timed_out) return InvalidArgument("LaunchGate: null flag pointer");
  GateKernel<<<1, 1, 0, stream>>>(reinterpret_cast<const volatile unsigned long long*>(release),
                                  reinterpret_cast<volatile unsigned long long*>(running), ticket,
                                  static_cast<unsigned long long>(std::max(0.0, max_us) * 1e3),
                                  reinterpret_cast<volatile unsigned*>(timed_out));
  OPFUSE_CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

__global__ void L2DemoteKernel(const char* p, unsigned long long lines) {
#if __CUDA_ARCH__ >= 800
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < lines;
       i += (unsigned long long)gridDim.x * blockDim.x)
    asm volatile("applypriority.global.L2::evict_normal [%0], 128;" ::"l"(p + i * 128) : "memory");
#endif
}

Status LaunchL2Demote(const void* p, size_t bytes, cudaStream_t stream) {
  if (!p || bytes == 0) return Status::Ok();
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{127};
  const unsigned long long lines = (reinterpret_cast<uintptr_t>(p) + bytes - lo + 127) / 128;
  const unsigned grid = static_cast<unsigned>(std::min<unsigned long long>((lines + kThreads - 1) / kThreads, 1024));
  L2DemoteKernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<const char*>(lo), lines);
  OPFUSE_CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status LaunchFillUniform(void* p, DType dtype, int64_t n, uint64_t seed, bool positive, int sm_count,
                         cudaStream_t stream) {
  return LaunchFill(p, dtype, n, seed, positive, Dist::kUniform, n, sm_count, stream);
}

Status LaunchFill(void* p, DType dtype, int64_t n, uint64_t seed, bool positive, Dist dist, int64_t row_len, int sm_count,
                  cudaStream_t stream) {
  if (n <= 0) return Status::Ok();
  const unsigned grid = GridFor(n, sm_count, 4);
  switch (dtype) {
    case DType::kF32:
      FillKernel<float><<<grid, kThreads, 0, stream>>>(static_cast<float*>(p), n, seed, positive, dist, row_len);
      break;
    case DType::kF16:
      FillKernel<__half><<<grid, kThreads, 0, stream>>>(static_cast<__half*>(p), n, seed, positive, dist, row_len);
      break;
    case DType::kBF16:
      FillKernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(p), n, seed, positive, dist,
                                                              row_len);
      break;
    default:
      return InvalidArgument(fmt::format("random fill: {} is not a float dtype", DTypeName(dtype)));
  }
  OPFUSE_CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

Status LaunchFillIds(int32_t* p, int64_t n, int64_t range, uint64_t seed, int sm_count, cudaStream_t stream) {
  if (n <= 0) return Status::Ok();
  if (range <= 0) return InvalidArgument("id fill: range must be positive");
  FillIdsKernel<<<GridFor(n, sm_count, 4), kThreads, 0, stream>>>(p, n, static_cast<uint64_t>(range), seed);
  OPFUSE_CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

}  // namespace opfuse::bench
