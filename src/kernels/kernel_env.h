// Environment switches read by the library kernels' planners (A/B knobs such as
// OPFUSE_GEMV_BLOCKS_PER_SM or OPFUSE_REDUCTION_CLUSTER=0). Read when a launch is planned, which
// happens once per shape, never per launch. Header-only, C++17 (included by .cu files).
#pragma once
#include <cstdlib>
#include <string>

namespace opfuse::kernels {

// `name` is set to something other than "" or "0".
inline bool EnvFlag(const char* name) {
  const char* e = std::getenv(name);
  return e && *e && std::string(e) != "0";
}

// `name` is exactly "0": a kill switch for A/B timing.
inline bool EnvFlagOff(const char* name) {
  const char* e = std::getenv(name);
  return e && std::string(e) == "0";
}

// `name` as an integer (std::atoi), `unset` when it is absent or empty.
inline int EnvInt(const char* name, int unset) {
  const char* e = std::getenv(name);
  return e && *e ? std::atoi(e) : unset;
}

}  // namespace opfuse::kernels
