// Device information for the CUDA backend.
//
// Design: one plain struct filled from cudaGetDeviceProperties / cudaDriverGetVersion, so the
// scheduler, the benchmark ceilings and the launch heuristics read SM count, L2 size, arch and
// the shared-memory limit from the device instead of hard-coding Hopper numbers. QueryDevice()
// is the one place that decides "is there a usable GPU": with no driver, no device, or a driver
// too old for this runtime it returns Unavailable("no CUDA device: <reason>") and never crashes,
// so binaries built with OPFUSE_CUDA still start (and tests skip) on CPU-only machines.
// Built with OPFUSE_CUDA only (src/runtime/cuda/).
#pragma once
#include <cstdint>
#include <string>

#include "opfuse/status.h"

namespace opfuse::cuda {

struct DeviceInfo {
  int ordinal = 0;                       // CUDA device index
  std::string name;                      // e.g. "NVIDIA H200"
  int major = 0, minor = 0;              // compute capability
  std::string arch;                      // "sm_90"
  int sm_count = 0;                      // multiprocessors
  int64_t l2_bytes = 0;                  // L2 cache size
  int64_t total_memory_bytes = 0;        // global memory
  int64_t max_shared_mem_per_block = 0;  // default (48 KiB) limit without opt-in
  int64_t max_shared_mem_per_block_optin = 0;  // after cudaFuncSetAttribute (227 KiB on Hopper)
  int64_t shared_mem_per_sm = 0;
  int max_threads_per_sm = 0;
  int clock_khz = 0;                     // SM clock (0 when the runtime no longer reports it)
  int memory_bus_width_bits = 0;
  int driver_version = 0;                // e.g. 13000 (cudaDriverGetVersion)
  int runtime_version = 0;               // e.g. 13000 (cudaRuntimeGetVersion)

  // "NVIDIA H200 (sm_90, 132 SMs, 60 MiB L2, 140 GiB, driver 13.0)"
  std::string ToString() const;
};

// Number of usable CUDA devices; Unavailable("no CUDA device: ...") when none or no driver.
StatusOr<int> DeviceCount();

// Info for `device` (-1: the calling thread's current device).
StatusOr<DeviceInfo> QueryDevice(int device = -1);

}  // namespace opfuse::cuda
