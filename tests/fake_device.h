// A device description filled by hand, for the host-only planning tests (no GPU): an H200-like
// sm_90 part by default, or another SM count / compute capability.
#pragma once
#include <string>

#include "target/device_info.h"

namespace opfuse::testing_device {

inline target::DeviceInfo FakeDevice(int sms = 132, int major = 9) {
  target::DeviceInfo d;
  d.name = "fake";
  d.major = major;
  d.arch = "sm_" + std::to_string(major) + "0";
  d.sm_count = sms;
  d.l2_bytes = int64_t{50} << 20;
  d.max_shared_mem_per_block = 48 << 10;
  d.max_shared_mem_per_block_optin = 227 << 10;
  d.shared_mem_per_sm = 228 << 10;
  d.max_threads_per_sm = 2048;
  return d;
}
// An H200 as QueryDevice reports it (132 SMs, 60 MiB of L2).
inline target::DeviceInfo FakeH200() {
  target::DeviceInfo d = FakeDevice(132, 9);
  d.name = "fake H200";
  d.l2_bytes = int64_t{60} << 20;
  return d;
}

}  // namespace opfuse::testing_device
