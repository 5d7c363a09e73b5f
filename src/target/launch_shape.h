// Launch shapes of the row kernels, derived from the case (rows, columns, vector width) and the
// device (SM count) — host-only, so every rule is tested in CPU-only builds (tests/unit/
// launch_shape_test.cc) and the CUDA planners (kernels/*.cu) only bind the chosen shape to a kernel.
//
// Row kernels (rms_norm, add_rms_norm, layer_norm, softmax; kernels/norm.cu, softmax.cu) share one
// layout. A row is owned by a *row group* of `threads_per_row` threads (a power of two below 32 —
// several rows per warp —, or a multiple of 32 up to 1024); a block holds `rows_per_block` such
// groups. Each thread owns `vectors_per_thread` vectors of `vec` elements (16 bytes when the row and
// every pointer allow it, else 1 element) at columns (it * threads_per_row + t) * vec, so the whole
// row sits in registers, every load is issued before the first use, and reductions are warp shuffles
// plus (groups wider than a warp) one shared-memory exchange. Rows wider than the register path (more
// than kMaxRegisterCols columns, or more vectors than fit) are *staged* in shared memory or *split*
// over a cluster where those rules take them (below), else take the *looped* path: the same group
// layout streaming over the row, re-reading it from L2.
//
// ChooseRowShape picks, from the row count and the device's SM count:
//   decode / small batches (rows < kPrefillRowsPerSm x SMs): one row per block and as many threads per
//     row as the row has vectors (up to 1024), so the few rows still spread over many SMs and every
//     load of the row is in flight at once; above kDecodeRows rows at most kMidThreadsPerRow threads
//     per row (two vectors each rather than one: fewer, fuller groups once the SMs are busy);
//   prefill (rows >= kPrefillRowsPerSm x SMs): a per-family number of vectors per thread (several
//     16-byte loads in flight per thread; RowLimits::prefill_vpt) and as many threads per row as that
//     needs, blocks of ~kPrefillBlockThreads.
// The per-family constants were measured (docs/BENCHMARKS.md, "Fused row kernels"); the invariant is
// that a register-path shape covers the row exactly once (CheckRowShape).
//
// Reductions over the last axis (kernels/reduction.cu) pick one of three shapes (ChooseReduction).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "opfuse/graph.h"
#include "opfuse/status.h"
#include "target/device_info.h"

namespace opfuse::target {

inline constexpr int64_t kMaxRegisterCols = 16384;   // widest row held in registers
inline constexpr int kMaxVectorsPerThread = 8;        // register path: vectors per thread
inline constexpr int kPrefillVectorsPerThread = 4;    // prefill default (RowLimits::prefill_vpt)
inline constexpr int kPrefillBlockThreads = 128;      // prefill: rows per block fill ~this many threads
inline constexpr int kPrefillRowsPerSm = 4;           // rows >= this x SMs: prefill shapes
inline constexpr int64_t kDecodeRows = 64;            // rows above this (and below prefill): "mid" shapes
inline constexpr int kMidThreadsPerRow = 256;         // mid shapes: at most this many threads per row

struct RowShape {
  int threads_per_row = 32;     // 1,2,4,8,16 or a multiple of 32, <= 1024
  int vectors_per_thread = 1;   // 1,2,4,8 (register path); 4 = loads in flight per step (looped)
  int rows_per_block = 1;
  int vec = 1;                  // elements per vector (16 bytes / dtype size, or 1)
  bool looped = false;          // row streamed from memory instead of held in registers
  int block() const { return threads_per_row * rows_per_block; }
  std::string ToString() const;  // e.g. "v8_t32x8_p8" / "v8_t1024x4_p1_looped"
};

// Register-path limits of one kernel family: `max_vpt` caps vectors per thread; `heavy` kernels
// (softmax with a mask: f32 values cached per element) are compiled for blocks of at most 512.
struct RowLimits {
  int max_vpt = kMaxVectorsPerThread;
  bool heavy = false;
  int prefill_vpt = kPrefillVectorsPerThread;  // the family's measured best at prefill sizes
  // Registers of row data one 16-byte vector costs a thread (every row input's pack), for rows wider
  // than kMaxRegisterCols (kRegisterRowWords); 0: the family keeps such rows off the register path.
  int wide_words_per_vector = 0;
};
// Rows wider than kMaxRegisterCols stay in registers where there are kWideRowsPerSm rows per SM or
// more and each thread then holds at most kRegisterRowWords 32-bit words of the row (at most
// kRegisterRowWords / wide_words_per_vector vectors, blocks of up to 1024 threads) — the JIT's
// budget for kernels without a transcendental per element (codegen/cuda_emitter.cc uses the same
// constant). A block a row needs the rows to spread over the SMs at least twice each; with fewer, a
// cluster of blocks per row spreads each row over several SMs and measured faster (docs/BENCHMARKS.md,
// "Wide norm rows in registers").
inline constexpr int kRegisterRowWords = 16;
inline constexpr int kWideRowsPerSm = 2;
// The limits of each row-kernel family (rms_norm, add_rms_norm, layer_norm, softmax with or without
// a mask). Measured per family (docs/BENCHMARKS.md, "Fused row kernels"): add_rms_norm holds x and
// the residual in registers, so 2 vectors per thread at prefill sizes; a masked softmax caches f32
// values per element, so at most 4 vectors and 512-thread blocks; the rest 4 at prefill sizes. The
// norms hold wide rows (wide_words_per_vector: 4 a row input) where the row starts are on the 16-byte
// grid; `shifted` rows (RowAccess::shifted) keep wide rows off the register path — its shifted-row
// form runs about twice an aligned row's instructions, and the staged kernel measured faster there
// (docs/BENCHMARKS.md, "Staged rows") while the register path stays faster on aligned rows. The
// softmax, which keeps f32 values between its passes, does not hold wide rows.
RowLimits RowFamilyLimits(OpKind op, bool has_mask, bool shifted = false);

// Largest block a register-path kernel with `vpt` vectors per thread is compiled for
// (__launch_bounds__): 8 vectors (32+ registers of data) get up to 128 registers per thread.
inline constexpr int RowBlockLimit(int vpt, bool heavy) { return heavy || vpt >= 8 ? 512 : 1024; }

// Shape for `rows` rows of `cols` columns with `vec`-element vectors.
RowShape ChooseRowShape(int64_t rows, int64_t cols, int vec, const DeviceInfo& dev, RowLimits lim = {});
// Whether `s` is a launchable shape for a row of `cols` columns (the register path must cover it).
Status CheckRowShape(const RowShape& s, int64_t cols, RowLimits lim = {});

// Elements per 16-byte vector of a row kernel's accesses: 16 / elem_bytes when every row start is
// 16-byte aligned (each base pointer aligned, `cols * elem_bytes` a multiple of 16), else 1.
// `all_aligned` is the caller's check of its base pointers.
int RowVectorElems(int64_t cols, int elem_bytes, bool all_aligned);

// How a row kernel reads its rows: `vec`-element vectors; `shifted` when the tensors' bases are
// 16-byte aligned but the row starts are not (cols * elem_bytes not a multiple of 16): the row is then
// read in the aligned window around it (kernels/fused_common.cuh, "shifted rows"), a row group covering
// window_cols = cols + vec - 1 columns. Unaligned bases: 1-element vectors.
struct RowAccess {
  int vec = 1;
  bool shifted = false;
  int64_t window_cols = 0;
};
RowAccess ChooseRowAccess(int64_t cols, int elem_bytes, bool all_aligned);

// Rows past the register path split over a cluster of blocks per row (sm_90+), each block holding a
// share of the row's window in registers — `vpt` vectors of `vec` per thread — the row's reductions
// combined through distributed shared memory, so the row is read once and written once, where the
// looped path (one block per row) streams it two or three times and, with few rows, leaves SMs idle.
// One rule for the library kernels (softmax.cu, norm.cu) and the JIT's row kernels
// (codegen/cuda_emitter.cc, launched by jit/cuda_launcher):
//   compiled (PlanRowSplit): the vectors per thread — the fewest (a power of two, at least
//     kRowSplitMinThreadBytes per thread, within kRowSplitMaxWords registers of held data and the
//     kernel's own maximum) with which kRowSplitBlocks blocks of at most kRowSplitMaxThreads threads
//     hold the row: the most threads, so blocks are small and several share an SM, one loading while
//     another waits at its cluster barrier — and min_blocks, the fewest blocks per row (1, 2, 4 or
//     8) that hold it at that width;
//   per launch (RowSplitFor): the blocks per row (the cluster size, a launch attribute) — the fewest
//     from min_blocks up to kRowSplitBlocks that give every SM a block (rows x blocks >= SMs), else
//     kRowSplitBlocks —, each block's share (RowSplitChunk: the window's vectors spread evenly, the
//     formula the kernels compute in-kernel too) and its threads (the share over vpt, whole warps).
// Which row counts take it (UseRowSplit): fewer rows than SMs always (the looped path leaves SMs
// idle); more only where the kernel's split measured faster than its looped path with every SM busy.
inline constexpr int kRowSplitBlocks = 8;           // the portable cluster size: the most blocks per row
inline constexpr int kRowSplitMaxThreads = 512;     // launch bound of the split kernels
inline constexpr int kRowSplitMinThreadBytes = 32;  // at least two 16-byte loads in flight per thread
// 32-bit registers of held row data per thread at most: 96 of the 128 a 512-thread block leaves each
// thread (a bf16 softmax at 8 vectors: 32 registers of packs and 64 of kept f32 exponentials)
inline constexpr int kRowSplitMaxWords = 96;
struct RowSplitPlan {
  int vpt = 0;            // vectors per thread (compiled)
  int vec = 1;            // elements per vector
  int min_blocks = 0;     // fewest blocks per row that hold the window at vpt
  int64_t window_cols = 0;
};
// The plan for a row window of `window_cols` elements read in `vec`-element vectors of `vec_bytes`
// bytes, each vector costing `words_per_vec` registers of held data (every input the kernel keeps,
// and kept f32 values); nullopt when even kRowSplitBlocks blocks cannot hold it.
std::optional<RowSplitPlan> PlanRowSplit(int64_t window_cols, int vec, int vec_bytes, int words_per_vec, int max_vpt);
// Window elements a block of a `blocks`-block cluster holds: ceil(ceil(window / vec) / blocks) x vec.
inline int64_t RowSplitChunk(int64_t window_cols, int vec, int blocks) {
  const int64_t nv = (window_cols + vec - 1) / vec;
  return (nv + blocks - 1) / blocks * vec;
}
struct RowSplit {
  int blocks = kRowSplitBlocks;  // blocks per row: the cluster size
  int threads = 0;
  int vpt = 0;
  int vec = 1;
  int64_t chunk = 0;  // window elements per block, a multiple of vec (RowSplitChunk)
  std::string ToString() const;  // "cluster8_t512x4"
};
// The launch of plan `p` over `rows` rows (rows >= 1) on a device with `sm_count` SMs.
RowSplit RowSplitFor(const RowSplitPlan& p, int64_t rows, int sm_count);
// Whether a row kernel past the register path takes the split on `dev` (clusters: sm_90+) at `rows`
// rows: fewer rows than SMs, or any number where `many_rows` — the caller's kernel splits well with
// every SM busy: the library norms (their looped path reads the row two or three times, element by
// element where row starts are off the 16-byte grid), 16-byte vectors over aligned rows (softmax,
// the JIT) and the JIT's window mode (16-byte vectors over shifted rows; its looped function reads
// them in 1-element loads). Measured slower there (docs/BENCHMARKS.md, the untuned sweep): the
// library softmax over shifted rows (its looped path reads the row once, online) and the JIT's
// 1-element vectors (unaligned pointers: up to 64 scalar values a thread).
bool UseRowSplit(int64_t rows, const DeviceInfo& dev, bool many_rows);
// The library's split: 16-byte vectors over the row's aligned window (as shifted rows: cols + vec - 1
// columns where the row starts are off the 16-byte grid), `words_per_vec` registers per vector
// (4 per 16-byte input held, more for kept f32 values), at most kMaxVectorsPerThread vectors (the
// kernels' compiled set). `many_rows`: UseRowSplit's. nullopt where UseRowSplit says no or
// PlanRowSplit finds none.
std::optional<RowSplit> ChooseRowSplit(int64_t rows, int64_t cols, int elem_bytes, const DeviceInfo& dev, int words_per_vec,
                                       bool many_rows);

// A row kernel that writes one value per row and reads each row once (a row reduction: logsumexp's
// max and sum of exp as one online pass) *streams* its rows past the register path instead of staging
// them: one block per row of kRowStreamThreads threads, each with kRowStreamUnroll 16-byte loads in
// flight over the row's aligned window (only the window's first and last vector masked), a running
// reduction in registers. Staging such a row only adds a pass over shared memory (the staged JIT
// logsumexp measured well below the stream; docs/BENCHMARKS.md, "Row reductions streamed"). A block
// has kRowStreamThreads x kRowStreamUnroll x 16 bytes in flight; rows take the stream where every SM
// gets the blocks that put kRowStreamBytesPerSm in flight on it — one block: from a row an SM the
// stream measured faster per row than the split — and fewer rows spread each row over a cluster
// (the split).
inline constexpr int kRowStreamThreads = 256;
inline constexpr int kRowStreamUnroll = 4;
inline constexpr int64_t kRowStreamBytesPerSm = 16 * 1024;
// Rows from which a streamed row kernel takes the stream rather than the split.
int64_t RowStreamMinRows(const DeviceInfo& dev);

// Rows past the register path with every SM busy take a *staged* row where it fits: a block copies
// the row's aligned 16-byte window of every input it re-reads (x; add_rms_norm's residual too) into
// shared memory with asynchronous copies, all in flight at once, then reduces and writes from there —
// the row read from DRAM once and written once, the bytes in flight bounded by shared memory instead
// of registers. The split's few threads per SM (one register-heavy block) and the looped path's L2
// re-reads both left many wide rows at a third to a half of the copy bandwidth. Blocks are
// persistent (a grid of blocks_per_sm x SMs, rows strided over it) and *double-buffered* where two
// sets of windows fit a block: the next row's copies are in flight while the current row is reduced
// and written, so an SM always has a row arriving (a single-buffered block copies, then computes:
// nothing of its own in flight while it computes). Taken (RowStageFor) from
// one row per SM up, sm_80+ (cp.async), 16-byte aligned bases, when one set of windows fits a
// block's opt-in shared memory; fewer rows keep the split (a row spread over several SMs).
// Threads: the SM's resident threads shared out over its blocks (blocks_per_sm x threads = the SM's
// maximum, at most kRowStageMaxThreads a block), fewer where the row has fewer than
// kRowStageVectorsPerThread 16-byte vectors a thread: the passes over shared memory are latency-bound
// chains per thread, so the warps an SM holds set their speed (persistent 512-thread blocks, one an SM,
// computed slower than they copied).
inline constexpr int kRowStageMaxThreads = 1024;  // launch bound of the staged kernels
inline constexpr int kRowStageMinThreads = 128;
inline constexpr int kRowStageVectorsPerThread = 2;
// per block beside the staged windows: a staged kernel's static shared memory and the 1 KiB the driver
// reserves per block, at most
inline constexpr int64_t kRowStageStaticBytes = 2048;
struct RowStage {
  int threads = 0;
  int64_t buffer_bytes = 0;  // one set of staged windows
  bool twin = false;         // two sets (double-buffered)
  int64_t smem_bytes = 0;    // dynamic shared memory of a block: buffer_bytes, twice when twin
  int blocks_per_sm = 0;     // resident blocks the shared memory allows
  int64_t grid = 0;          // persistent blocks: min(rows, blocks_per_sm x SMs)
  double wave_efficiency = 0;  // rows / (waves x blocks_per_sm x SMs): how evenly the rows fill the blocks
  std::string ToString() const;  // "stage2_t1024_b1" (twin) / "stage_t1024_b1"
};
// A staged launch whose rows fill its persistent blocks less evenly than this gives way to the split
// where the kernel has one (library and JIT alike): with one or two rows per block the last partial
// wave leaves SMs idle, where the split spreads each row over several SMs (library norms and softmax
// at 150-300 rows of 20000-33333 columns measured slower staged; docs/BENCHMARKS.md).
inline constexpr double kRowStageMinWaveEfficiency = 0.9;
// Whether staged launch `st` gives way to a split the kernel also has (the caller checked one is
// taken): its rows fill its blocks unevenly (kRowStageMinWaveEfficiency), or, where `no_overlap_too`
// (the library norms, whose split measured faster there), it has no overlap on its SM — one block,
// one buffer: copy, then compute. One rule for the library planners and the JIT launcher.
bool StageGivesWayToSplit(const RowStage& st, bool no_overlap_too);
// Bytes of the aligned window of the worst-placed row of `cols` elements of `elem_bytes` bytes (16-byte
// vectors over cols + 16 / elem_bytes - 1 elements); 0 where elem_bytes does not divide 16.
int64_t RowStageWindowBytes(int64_t cols, int elem_bytes);
// The staged launch for `rows` rows whose staged windows take `stage_bytes` together, the widest
// `row_vectors` 16-byte vectors (the copies and the reads a block shares out), on `dev`; nullopt where
// it is not taken (too few rows, pre-sm_80, no fit). One rule for the library kernels and the JIT's
// stage function (jit/cuda_launcher). `regs_per_thread`: the stage kernel's registers (0: unknown) —
// the blocks the shared memory allows must be resident in the register file too, so a block's
// threads are at most the SM's registers over blocks_per_sm x the kernel's registers (fewer blocks
// where that leaves fewer than kRowStageMinThreads): a 64-register kernel at two blocks an SM runs
// 512-thread blocks, both resident, not 1024-thread ones of which one waits for the other to end.
std::optional<RowStage> RowStageFor(int64_t rows, int64_t stage_bytes, int64_t row_vectors, const DeviceInfo& dev,
                                    int regs_per_thread = 0);
// The library kernels' case: `inputs` staged row tensors of `cols` elements of `elem_bytes` bytes.
std::optional<RowStage> ChooseRowStage(int64_t rows, int64_t cols, int elem_bytes, int inputs, const DeviceInfo& dev,
                                       int regs_per_thread = 0);

// Rows past the register path with every SM busy whose whole staged window would leave an SM one
// block and no overlap (it does not fit a block, or fits once and gives way: StageGivesWayToSplit)
// take a *staged split*: a cluster of `blocks` blocks a row, block k staging its share of the row's
// aligned window (window vectors [k x chunk, (k + 1) x chunk) / vec, RowSplitChunk) of every input it
// re-reads in shared memory with asynchronous copies, the row's reductions combined through the
// cluster's push exchange (as the split's), the output written from shared memory. Shared memory,
// not registers, then bounds the blocks an SM holds, so several clusters' blocks are resident at
// once and one block's copies are in flight while another reduces or writes — the split holds its
// share in registers (one register-heavy block an SM: copy, then compute), the looped path re-reads
// the row from L2 (dev/split_stage, then the kernels, measured the staged split well ahead of both on
// rows of 59664-235064 columns with every SM busy; docs/BENCHMARKS.md, "The staged split").
// The blocks a row: the fewest of 2, 4, 8 whose share fits 1 / kRowStageSplitBlocksPerSm of an SM's
// shared memory, else 8 where the share fits a block; threads: kRowStageSplitVectorsPerThread vectors
// of the share a thread (whole warps, kRowStageMinThreads to kRowStageSplitMaxThreads), no more than
// the SM's threads — and, where the kernel's registers are known, its register file — shared out over
// the blocks its shared memory holds. Taken from one row per SM up where an SM holds two of its blocks
// or more and the grid gives every SM kRowStageSplitMinBlocksPerSm blocks or more (sm_90+: clusters;
// 16-byte aligned bases); fewer rows keep the split (every block on its own SM either way, nothing to
// overlap).
inline constexpr int kRowStageSplitBlocksPerSm = 6;      // resident blocks an SM the share is sized for
inline constexpr int kRowStageSplitVectorsPerThread = 8;  // 16-byte vectors of the share a thread
inline constexpr int kRowStageSplitMaxThreads = 512;     // launch bound of the staged split kernels
// With fewer blocks an SM there is nothing to overlap (an SM's blocks copy at once, then compute):
// the split measured faster there (133 rows of 16385 columns, 2 blocks a row). Sizing the threads
// for the SM's threads instead of the share (5 blocks of 320 an SM rather than 6 of 256) measured
// slower on grids of less than a wave (docs/BENCHMARKS.md, "The staged split").
inline constexpr int kRowStageSplitMinBlocksPerSm = 3;
struct RowStageSplit {
  int blocks = 0;            // blocks a row: the cluster size (2, 4 or 8)
  int threads = 0;
  int64_t chunk = 0;         // window elements a block stages (RowSplitChunk), a multiple of 16 / elem_bytes
  int64_t smem_bytes = 0;    // dynamic shared memory of a block: the share of every staged input
  int blocks_per_sm = 0;     // resident blocks the shared memory (and registers) allow
  std::string ToString() const;  // "stagesplit8_t256_b7"
};
// The staged split for `rows` rows of `cols` elements of `elem_bytes` bytes, `inputs` staged row
// tensors, on `dev`; nullopt where it is not taken (fewer rows than SMs or blocks than the rule's,
// pre-sm_90, fewer than two shares an SM).
// `regs_per_thread`: the kernel's registers (0: unknown), as RowStageFor's. One rule for the library
// kernels (norm.cu, softmax.cu) and the JIT.
std::optional<RowStageSplit> ChooseRowStageSplit(int64_t rows, int64_t cols, int elem_bytes, int inputs, const DeviceInfo& dev,
                                                 int regs_per_thread = 0);

// ------------------------------------------------------------------ reductions over the last axis
enum class ReductionForm {
  kWarpRow,     // a warp per row, kWarpRowsPerBlock rows per block, grid-stride: narrow rows or many rows
  kBlockRow,    // a block per row (64..1024 threads sized to the row): few wide rows
  kClusterRow,  // a cluster of kReductionClusterBlocks blocks per row (sm_90+): very few very wide rows
};
const char* ReductionFormName(ReductionForm f);  // "warprow", "blockrow", "clusterrow"

inline constexpr int kWarpRowsPerBlock = 8;        // warp-per-row: 256-thread blocks
inline constexpr int kReductionClusterBlocks = 8;  // blocks per row of the cluster form
inline constexpr int kReductionClusterThreads = 256;
inline constexpr int kReductionUnroll = 8;         // vectors in flight per thread (block and cluster forms)

struct ReductionShape {
  ReductionForm form = ReductionForm::kWarpRow;
  int64_t grid = 0;  // blocks (0 for no rows)
  int block = 0;     // threads per block
};

// Shape for `rows` rows of `cols` columns read in `vec`-element vectors.
ReductionShape ChooseReduction(int64_t rows, int64_t cols, int vec, const DeviceInfo& dev);

// Blocks for a grid-stride loop over `work` items of `per_block` items each: enough for one full wave
// (`blocks_per_sm` resident blocks on every SM), never more than the work needs; 0 for no work.
int64_t WaveGrid(int64_t work, int64_t per_block, int sm_count, int blocks_per_sm = 8);

}  // namespace opfuse::target
