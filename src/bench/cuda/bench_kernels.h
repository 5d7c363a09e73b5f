// Small CUDA kernels the benchmark harness needs around the kernels it measures: the copy kernel
// that sets the bandwidth ceiling, the gate that holds the stream until the host has enqueued a
// timed call (so host launch cost never lands between the timing events; timing.h), a fixed-length
// spin kernel (the copy ceiling's timing, empty launches), and on-device random
// fills (signed uniform, |x|+0.5, ids) so gigabytes of rotated inputs cost milliseconds, not the
// seconds a host RNG plus upload would.
//
// The fills are counter-based (SplitMix64 of seed and element index): deterministic in the seed,
// independent of launch shape, every element a fresh signed value. Never zeros (DESIGN.md
// "Measuring": never time or test on zeros).
// Built with OPFUSE_CUDA only (src/bench/cuda/).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "bench/fill_values.h"
#include "opfuse/graph.h"
#include "opfuse/status.h"

namespace opfuse::bench {

// dst[0, bytes) = src[0, bytes), one 16-byte vector per thread on a grid that covers the copy.
// `bytes` must be a multiple of 16 and both pointers 16-byte aligned (InvalidArgument otherwise).
Status LaunchCopy16(const void* src, void* dst, size_t bytes, cudaStream_t stream);

// One thread that spins for `us` microseconds of device time (%globaltimer).
Status LaunchSpin(double us, cudaStream_t stream);

// The gate before a timed sample: one thread that first writes `ticket` to *running (so the host
// knows the GPU has reached it), then spins until the host raises *release to >= `ticket`, or gives
// up after `max_us` of device time and writes 1 to *timed_out. All three live in mapped host memory
// (device pointers of cudaHostAllocMapped memory). The harness enqueues the timed call behind the
// gate and opens it a fixed lead time after the GPU is waiting there, so every call spends the same
// short time queued behind it whatever its host cost (timing.h says why that matters).
Status LaunchGate(const volatile uint64_t* release, volatile uint64_t* running, uint64_t ticket, double max_us,
                  volatile uint32_t* timed_out, cudaStream_t stream);

// Every 128-byte L2 line of [p, p + bytes) back to evict_normal priority (applypriority; a line not in
// L2 is left alone): undoes L2::evict_last tags a kernel left on a case's tensors before the next
// sample (timing.h). Needs sm_80; a no-op below.
Status LaunchL2Demote(const void* p, size_t bytes, cudaStream_t stream);

// p[0, n) of float `dtype` (f32/f16/bf16) = FillValue(dist, seed, i, row_len, positive)
// (bench/fill_values.h); LaunchFillUniform: Dist::kUniform.
Status LaunchFill(void* p, DType dtype, int64_t n, uint64_t seed, bool positive, Dist dist, int64_t row_len, int sm_count,
                  cudaStream_t stream);
Status LaunchFillUniform(void* p, DType dtype, int64_t n, uint64_t seed, bool positive, int sm_count,
                         cudaStream_t stream);

// p[0, n) (i32) = uniform integers in [0, range).
Status LaunchFillIds(int32_t* p, int64_t n, int64_t range, uint64_t seed, int sm_count, cudaStream_t stream);

}  // namespace opfuse::bench
