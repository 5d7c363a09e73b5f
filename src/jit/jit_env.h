// The JIT's environment knobs (tuning sweeps and A/B switches): read once by their callers (a
// function-local static), reported on stderr when set, and rejected with the reason when malformed,
// so a typo never silently changes what is measured.
#pragma once
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "kernels/kernel_env.h"

namespace opfuse::jit {

// `name` as a whole-string integer that `accept` takes; `fallback` when unset or empty, or (with a
// message naming `expect`) when it is not. `report(value)` says what a set value does.
inline int EnvKnob(const char* name, int fallback, const char* expect, const std::function<bool(long)>& accept,
                   const std::function<std::string(long)>& report) {
  const char* env = std::getenv(name);
  if (!env || !*env) return fallback;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end || !accept(n)) {
    fmt::print(stderr, "opfuse jit: {}={} is not {}; using {}\n", name, env, expect, fallback);
    return fallback;
  }
  fmt::print(stderr, "opfuse jit: {} ({})\n", report(n), name);
  return static_cast<int>(n);
}

// An A/B kill switch: false (reported as `off_means`) when `name` is exactly "0", else true.
inline bool EnvSwitch(const char* name, const char* off_means) {
  if (!kernels::EnvFlagOff(name)) return true;
  fmt::print(stderr, "opfuse jit: {} ({}=0)\n", off_means, name);
  return false;
}

}  // namespace opfuse::jit
