// The fusible groups of a model graph as benchmark cases — what `opfuse profile` measures.
//
// Design (DESIGN.md "Scheduler", issue 5): the profile database is keyed the way should_fuse looks
// things up — (pattern, dtype, rows, cols) from scheduler::DescribeGroup — so the profiler must
// measure exactly the groups the fusion passes form on the model graph, not a hand-written list.
// ExtractGroupCases runs the fusion passes (verify → ... → fuse_matmul) on the graph, and for each
// fused group (a pattern group, a generic group of ≥ 2 ops, or a fuse_matmul group: a GEMV with its
// norm prologue, sibling matmuls, RoPE or SwiGLU epilogue, whose alternative — the case's "unfused"
// — is its ops one by one on their library kernels, OpCase::unfused_is_library_ops) cuts the group
// out as a graph of its own: the values it reads from outside become inputs, the values it hands to
// the rest of the graph (or the graph's outputs) become outputs, every other node is dropped. Symbols stay symbolic in
// the cut-out; one OpCase per (group, dtype, symbol value) binds them to static shapes, so each
// variant (unfused / library / jit) is compiled for exactly the case's sizes, and the CPU-reference
// check can ask for the same group with fewer rows (OpCase::remake).
//
// Groups that measure the same thing (RoPE on q and on k have different heads, so they differ;
// two identical norms do not) are deduplicated by their profile key. A group whose outputs do not
// have the row symbol as their leading dim cannot be checked on sampled rows: it is skipped with
// that reason (never measured unchecked). Host-only: the CLI's --list-cases and the tests see the
// same cases as the GPU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bench/op_suite.h"
#include "opfuse/config.h"
#include "opfuse/graph.h"

namespace opfuse::bench {

// The profile key of a case (scheduler::DescribeGroup of the group at the case's binding).
struct GroupKey {
  std::string pattern, dtype;
  int64_t rows = 0, cols = 0;
  bool operator==(const GroupKey& o) const {
    return pattern == o.pattern && dtype == o.dtype && rows == o.rows && cols == o.cols;
  }
  std::string ToString() const;  // "add_rms_norm bf16 rows=32 cols=2048"
};

struct GroupCase {
  OpCase c;         // suite "profile", op = the pattern key ("rms_norm", "generic:mul_exp")
  GroupKey key;
  std::string group_label;  // "[12] pattern:add_rms_norm (hn)": which group of the model graph
  int64_t symbol_value = 0; // the row symbol's value (T) this case binds
  int group_index = -1;     // index into the fused graph's groups (same passes, same graph: stable)
};

struct GroupCaseOptions {
  std::string symbol = "T";              // the row symbol of the graph (tokens)
  std::vector<int64_t> values;           // its values (the grid)
  std::vector<DType> dtypes = {DType::kBF16};  // float inputs/params of the graph are retyped to each
  FusionConfig config;                   // the fusion passes' config (kill switches etc.)
};

struct GroupCases {
  std::vector<GroupCase> cases;
  std::vector<SkippedCase> skipped;
  std::vector<std::string> groups;  // every fusible group found, "[i] kind (first output)"
};

// The default grid: decode 1..64 (powers of 2) and prefill 128..4096.
const std::vector<int64_t>& DefaultProfileRows();

// InvalidArgument for a graph without the symbol, no values, a value <= 0, or no fusible group.
StatusOr<GroupCases> ExtractGroupCases(const Graph& model, const GroupCaseOptions& o);

// The pipeline up to (not including) `schedule`: the groups the scheduler would decide about.
StatusOr<Graph> RunFusionPasses(const Graph& model, const FusionConfig& config);

// Ops whose inputs are filled with |x|+0.5 rather than signed values (log, sqrt, rsqrt, recip,
// pow, mod, div): shared with `opfuse eval` (bench/eval.h).
bool NeedsPositive(OpKind op);

// `model` with every float input/param retyped to `dtype` and types re-inferred.
StatusOr<Graph> RetypeGraph(const Graph& model, DType dtype);

}  // namespace opfuse::bench
