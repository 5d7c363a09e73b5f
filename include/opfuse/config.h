// FusionConfig: every knob of the fusion pipeline, and the kill switches.
//
// The fields mirror the seed's Python FusionConfig. `disabled` holds pattern names (swiglu, ...)
// and optional pass names (decompose, fuse_patterns, fuse_generic); it is filled from the
// environment (OPFUSE_DISABLE=swiglu,rope), from `opfuse explain --disable`, or directly. Names are
// validated against the pattern registry and the pipeline — one list each, no third copy here —
// so a typo is an error that lists the valid names, never a silently ignored switch.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "opfuse/status.h"

namespace opfuse {

// The most rows (M) a matmul may have to run on the CUDA backend's decode GEMV (src/kernels/gemv.h)
// instead of cuBLASLt; fuse_matmul's groups are one GEMV launch up to this. In TinyLlama decode
// (always_fuse, docs/BENCHMARKS.md) the GEMV beat cuBLASLt at batch 1, was level at batch 2 and slower
// from batch 4 on — the GEMV re-reads each activation row per weight pack and turns issue-bound past
// 2 rows.
inline constexpr int64_t kDecodeGemvMaxRows = 2;
// The most rows the GEMV can take (CUDA cores: 1, 2 or 4 rows a lane; tensor cores: 8-row tiles up to
// 64). A fuse_matmul group runs as one GEMV launch between kDecodeGemvMaxRows and this many rows only
// where a profile measured the fused group faster there than its ops one by one (scheduler/should_fuse.h).
inline constexpr int64_t kGemvCapacityRows = 64;

struct FusionConfig {
  bool enable_fusion = true;           // false: every op runs alone (the never_fuse strategy)
  bool enable_cache = true;            // JIT kernel cache (memory + disk)
  int64_t min_tensor_elements = 1024;  // smaller groups run unfused (launch cost dominates)
  int min_nodes_for_fusion = 2;        // a generic group needs at least this many ops
  int max_group_size = 64;             // generic groups stop growing here
  bool fallback_on_error = true;       // an optional pass that fails is skipped, not fatal
  bool debug = false;                  // re-verify the graph after every pass
  std::set<std::string> disabled;      // pattern or pass names

  // Default config plus OPFUSE_DISABLE from the environment.
  static StatusOr<FusionConfig> FromEnv();
  // Adds OPFUSE_DISABLE's names to `disabled`.
  Status ApplyEnv();
  // Adds a comma-separated list of names; `source` names the origin in errors
  // ("OPFUSE_DISABLE", "--disable"). Unknown names: InvalidArgument listing the valid ones.
  Status Disable(std::string_view comma_list, std::string_view source = "OPFUSE_DISABLE");
  bool IsDisabled(std::string_view name) const { return disabled.count(std::string(name)) > 0; }
  // A pattern applies when fusion is on and neither it nor the fuse_patterns pass is disabled.
  bool PatternEnabled(std::string_view pattern) const {
    return enable_fusion && !IsDisabled(pattern) && !IsDisabled("fuse_patterns");
  }
  // Every name `disabled` may hold: pattern names, then the passes that can be switched off.
  static std::vector<std::string> KnownNames();
};

}  // namespace opfuse
