// From measured group cases to the profile database, and the check of issue 5's target.
//
// Design: `opfuse profile` measures GroupCases (group_cases.h) with the op-bench runner; this file
// is the host-side half, testable without a GPU:
//  * ProfileEntryFor turns one measured case into a ProfileEntry — only variants that ran, were
//    timed and matched the CPU reference; every other variant is left out with a warning (a wrong
//    or failed kernel must never look like a fast one).
//  * RemainingCases makes the run resumable: a case whose key is already in the output profile
//    with every requested variant is not measured again.
//  * ValidateProfile answers the target "smart ≤ 1.03 × min(unfused, fused) at every point": for
//    each measured point it asks ShouldFuse — on the same fused model graph, the same group, the
//    same binding — once with the whole profile (in-sample: the point itself is in the profile) and
//    once with that point left out (leave-one-out: the choice comes from interpolating the
//    neighbours, or the cost model — what a shape between grid points gets), and compares the
//    measured time of each choice with the fastest measured variant at that point. It also flags
//    the points where fusing loses (unfused beats every fused variant, or the JIT kernel is more
//    than 10% slower than the library kernel), so the report can show what smart picked there.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/group_cases.h"
#include "bench/report.h"
#include "scheduler/profile_db.h"

namespace opfuse::bench {

// Whether `variant` is an alternative of the case: a fuse_matmul group has no "jit" (its GEMV is a
// library kernel; its "unfused" is its ops one by one on library kernels).
bool VariantApplies(const GroupCase& gc, const std::string& variant);

// nullopt (and a warning) when no variant of the case was measured correctly.
std::optional<scheduler::ProfileEntry> ProfileEntryFor(const GroupCase& gc, const CaseResult& r,
                                                       std::vector<std::string>* warnings);

// Name, "9.0"-style sm (from the report's "sm_90"), driver, copy GB/s and launch µs of a run.
scheduler::DeviceInfo ProfileDeviceFor(const BenchReport& r);

// Cases whose key is not yet in `existing` with every one of `variants` that applies measured.
std::vector<GroupCase> RemainingCases(const std::vector<GroupCase>& all, const scheduler::ProfileDb& existing,
                                      const std::vector<std::string>& variants);

struct ValidationRow {
  GroupKey key;
  std::string group;                 // the group label
  std::optional<double> unfused_us, library_us, jit_us, cublaslt_us;
  std::string best;                  // fastest measured variant
  double best_us = 0;
  std::string smart, smart_loo;      // ShouldFuse's variant: whole profile / this point left out
  std::string source_loo, reason_loo;
  std::optional<double> smart_us, smart_loo_us;  // measured time of that choice (nullopt: not measured)
  double ratio = 0, ratio_loo = 0;   // smart / best (0 when smart's variant was not measured)
  std::string fusion_loses;          // "" or why fusing loses here
};

struct Validation {
  std::vector<ValidationRow> rows;
  double worst_ratio = 0, worst_ratio_loo = 0;
  int points = 0, within = 0, within_loo = 0;  // points with ratio <= limit
  double limit = 1.03;
};

// `o` must be the options the cases were extracted with (same graph, config, dtypes).
StatusOr<Validation> ValidateProfile(const Graph& model, const GroupCaseOptions& o, const std::vector<GroupCase>& cases,
                                     const scheduler::ProfileDb& db, double margin = 0.03);
std::string ValidationMarkdown(const Validation& v);
nlohmann::json ValidationJson(const Validation& v);

}  // namespace opfuse::bench
