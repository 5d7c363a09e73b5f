// The fusion profile database (`profile_result.json`): measured times of each variant of a fusible
// group, per pattern, dtype and shape, on one device. Written by `opfuse profile` (GPU), read by
// should_fuse (see should_fuse.h and docs/scheduler.md for the format).
//
// Design note: loading validates everything and names the JSON path of the first problem
// ("entries[3].variants_us.jit: must be a number >= 0"), because a profile is data someone will
// hand-edit or truncate; a wrong one must be an error, never half-used. A profile is only valid for
// the device it was measured on: CheckDevice compares name and SM version and says why it does not
// apply (the caller warns and ignores the profile). Save is atomic (temp file in the same folder,
// then rename), so a reader never sees half a profile. Merge refuses another device's entries.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "opfuse/status.h"

namespace opfuse::scheduler {

inline constexpr int kProfileSchema = 1;

struct DeviceInfo {
  std::string name;       // "NVIDIA H200"
  std::string sm;         // "9.0"
  std::string driver;     // informational; not part of the match
  double copy_gbps = 0;   // measured copy bandwidth (0 = not measured)
  double launch_us = 0;   // measured cost of one kernel launch (0 = not measured)
};

struct ProfileEntry {
  std::string pattern;    // "add_rms_norm", "swiglu", or "generic:<op>_<op>..." for generic groups
  std::string dtype;      // "bf16"
  int64_t rows = 0, cols = 0;
  std::optional<double> unfused_us, library_us, jit_us;   // a variant not measured is absent
  // fuse_matmul groups ("matmul:..." patterns) only: the group with its matmuls on cuBLASLt and the
  // norm, RoPE and SwiGLU kernels around them, where the GEMV would run them (up to
  // kDecodeGemvMaxRows rows; above that, its ops one by one already are this form).
  std::optional<double> cublaslt_us;
  int64_t samples = 0;
};

struct ProfileDb {
  int schema = kProfileSchema;
  DeviceInfo device;
  std::vector<ProfileEntry> entries;

  // `origin` (a file name) prefixes error messages. Errors are InvalidArgument naming the JSON path.
  static StatusOr<ProfileDb> Parse(std::string_view json_text, std::string_view origin = "profile");
  static StatusOr<ProfileDb> Load(const std::string& path);   // NotFound when it cannot be read
  std::string ToJson() const;                                  // the documented format, 2-space indent
  Status Save(const std::string& path) const;                  // temp file + rename

  // Adds `other`'s entries; an entry with the same (pattern, dtype, rows, cols) is replaced.
  // InvalidArgument (nothing changed) when `other` was measured on a different device.
  Status Merge(const ProfileDb& other);

  // The measured rows for (pattern, dtype, cols), ascending (entries with the same key: last wins).
  std::vector<const ProfileEntry*> Series(std::string_view pattern, std::string_view dtype, int64_t cols) const;
};

// Whether a profile measured on `recorded` applies to `current` (name and sm must match).
// Ok when it does; otherwise Unavailable, the message saying why (the caller warns and ignores it).
Status CheckDevice(const DeviceInfo& recorded, const DeviceInfo& current);

}  // namespace opfuse::scheduler
