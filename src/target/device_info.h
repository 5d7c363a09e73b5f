// DeviceInfo: the facts about a GPU that launch shapes and cost rules are derived from.
//
// Design: a plain, host-only struct (no CUDA headers), so that every rule that turns "this case on
// this machine" into a launch shape (target/launch_shape.h) compiles and is tested in CPU-only
// builds, where a test fills one in by hand. cuda/device.h's QueryDevice() fills it from
// cudaGetDeviceProperties on a real device; nothing else hard-codes Hopper numbers.
#pragma once
#include <cstdint>
#include <string>

namespace opfuse::target {

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
  int regs_per_sm = 0;                   // 32-bit registers of a multiprocessor (0: unknown)
  int clock_khz = 0;                     // SM clock (0 when the runtime no longer reports it)
  int memory_bus_width_bits = 0;
  int driver_version = 0;                // e.g. 13000 (cudaDriverGetVersion)
  int runtime_version = 0;               // e.g. 13000 (cudaRuntimeGetVersion)

  // "NVIDIA H200 (sm_90, 132 SMs, 60 MiB L2, 140 GiB, driver 13.0)"
  std::string ToString() const;
};

}  // namespace opfuse::target
