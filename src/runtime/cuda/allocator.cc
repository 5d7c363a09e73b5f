// See allocator.h for the design.
#include "runtime/cuda/allocator.h"

#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "cuda/cuda_check.h"

namespace opfuse::cuda {

namespace {
constexpr size_t kSmallGranule = 256;
constexpr size_t kSmallLimit = 4096;
constexpr size_t kLargeGranule = size_t{2} << 20;
constexpr size_t kLargeLimit = size_t{64} << 20;

size_t RoundUp(size_t x, size_t m) { return (x + m - 1) / m * m; }

// Restores the caller's current device on scope exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) { cudaGetLastError(); prev_ = -1; }
    if (prev_ != device && cudaSetDevice(device) != cudaSuccess) cudaGetLastError();
  }
  ~DeviceGuard() {
    int cur = -1;
    if (prev_ >= 0 && cudaGetDevice(&cur) == cudaSuccess && cur != prev_) cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
};
}  // namespace

size_t CachingAllocator::RoundSize(size_t bytes) {
  if (bytes <= kSmallLimit) return RoundUp(std::max<size_t>(bytes, 1), kSmallGranule);
  if (bytes > kLargeLimit) return RoundUp(bytes, kLargeGranule);
  // 4 classes per power of two: p, 1.25p, 1.5p, 1.75p, 2p with p the largest power of two < bytes.
  size_t p = 1;
  while (p * 2 < bytes) p *= 2;
  const size_t step = p / 4;
  return RoundUp(bytes, step);
}

CachingAllocator::CachingAllocator() {
  if (cudaGetDevice(&device_) != cudaSuccess) {
    cudaGetLastError();
    device_ = 0;
  }
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!live_.empty())
    std::fprintf(stderr, "opfuse: CachingAllocator destroyed with %zu live blocks (%lld bytes)\n", live_.size(),
                 static_cast<long long>(stats_.bytes_in_use));
  (void)EmptyCacheLocked();
}

StatusOr<void*> CachingAllocator::Allocate(size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  const size_t size = RoundSize(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* ptr = nullptr;
  auto it = free_.find({stream, size});
  if (it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    if (it->second.empty()) free_.erase(it);
    stats_.bytes_cached -= static_cast<int64_t>(size);
    stats_.num_cache_hits++;
  } else {
    DeviceGuard guard(device_);
    cudaError_t e = cudaMalloc(&ptr, size);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      stats_.num_oom_retries++;
      OPFUSE_RETURN_IF_ERROR(EmptyCacheLocked());
      e = cudaMalloc(&ptr, size);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
      return Internal(fmt::format(
          "CUDA out of memory: cudaMalloc of {} bytes (requested {}) on device {} failed: {}; "
          "{} bytes in use by opfuse, cache emptied, device free {} of {} bytes",
          size, bytes, device_, cudaGetErrorString(e), stats_.bytes_in_use, free_b, total_b));
    }
    stats_.num_device_mallocs++;
  }
  live_[ptr] = Block{size, bytes, stream};
  stats_.num_allocs++;
  stats_.bytes_in_use += static_cast<int64_t>(size);
  stats_.bytes_requested += static_cast<int64_t>(bytes);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return ptr;
}

Status CachingAllocator::Free(void* ptr) {
  if (ptr == nullptr) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return InvalidArgument(fmt::format("CachingAllocator::Free: {} was not allocated here", ptr));
  const Block b = it->second;
  live_.erase(it);
  stats_.bytes_in_use -= static_cast<int64_t>(b.size);
  stats_.bytes_requested -= static_cast<int64_t>(b.requested);
  if (b.retired) {
    DeviceGuard guard(device_);
    stats_.num_device_frees++;
    OPFUSE_CUDA_CHECK(cudaFree(ptr));
    return Status::Ok();
  }
  stats_.bytes_cached += static_cast<int64_t>(b.size);
  free_[{b.stream, b.size}].push_back(ptr);
  return Status::Ok();
}

Status CachingAllocator::ReleaseStream(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [p, b] : live_)
    if (b.stream == stream) b.retired = true;
  DeviceGuard guard(device_);
  bool synced = false;
  Status first;
  for (auto it = free_.begin(); it != free_.end();) {
    if (it->first.first != stream) {
      ++it;
      continue;
    }
    if (!synced) {
      OPFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
      synced = true;
    }
    for (void* p : it->second) {
      cudaError_t e = cudaFree(p);
      if (e != cudaSuccess && first.ok()) first = CudaStatus(e, "cudaFree(cached block)");
      stats_.num_device_frees++;
      stats_.bytes_cached -= static_cast<int64_t>(it->first.second);
    }
    it = free_.erase(it);
  }
  return first;
}

Status CachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  return EmptyCacheLocked();
}

Status CachingAllocator::EmptyCacheLocked() {
  if (free_.empty()) return Status::Ok();
  DeviceGuard guard(device_);
  // Cached blocks may still be read by work queued on their stream; cudaFree synchronises the
  // device implicitly, but be explicit so an earlier async error surfaces here with its name.
  OPFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  Status first;
  for (auto& [key, ptrs] : free_) {
    for (void* p : ptrs) {
      cudaError_t e = cudaFree(p);
      if (e != cudaSuccess && first.ok()) first = CudaStatus(e, "cudaFree(cached block)");
      stats_.num_device_frees++;
      stats_.bytes_cached -= static_cast<int64_t>(key.second);
    }
  }
  free_.clear();
  return first;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

namespace {
std::mutex allocators_mu;
std::map<int, CachingAllocator*>& Allocators() {
  static auto* all = new std::map<int, CachingAllocator*>();  // leaked on purpose: no teardown-order issues at exit
  return *all;
}
}  // namespace

Status CachingAllocator::ReleaseStreamEverywhere(cudaStream_t stream) {
  std::vector<CachingAllocator*> all;
  {
    std::lock_guard<std::mutex> lock(allocators_mu);
    for (auto& [dev, a] : Allocators())
      if (a) all.push_back(a);
  }
  Status first;
  for (CachingAllocator* a : all) {
    Status s = a->ReleaseStream(stream);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

CachingAllocator& CachingAllocator::ForDevice(int device) {
  std::lock_guard<std::mutex> lock(allocators_mu);
  auto& a = Allocators()[device];
  if (!a) {
    DeviceGuard guard(device);
    a = new CachingAllocator();
  }
  return *a;
}

StatusOr<DeviceBuffer> DeviceBuffer::Make(CachingAllocator& a, size_t bytes, cudaStream_t stream) {
  OPFUSE_ASSIGN_OR_RETURN(void* p, a.Allocate(bytes, stream));
  DeviceBuffer b;
  b.alloc_ = &a;
  b.ptr_ = p;
  b.size_ = bytes;
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    alloc_ = o.alloc_;
    ptr_ = o.ptr_;
    size_ = o.size_;
    o.alloc_ = nullptr;
    o.ptr_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (alloc_ && ptr_) (void)alloc_->Free(ptr_);
  alloc_ = nullptr;
  ptr_ = nullptr;
  size_ = 0;
}

}  // namespace opfuse::cuda
