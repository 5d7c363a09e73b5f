// See device_info.h.
#include "target/device_info.h"

#include <fmt/format.h>

namespace opfuse::target {

std::string DeviceInfo::ToString() const {
  return fmt::format("{} ({}, {} SMs, {} MiB L2, {} GiB, driver {}.{})", name, arch, sm_count, l2_bytes >> 20,
                     total_memory_bytes >> 30, driver_version / 1000, (driver_version % 1000) / 10);
}

}  // namespace opfuse::target
