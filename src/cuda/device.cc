// See device.h. All calls go through the statically linked runtime; with no driver
// cudaGetDeviceCount fails (cudaErrorInsufficientDriver / cudaErrorNoDevice) and we report it.
#include "cuda/device.h"

#include <fmt/format.h>

#include "cuda/cuda_check.h"

namespace opfuse::cuda {

StatusOr<int> DeviceCount() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Unavailable(fmt::format("no CUDA device: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e)));
  }
  if (n <= 0) return Unavailable("no CUDA device: the driver reports 0 devices");
  return n;
}

StatusOr<DeviceInfo> QueryDevice(int device) {
  OPFUSE_ASSIGN_OR_RETURN(int n, DeviceCount());
  if (device < 0) OPFUSE_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= n) return InvalidArgument(fmt::format("CUDA device {} does not exist ({} devices)", device, n));
  cudaDeviceProp p{};
  OPFUSE_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceInfo d;
  d.ordinal = device;
  d.name = p.name;
  d.major = p.major;
  d.minor = p.minor;
  d.arch = fmt::format("sm_{}{}", p.major, p.minor);
  d.sm_count = p.multiProcessorCount;
  d.l2_bytes = p.l2CacheSize;
  d.total_memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
  d.max_shared_mem_per_block = static_cast<int64_t>(p.sharedMemPerBlock);
  d.max_shared_mem_per_block_optin = static_cast<int64_t>(p.sharedMemPerBlockOptin);
  d.shared_mem_per_sm = static_cast<int64_t>(p.sharedMemPerMultiprocessor);
  d.max_threads_per_sm = p.maxThreadsPerMultiProcessor;
  d.regs_per_sm = p.regsPerMultiprocessor;
  d.memory_bus_width_bits = p.memoryBusWidth;
  // clockRate left cudaDeviceProp in CUDA 13; the attribute still exists.
  if (cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, device) != cudaSuccess) {
    cudaGetLastError();
    d.clock_khz = 0;
  }
  OPFUSE_CUDA_CHECK(cudaDriverGetVersion(&d.driver_version));
  OPFUSE_CUDA_CHECK(cudaRuntimeGetVersion(&d.runtime_version));
  return d;
}

}  // namespace opfuse::cuda
