// A caching device-memory allocator for the CUDA backend.
//
// Design:
//  * cudaMalloc/cudaFree are slow and synchronising, so freed blocks are kept in per-size-class
//    free lists and handed out again. A request is rounded up to its size class: 256-byte
//    granularity up to 4 KiB, then 4 classes per power of two (waste < 25%, typically ~10%) up to
//    64 MiB, then 2 MiB granularity. Blocks are whole cudaMalloc allocations (never split), so every
//    pointer is at least 256-byte aligned.
//  * Stream safety: a block remembers the stream it was allocated for; a freed block is reused
//    only for the same stream (stream order makes that safe without events). A block freed on one
//    stream is never handed to another — requests on a different stream fall through to the
//    next cached block of that stream or to cudaMalloc. (Cross-stream reuse with events can come
//    later; the executor uses one stream per model run.)
//  * Out of memory: when cudaMalloc fails, the cache is emptied (all cached blocks cudaFree'd)
//    and the allocation retried once; if it still fails the Status names the size, the class,
//    bytes in use, and the device's free/total memory.
//  * Thread-safe: one mutex around the lists and stats (cudaMalloc is called under it too; the
//    allocator is not on a hot path once warm).
//  * Stats: bytes in use (class-rounded), bytes requested, bytes cached, peak in use, number of
//    Allocate calls, cache hits, cudaMalloc / cudaFree calls.
// Built with OPFUSE_CUDA only (src/runtime/cuda/).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "opfuse/status.h"

namespace opfuse::cuda {

struct AllocatorStats {
  int64_t bytes_in_use = 0;      // sum of size classes of live blocks
  int64_t bytes_requested = 0;   // sum of requested sizes of live blocks
  int64_t bytes_cached = 0;      // sum of size classes of blocks in the free lists
  int64_t peak_bytes_in_use = 0;
  int64_t num_allocs = 0;        // successful Allocate calls (size > 0)
  int64_t num_cache_hits = 0;    // of those, served from a free list
  int64_t num_device_mallocs = 0;
  int64_t num_device_frees = 0;
  int64_t num_oom_retries = 0;   // cache emptied after a failed cudaMalloc
};

class CachingAllocator {
 public:
  // Allocator for the current device at construction (it remembers the ordinal).
  CachingAllocator();
  ~CachingAllocator();  // frees cached blocks; live blocks are reported to stderr and leaked
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // `bytes` == 0 returns nullptr. `stream` is the stream the block will be used on.
  StatusOr<void*> Allocate(size_t bytes, cudaStream_t stream = nullptr);
  // nullptr is a no-op; an unknown pointer is InvalidArgument.
  Status Free(void* ptr);
  // Returns every cached block to the device (synchronises the device first).
  Status EmptyCache();
  // `stream` is about to be destroyed: its cached blocks go back to the device (after its queued
  // work), and its live blocks are returned to the device when freed instead of being cached under
  // a stream that no longer exists (a handle the driver may hand out again).
  Status ReleaseStream(cudaStream_t stream);
  // ReleaseStream on every device's allocator created so far.
  static Status ReleaseStreamEverywhere(cudaStream_t stream);

  AllocatorStats stats() const;
  static size_t RoundSize(size_t bytes);  // the size class a request is rounded to

  // A process-wide allocator per device (created on first use, never destroyed).
  static CachingAllocator& ForDevice(int device);

 private:
  struct Block {
    size_t size = 0;       // class size (what cudaMalloc got)
    size_t requested = 0;
    cudaStream_t stream = nullptr;
    bool retired = false;  // its stream was released: Free returns it to the device
  };
  Status EmptyCacheLocked();

  int device_ = 0;
  mutable std::mutex mu_;
  // (stream, class size) -> cached pointers
  std::map<std::pair<cudaStream_t, size_t>, std::vector<void*>> free_;
  std::unordered_map<void*, Block> live_;
  AllocatorStats stats_;
};

// RAII owner of one block from a CachingAllocator.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static StatusOr<DeviceBuffer> Make(CachingAllocator& a, size_t bytes, cudaStream_t stream = nullptr);
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  ~DeviceBuffer() { Reset(); }
  void Reset();
  void* get() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  CachingAllocator* alloc_ = nullptr;
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace opfuse::cuda
