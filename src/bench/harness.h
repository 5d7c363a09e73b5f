// The measuring constants of the op benchmark's harness, in one place for both harnesses: opfuse's
// (src/bench/cuda/timing.cc, op_runner.cc) and the PyTorch peer's (tools/bench_peer.py), which reads
// them from cases.json's "harness" block (HarnessJson) instead of keeping copies. What each rule is
// for: src/bench/cuda/timing.h. Host-only.
#pragma once
#include <nlohmann/json.hpp>

namespace opfuse::bench {

// How long the host waits, once the GPU is at a sample's gate, before it opens the gate: the timed
// call's launch (submitted before) has reached the GPU by then.
inline constexpr double kGateLeadUs = 5;
// A gate nobody opens gives up after this much device time (the sample then fails).
inline constexpr double kGateMaxUs = 2e6;
// The L2 flush writes this many times the L2 size, and input sets rotate until they span as much.
inline constexpr int kL2Factor = 2;
// Rotated input sets at most (the executor keeps 64 plans).
inline constexpr int kMaxRotatedSets = 32;

// {"gate_lead_us", "gate_max_us", "l2_factor", "max_sets"}: the constants above.
inline nlohmann::json HarnessJson() {
  return {{"gate_lead_us", kGateLeadUs}, {"gate_max_us", kGateMaxUs}, {"l2_factor", kL2Factor},
          {"max_sets", kMaxRotatedSets}};
}

}  // namespace opfuse::bench
