// The op benchmark suite of `opfuse bench ops`: the list of cases, each a static-shape graph with
// the bytes and flops an ideal kernel moves and computes.
//
// Design (DESIGN.md "Tools", "Measuring"; seed 003's micro + patterns split):
//  * A case is data, not code: its .ofg text (static shapes, so every variant compiles for exactly
//    these sizes), its inputs/outputs (names, dtypes, shapes — the order the peer script
//    tools/bench_peer.py feeds them), the attributes the peer needs, and bytes/flops from one
//    formula per op (docs/bench.md lists them). The CUDA runner (src/bench/cuda/op_runner.h) and
//    the peer both read this list; cases.json is its serialised form, so the two sides cannot
//    disagree about what a case is.
//  * Each TensorSpec also says how the runner fills it (signed uniform, |x|+0.5, ids in a range),
//    whether it is rotated across input sets (an embedding table is shared), and whether its dim 0
//    is the case's rows — which lets the correctness check run the CPU reference on a sample of
//    rows (MakeOpCase with fewer rows builds the matching reference graph).
//  * Host-only (no CUDA), so `--list-cases`, the unit tests and CI see the same list as the GPU.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "opfuse/graph.h"
#include "ir/host_tensor.h"

namespace opfuse::bench {

enum class Fill {
  kSigned,    // uniform in [-1, 1]
  kPositive,  // |uniform in [-1, 1]| + 0.5 (log2/sqrt inputs, mod divisors)
  kIds,       // integers uniform in [0, id_range)
};

// The distribution of a float input's values (opfuse eval varies it per check trial, so a kernel
// tuned to one distribution — or one that ignores its input, whose answer is a constant under
// i.i.d. uniform values — is caught; bench ops times on kUniform). u is uniform in [-1, 1):
//   kUniform    u
//   kRowScaled  s_r * u + o_r, per row r of dim 0 (a 1-D tensor is one row): s_r = 2^[-2, 2),
//               o_r in [-1, 1) — rows with their own scale and offset, as activations have
//   kOutliers   u, except one element in 256 is +-[16, 64) — large-magnitude outliers
//   kNormal     Gaussian with sigma 3 — the spread of logits and trained activations
// Fill::kPositive applies |v| + 0.5 after the distribution; ids ignore it.
enum class Dist { kUniform, kRowScaled, kOutliers, kNormal };
inline constexpr Dist kEvalDists[] = {Dist::kUniform, Dist::kRowScaled, Dist::kOutliers, Dist::kNormal};
const char* DistName(Dist d);  // "uniform" | "row-scaled" | "outliers" | "normal"

struct TensorSpec {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  Fill fill = Fill::kSigned;
  int64_t id_range = 0;      // kIds: exclusive upper bound
  bool rows_leading = false;  // dim 0 is the case's rows (the check samples rows of it)
  // Copied into every rotated input set (false: one shared copy — only the embedding table, which
  // alone exceeds 2x L2 and whose touched rows change with the ids). Matmul weights and attention
  // K/V rotate like activations: a decode step reads them from HBM, not from L2.
  bool rotate = true;
  int64_t numel() const;
  int64_t nbytes() const { return numel() * DTypeSize(dtype); }
};

struct OpCase {
  std::string id;     // "patterns/rmsnorm/bf16/rows=32/h=2048": unique and stable
  std::string suite;  // "micro" | "patterns"
  std::string op;     // one of MicroOps() / PatternOps()
  DType dtype = DType::kBF16;
  std::string phase;  // "decode" (rows <= kMaxDecodeRows) | "prefill"
  int64_t rows = 0, width = 0;
  int64_t kv_len = 0;  // attention: S (key/value positions); 0 for other ops
  std::vector<TensorSpec> inputs, outputs;
  nlohmann::json attrs = nlohmann::json::object();
  int64_t bytes = 0;  // unique bytes an ideal kernel reads + writes (each tensor once)
  int64_t flops = 0;  // per docs/bench.md; matmul/attention 2 per multiply-accumulate
  std::string graph;  // .ofg text, static shapes
  // Output row r depends only on row r of the row-leading inputs (false for attention, whose
  // query rows see the whole key/value range).
  bool rows_independent = true;
  // The same case with another row count (the CPU-reference check's sampled rows). Unset: the case
  // is rebuilt with MakeOpCase(op, dtype, rows, width, kv_len). Set by cases not in the op suite
  // (the model groups of `opfuse profile`, bench/group_cases.h).
  std::function<StatusOr<OpCase>(int64_t rows)> remake;
  // A fuse_matmul group of `opfuse profile`: its alternative to the fused group is the group's ops
  // one by one, each on its own library kernel (the GEMV or cuBLASLt alone, the norm, RoPE and
  // SwiGLU kernels) — what the executor runs when should_fuse declines the group — so the variant
  // "unfused" is timed as "library" with fuse_matmul off, not as every primitive alone.
  bool unfused_is_library_ops = false;
};

struct SkippedCase {
  std::string id;
  std::string reason;
};

struct OpSuite {
  std::string shapes;  // "random:N:SEED" when drawn by --shapes, else empty
  std::vector<OpCase> cases;
  std::vector<SkippedCase> skipped;  // grid points left out on purpose, with the reason
};

// `opfuse bench ops --shapes random:N[:SEED]`: N (rows, width) pairs drawn for the sweep ops, widths
// from 1 to kMaxRandomWidth (model sizes, primes and log-uniform), rows from 1 to kMaxRandomRows.
struct ShapeSample {
  int64_t rows = 0, width = 0;
};
inline constexpr int kMaxRandomShapes = 10000;
inline constexpr int64_t kMaxRandomWidth = 262144;
inline constexpr int64_t kMaxRandomRows = 65536;
inline constexpr int64_t kMaxRandomElements = int64_t{1} << 27;  // per [rows, width] tensor
struct RandomShapesSpec {
  int count = 0;
  std::optional<uint64_t> seed;  // unset: the caller draws one and prints it
};
StatusOr<RandomShapesSpec> ParseRandomShapes(const std::string& text);
// `--shapes ROWSxWIDTH[,ROWSxWIDTH...]`: the sweep ops at these shapes (rows and width >= 1, each
// [rows, width] tensor at most kMaxRandomElements elements), e.g. to re-run the cases of a sweep.
StatusOr<std::vector<ShapeSample>> ParseShapeList(const std::string& text);
std::vector<ShapeSample> RandomShapes(int count, uint64_t seed);
// The ops of the random sweep: the row kernels (norms, softmax plain / scaled / causal), the gated
// activations and a generic row reduction (logsumexp).
const std::vector<std::string>& SweepOps();

struct SuiteFilter {
  std::string suite = "all";   // "micro" | "patterns" | "all"
  std::string ops_regex;       // ECMAScript regex over op names (full match); "" = all
  std::vector<int64_t> rows;   // row counts; empty = DefaultRows()
  std::vector<int64_t> widths; // keep only cases of these widths; empty = all
  DType dtype = DType::kBF16;
  std::vector<ShapeSample> shapes;  // non-empty: the sweep ops at these shapes instead of the grid
  std::string shapes_spec;          // "random:N:SEED" that drew `shapes`, or the list given (recorded in cases.json)
};

inline constexpr int64_t kMaxDecodeRows = 64;      // rows <= this are "decode" (timed by graph replay)
inline constexpr int64_t kGatherVocab = 32000;     // TinyLlama's vocabulary
inline constexpr int64_t kAttnHeadDim = 64, kAttnQHeads = 32, kAttnKvHeads = 4;
inline constexpr int64_t kAttnDecodeKvLen = 2048;  // decode attention: T = rows queries over S = 2048 keys
inline constexpr int64_t kAttnMaxPrefill = 8192;   // prefill attention T = S = rows above this is skipped
inline constexpr double kNormEps = 1e-5;
inline constexpr double kSoftmaxScale = 0.125;     // 1/sqrt(64), as attention scores are scaled

const std::vector<std::string>& MicroOps();    // exp2 log2 sin recip sqrt add mul mod less_than gather cast sum max
const std::vector<std::string>& PatternOps();  // matmul softmax gelu attention layernorm rmsnorm add_rmsnorm swiglu geglu rope
const std::vector<int64_t>& DefaultRows();     // 1, 8, 32, 512, 2048, 16384
// The widths an op is benchmarked at in the default grid.
std::vector<int64_t> DefaultWidths(const std::string& op);
std::string PhaseOf(int64_t rows);
std::string CaseId(const std::string& suite, const std::string& op, DType dtype, int64_t rows, int64_t width);

// One case. `kv_len` is attention's S (0 = the default for `rows`: kAttnDecodeKvLen for decode,
// rows for prefill). InvalidArgument for an unknown op or a width the op cannot take.
StatusOr<OpCase> MakeOpCase(const std::string& op, DType dtype, int64_t rows, int64_t width, int64_t kv_len = 0);

// The grid after filtering. InvalidArgument for an unknown suite, a bad regex, rows <= 0, a
// dtype other than f32/f16/bf16, or filters that leave no case.
StatusOr<OpSuite> BuildOpSuite(const SuiteFilter& f);

// cases.json (the contract with tools/bench_peer.py): {"schema": 1, "cases": [...], "skipped": [...]}.
nlohmann::json CaseToJson(const OpCase& c);
nlohmann::json SuiteToJson(const OpSuite& s);

// ---------------------------------------------------------------- the correctness check
// Which rows of a case the CPU reference recomputes, and the reference graph for them: all rows
// when rows <= kMaxCheckAllRows; otherwise `sample` rows — for row-independent ops spread over the
// whole range (first and last included), or, with a `random_seed`, `sample` distinct rows drawn
// at random (opfuse eval: a kernel cannot know which rows a trial checks); the last `sample` query
// rows over all S keys for attention (causal alignment to the end makes that exactly attention
// with T = sample).
inline constexpr int64_t kMaxCheckAllRows = 64;
struct CheckPlan {
  std::vector<int64_t> rows;  // sorted row indices of the case
  OpCase reference;           // the case with rows.size() rows (same width, S, attrs)
  std::string description;    // "all 32 rows" | "16 sampled rows" | "last 16 query rows"
};
StatusOr<CheckPlan> PlanCheck(const OpCase& c, int sample, std::optional<uint64_t> random_seed = std::nullopt);

// rel_err of an output: RelativeError (ir/host_tensor.h).
// The bound rel_err must stay under, per output dtype: bf16 3e-2, f16 5e-3, f32 2e-5 (1e-3 for
// matmul/attention, which cuBLASLt/tensor cores may run in TF32), bool 0 (exact).
double ErrorBound(DType out_dtype, const std::string& op);

// The rules a check enforces (docs/eval.md "Rules" says what each catches). A rejection is reported
// as "<rule>: <what>", and VariantResult::rule / EvalResult::rule name the first rule broken.
inline constexpr const char* kRuleReference = "reference";       // checked rows vs the CPU reference
inline constexpr const char* kRuleUnwritten = "unwritten";       // poison (NaN) left in the output
inline constexpr const char* kRuleAllZero = "all-zero";          // a float output entirely zero
inline constexpr const char* kRuleInputs = "inputs-unchanged";   // whole-input checksums
inline constexpr const char* kRuleFullOutput = "full-output";    // every row vs opfuse's op-by-op path
inline constexpr const char* kRuleTimedOutputs = "timed-outputs";  // what the timed calls left
inline constexpr const char* kRuleAfterTiming = "after-timing";  // timed sets refilled in place, rerun

// Per-row relative L2 error of `out` against `ref` (rows: dim 0; a 1-D or scalar tensor is one
// row): the worst row and where it is. A row's norm is floored at 1e-3 of the tensor's RMS row
// norm, so a row of near-zero values cannot make noise look like a failure; a non-finite element
// where the reference is finite (or the reverse) is an infinite error. Shapes must match
// (infinite error otherwise).
struct RowError {
  double worst = 0;
  int64_t row = -1;
};
RowError RowwiseRelativeError(const HostTensor& out, const HostTensor& ref);

// NaN elements (bool: bytes other than 0/1; the 0xFF poison reads as exactly that where a kernel did
// not write) and zero elements of a whole output, from its raw bytes. Integer outputs count zeros
// only. Shared by the op benchmark's check and `opfuse eval` (which also rejects all-zero outputs).
struct OutputScan {
  int64_t nan = 0, zero = 0;
};
OutputScan ScanOutput(const uint8_t* data, DType dtype, int64_t numel);

// Comma-separated positive integers ("1,8,32"); InvalidArgument naming `flag` otherwise.
StatusOr<std::vector<int64_t>> ParseIntList(const std::string& text, const std::string& flag);

}  // namespace opfuse::bench
