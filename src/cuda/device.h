// Device information for the CUDA backend.
//
// Design: one plain struct (target::DeviceInfo) filled from cudaGetDeviceProperties / cudaDriverGetVersion, so the
// scheduler, the benchmark ceilings and the launch heuristics read SM count, L2 size, arch and
// the shared-memory limit from the device instead of hard-coding Hopper numbers. QueryDevice()
// is the one place that decides "is there a usable GPU": with no driver, no device, or a driver
// too old for this runtime it returns Unavailable("no CUDA device: <reason>") and never crashes,
// so binaries built with OPFUSE_CUDA still start (and tests skip) on CPU-only machines.
// Built with OPFUSE_CUDA only (src/cuda/: the CUDA base below kernels/ and runtime/).
#pragma once
#include <cstdint>
#include <string>

#include "opfuse/status.h"
#include "target/device_info.h"

namespace opfuse::cuda {

// The struct is host-only (target/device_info.h) so launch-shape rules are tested without a GPU;
// QueryDevice below fills it.
using target::DeviceInfo;

// Number of usable CUDA devices; Unavailable("no CUDA device: ...") when none or no driver.
StatusOr<int> DeviceCount();

// Info for `device` (-1: the calling thread's current device).
StatusOr<DeviceInfo> QueryDevice(int device = -1);

}  // namespace opfuse::cuda
