// CUDA C emitter for the kernel IR.
//
// Generated source is self-contained (no #include: NVRTC compiles it in tens of milliseconds, and
// f16/bf16 conversions are single PTX cvt instructions), opens with a comment naming the fused ops,
// the emitter version and the launch shapes, and the kernel is named after its contents
// (fz_add_rms_norm_bf16_h2048_v8). Memory: 16-byte vectorised, coalesced loads/stores when the
// caller guarantees alignment (the `aligned` variant), f32 math for f16/bf16.
// Pointwise kernels: one vector per thread, the grid covering the tensor (the layout of the
// library's glu kernel, which reaches copy bandwidth), no row/column arithmetic unless an operand
// needs it; over vectors wider than 4 bytes, a `decode_function` of 4-byte packs for tiny tensors
// (kPointwiseDecodeThreads below).
// Row kernels with a static row width use the library's row layout (src/kernels/fused.h): a row
// group of TPR threads x VPT vectors per thread, the row's raw 16-byte packs held in registers
// (converted to f32 on use, laundered between passes), all loads issued before the first use,
// shuffle reductions plus one shared-memory exchange for groups wider than a warp. Two shapes are
// emitted when they differ: `function` for prefill (rows >= kDecodeRowsPerSm x SMs; ~16 registers of
// row data per thread, 8 for multi-pass kernels with a MUFU op per element (softmax: 2 vectors) —
// measured best per family) and `decode_function` for fewer rows (the fewest vectors per thread whose
// group fits EmitOptions::decode_row_threads, so one row's loads and exponentials spread over many
// threads; twice decode_row_threads for two or more 16-byte packs of row data per vector, and for
// single-pass kernels without a MUFU op per element).
// The decode function: outputs that need no reduction (add_rms_norm's sum) are stored right after the
// loads, and the stored packs are kept in registers for the reductions and the epilogue; no row
// loop (its grid covers the rows) and 32-bit indices (the launcher takes it only then, and below
// kDecodeMaxElements); the row inputs loaded with evict-first hints;
// where the doubled group holds one 16-byte vector per thread, two 8-byte packs instead, with the
// weight loaded in the epilogue. With one row group per block (the launcher's block is exactly
// TPR x rows-per-block threads) no row guard is emitted, and no column guard where the group's
// vectors cover the row exactly. Stores convert 16-bit pairs with one cvt.rn.{bf16,f16}x2.f32, and a
// rounding to the output's own dtype is left to the store. Rows with a symbolic width (or wider than
// 1024 x 8 vectors): one block per row, streamed per pass (looped); with a static width on sm_90+ also
// a split function — the register path's code over a cluster of blocks per row, each block holding
// its share in registers, the reductions combined by pushing each block's partial into every block's
// shared memory (fz::cluster_reduce),
// so the row is read once. The prefill function of a kernel without per-column inputs (softmax) has no
// row loop either (its grid covers the row groups: a loop kept its state live, more registers a
// thread); with them (the norms) it and the looped function grid-stride over rows, so any grid size
// is correct for them; the split function's grid is exactly rows x blocks per cluster.
// ABI: kernel(inputs..., outputs..., long long <symbol>...) in Kernel order; launch geometry in
// src/jit/cuda/cuda_launcher.cc.
// Versioning: the source text is the JIT cache key (src/jit/kernel_cache.h), so any change to the
// emitted code changes the key; kEmitterVersion is printed in the source too and is bumped with
// every change of the generated code's structure, so cached entries and dumps say which emitter made them.
#pragma once
#include <string>

#include "codegen/kernel_ir.h"

namespace opfuse::codegen {

inline constexpr int kEmitterVersion = 27;
// Looped row kernels (rows wider than the register path, static width): threads per block where the
// vectors are narrower than 16 bytes (one block per row), and the vectors per thread per step (loads
// first): at most kLoopedUnroll, as many as keep kLoopedRowFloats loaded values per thread. A block's
// bytes in flight are threads x vectors per step x vector bytes.
inline constexpr int kLoopedRowThreads = 1024;
inline constexpr int kLoopedUnroll = 8;
inline constexpr int kLoopedRowFloats = 32;
inline constexpr int kPrefillRowBlock = 128;   // prefill row kernels: rows per block fill ~this many threads
// Register-path prefill functions compute in window mode (16-byte vectors of each row's aligned
// window, rows off the 16-byte grid) from this many window vectors per row: below it a large share of
// a row group's vectors sit at a row's edge, and narrow rows measured slower than in 1-element vectors.
inline constexpr int kMinWindowVectors = 256;
inline constexpr int kDecodeRowsPerSm = 4;     // rows < this x SMs: the decode function (as the library)
// Decode row groups up to 256 threads: on an H200 (CUDA-graph replay, rows 1/8/32, h2048/h4096 bf16)
// 256 beat 32 (warp per row) clearly for softmax, rms_norm and add_rms_norm (docs/BENCHMARKS.md).
inline constexpr int kDefaultDecodeRowThreads = 256;
// The decode function indexes with 32-bit ints: the launcher takes it only below this many elements.
inline constexpr long long kDecodeMaxElements = (1LL << 31) - 1;
// Pointwise decode function: the launcher takes it while ceil(elements / decode_vec /
// kPointwiseDecodeThreads) <= jit::kPointwiseDecodeBlocksPerSm x SMs, in blocks of
// kPointwiseDecodeWideThreads where that still gives every SM a block (torch.compile's shape at 32
// rows), else of kPointwiseDecodeThreads. It is compiled for the wide block (EmittedKernel::decode_threads).
inline constexpr int kPointwiseDecodeThreads = 128;
inline constexpr int kPointwiseDecodeWideThreads = 256;

struct EmitOptions {
  bool aligned = true;  // every pointer 16-byte aligned: allows vector accesses
  int max_threads = 256;  // pointwise and looped row kernels: threads per block
  int decode_row_threads = kDefaultDecodeRowThreads;  // decode row shape: widest row group wanted
  // Prefill row shape: 32-bit registers of row data wanted per thread (the row group is the row's
  // vectors over that); 0 is the emitter's rule (16, or 8 for multi-pass kernels with a MUFU op per
  // element). Only for tuning sweeps.
  int prefill_row_words = 0;
  // The target has thread block clusters (sm_90+): static-width rows past the register path also get
  // a split function (EmittedKernel::split_function; target::SplitRowShape).
  bool clusters = false;
  // The target has asynchronous global -> shared copies (sm_80+): static-width rows past the register
  // path with 16-byte aligned pointers also get a stage function (EmittedKernel::stage_function).
  bool stage = false;
};

// Register-path prefill function: where the per-column packs loaded before the row loop would widen
// to more than this many f32 registers (layer_norm's weight and bias at 4 vectors of 8: 64), they are
// laundered at the top of each row iteration, so the compiler converts them where they are used
// instead of hoisting f32 copies out of the loop (layer_norm bf16 h2048 t64x4 drops below 768
// resident threads per SM otherwise). One channel input's 4 vectors of 8 fit, as rms_norm's weight.
inline constexpr int kMaxHoistedChannelFloats = 32;

struct EmittedKernel {
  std::string function;  // extern "C" name
  std::string source;
  int threads = 256;
  int vec = 1;
  bool row_in_registers = false;
  bool row = false;
  int rows_per_block = 1;  // row kernels: rows a block of `threads` handles per step
  // Register-path row kernels (row_in_registers): the prefill shape of `function`, and the decode
  // function with its block (decode_function == function when both shapes are the same). Pointwise
  // kernels: decode_function (empty when none) with decode_threads and decode_vec.
  int threads_per_row = 0;
  int vectors_per_thread = 0;
  std::string decode_function;
  int decode_threads = 0;
  int decode_rows_per_block = 1;
  // Pointwise kernels: the decode function's elements per thread (0: no decode function).
  int decode_vec = 0;
  // Rows past the register path, static width, EmitOptions::clusters: `split_function` runs each row
  // on a cluster of blocks, each holding its share of the row in registers, split_vpt vectors of
  // `vec` per thread (target::PlanRowSplit, the rule of the library's split rows: split_min_blocks is
  // the fewest blocks per row that hold it). The launcher takes it where target::UseRowSplit says and
  // picks blocks per row and threads per block by target::RowSplitFor (launch attributes: the function
  // reads its cluster size and block size), with a grid of exactly rows x blocks per row. Empty: none.
  std::string split_function;
  int split_vpt = 0;
  int split_min_blocks = 0;
  bool split_many_rows = false;  // 16-byte vectors (window mode too): the split at any row count (target::UseRowSplit)
  // > 0: the split function computes over 16-byte vectors of this many elements of each row's aligned
  // window (window mode: rows off the 16-byte grid), split_vpt of them per thread over a window of
  // cols + split_window_vec - 1 columns; 0: vectors of `vec` over the row.
  int split_window_vec = 0;
  // Rows past the register path of a kernel that writes one value per row and reads each row once
  // (target::kRowStreamThreads): `function` streams them — one block per row, kRowStreamUnroll
  // 16-byte loads in flight a thread over the row's aligned window — and the launcher takes it from
  // target::RowStreamMinRows rows, the split function below that. Such a kernel has no stage function.
  bool stream = false;
  // Rows past the register path, static width, EmitOptions::stage, aligned: `stage_function` runs the
  // looped function's passes over the row windows of every full-shape input staged in shared memory
  // (stage_bytes of dynamic shared memory, at static offsets; the widest window stage_vectors 16-byte
  // vectors): each row read from DRAM once. The launcher takes it where target::RowStageFor says (a
  // row per SM or more, the windows fit), blocks and threads by that rule. Empty: none.
  std::string stage_function;
  int64_t stage_bytes = 0;
  int64_t stage_vectors = 0;
  // Where the staged rows fill the blocks unevenly the launcher takes the split function instead
  // (target::StageGivesWayToSplit) — unless this is false: a row reduction with per-row outputs only
  // over shifted rows (window mode: logsumexp measured slower split than staged there, where the
  // norms and softmax measured faster split; docs/BENCHMARKS.md).
  bool stage_gives_way = true;
  // Beside the stage function, EmitOptions::clusters, every staged input of one element size
  // (stage_split_elem_bytes) and the kernel writing rows: `stage_split_function` runs each row on a
  // cluster of 2 to kRowSplitBlocks blocks (the launch's), each staging its share of the
  // stage_split_inputs windows in dynamic shared memory, the reductions over the cluster (the library's
  // staged split, kernels/staged_row.cuh). The launcher takes it where the stage does not fit or gives
  // way and target::ChooseRowStageSplit says, its blocks, threads and shared memory by that rule, the
  // grid exactly rows x blocks a row. Empty: none.
  std::string stage_split_function;
  int stage_split_elem_bytes = 0;
  int stage_split_inputs = 0;
  // Programmatic dependent launch (Hopper): the functions the launcher takes at decode sizes begin
  // with fz::pdl_enter() — allow the next kernel to be scheduled, then wait for the earlier grids
  // (griddepcontrol; no-ops below sm_90 and when launched without the attribute), as the library
  // kernels' PdlEnter (kernels/pdl.cuh) — and are safe to launch with PDL: the decode function, and
  // the prefill function where it is the only one (no separate decode function); a prefill function
  // beside a decode one has no prologue (at prefill sizes it made each event-timed call slower).
  // PdlIn(name) says which — the emitter writes the prologue by it and the executor sets the launch
  // attribute by it (OPFUSE_DISABLE=pdl clears the attribute). The split function has it too (it sits
  // beside a looped function, which has no decode function).
  bool PdlIn(const std::string& name) const {
    return name == decode_function || name == split_function || name == stage_function || name == stage_split_function ||
           decode_function.empty() || decode_function == function;
  }
};

StatusOr<EmittedKernel> EmitCuda(const Kernel& k, const EmitOptions& opts = {});

}  // namespace opfuse::codegen
