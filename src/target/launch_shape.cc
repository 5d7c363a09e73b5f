// See launch_shape.h.
#include "target/launch_shape.h"

#include <algorithm>

#include <fmt/format.h>

namespace opfuse::target {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Threads per row for `n` wanted threads: a power of two below 32, else a multiple of 32 (<= 1024).
int RoundThreads(int64_t n) {
  if (n <= 1) return 1;
  if (n < 32) {
    int p = 1;
    while (p < n) p *= 2;
    return p;
  }
  return static_cast<int>(std::min<int64_t>(1024, CeilDiv(n, 32) * 32));
}

// Smallest of 1, 2, 4, 8 that is >= need (0 when none is <= max_vpt).
int SmallestVpt(int64_t need, int max_vpt) {
  for (int v : {1, 2, 4, 8})
    if (v >= need && v <= max_vpt) return v;
  return 0;
}

// Warps an SM's register file holds of a kernel of `regs_per_thread` registers (allocated per warp
// in 256-register units); 0 where either is unknown.
int64_t RegisterFileWarps(const DeviceInfo& dev, int regs_per_thread) {
  if (regs_per_thread <= 0 || dev.regs_per_sm <= 0) return 0;
  return dev.regs_per_sm / (CeilDiv(int64_t{regs_per_thread} * 32, 256) * 256);
}

bool ValidThreadsPerRow(int t) { return (t >= 1 && t < 32 && (t & (t - 1)) == 0) || (t >= 32 && t <= 1024 && t % 32 == 0); }

}  // namespace

std::string RowShape::ToString() const {
  return fmt::format("v{}_t{}x{}_p{}{}", vec, threads_per_row, vectors_per_thread, rows_per_block, looped ? "_looped" : "");
}

RowShape ChooseRowShape(int64_t rows, int64_t cols, int vec, const DeviceInfo& dev, RowLimits lim) {
  RowShape s;
  s.vec = std::max(vec, 1);
  const int64_t v = CeilDiv(std::max<int64_t>(cols, 1), s.vec);  // vectors per row
  const int64_t sms = std::max(dev.sm_count, 1);
  const bool prefill = rows >= kPrefillRowsPerSm * sms;
  int max_vpt = std::clamp(lim.max_vpt, 1, kMaxVectorsPerThread);
  // Past kMaxRegisterCols: the register path with at most kRegisterRowWords words of row data a
  // thread, at kWideRowsPerSm rows per SM or more (launch_shape.h).
  const bool wide = cols > kMaxRegisterCols && lim.wide_words_per_vector > 0 && rows >= kWideRowsPerSm * sms;
  if (wide) max_vpt = std::min(max_vpt, kRegisterRowWords / lim.wide_words_per_vector);
  if (cols <= kMaxRegisterCols || (wide && max_vpt >= 1)) {
    int tpr = 0, vpt = 0;
    if (prefill) {
      // Several 16-byte loads in flight per thread; at least 8 threads per row so that one warp
      // load covers >= 128 contiguous bytes of a row.
      const int target = std::clamp(lim.prefill_vpt, 1, max_vpt);
      tpr = RoundThreads(std::max(CeilDiv(v, target), std::min<int64_t>(v, 8)));
      vpt = SmallestVpt(CeilDiv(v, tpr), max_vpt);
      // A capped group (1024 threads) may need more vectors than allowed, or a larger block than
      // the kernel is built for: then the looped path.
      if (vpt == 0 || tpr > RowBlockLimit(vpt, lim.heavy)) vpt = 0;
    } else {
      // Few rows: as many threads per row as vectors (1 vector each where it fits), so every load
      // of the row is in flight at once and the rows spread over many SMs. Above kDecodeRows rows
      // (but below the prefill threshold) at most kMidThreadsPerRow threads per row.
      const bool mid = rows > kDecodeRows;
      for (int cand : {1, 2, 4, 8}) {
        if (cand > max_vpt) break;
        const int t = RoundThreads(CeilDiv(v, cand));
        if (mid && t > kMidThreadsPerRow && cand * 2 <= max_vpt) continue;
        if (static_cast<int64_t>(t) * cand >= v && t <= RowBlockLimit(cand, lim.heavy)) {
          tpr = t;
          vpt = cand;
          break;
        }
      }
    }
    if (vpt > 0) {
      s.threads_per_row = tpr;
      s.vectors_per_thread = vpt;
      const int want_block = prefill ? kPrefillBlockThreads : 32;
      s.rows_per_block = std::max(1, std::min(want_block / tpr, RowBlockLimit(vpt, lim.heavy) / tpr));
      return s;
    }
  }
  // Looped: the row streamed in steps of 4 vectors per thread.
  s.looped = true;
  s.vectors_per_thread = 4;
  s.threads_per_row = std::min(prefill ? 512 : 1024, RoundThreads(CeilDiv(v, 4)));
  s.rows_per_block = 1;
  return s;
}

Status CheckRowShape(const RowShape& s, int64_t cols, RowLimits lim) {
  const std::string what = s.ToString();
  if (!ValidThreadsPerRow(s.threads_per_row))
    return InvalidArgument(fmt::format("row shape {}: threads per row must be 1..16 (power of two) or a multiple of 32 up to 1024", what));
  if (s.rows_per_block < 1) return InvalidArgument(fmt::format("row shape {}: rows per block < 1", what));
  if (s.looped) {
    if (s.block() > 1024) return InvalidArgument(fmt::format("row shape {}: block of {} threads", what, s.block()));
    return Status::Ok();
  }
  if (SmallestVpt(s.vectors_per_thread, lim.max_vpt) != s.vectors_per_thread)
    return InvalidArgument(fmt::format("row shape {}: vectors per thread must be 1, 2, 4 or 8 (max {})", what, lim.max_vpt));
  if (s.block() > RowBlockLimit(s.vectors_per_thread, lim.heavy))
    return InvalidArgument(fmt::format("row shape {}: block of {} threads exceeds the kernel's {}", what, s.block(),
                                       RowBlockLimit(s.vectors_per_thread, lim.heavy)));
  if (cols > kMaxRegisterCols &&
      (lim.wide_words_per_vector == 0 || s.vectors_per_thread * lim.wide_words_per_vector > kRegisterRowWords))
    return InvalidArgument(fmt::format("row shape {}: {} columns exceed the register path ({}{})", what, cols, kMaxRegisterCols,
                                       lim.wide_words_per_vector > 0
                                           ? fmt::format(", or {} words of row a thread", kRegisterRowWords)
                                           : ""));
  if (static_cast<int64_t>(s.threads_per_row) * s.vectors_per_thread * s.vec < cols)
    return InvalidArgument(fmt::format("row shape {}: covers {} of {} columns", what,
                                       static_cast<int64_t>(s.threads_per_row) * s.vectors_per_thread * s.vec, cols));
  return Status::Ok();
}

RowLimits RowFamilyLimits(OpKind op, bool has_mask, bool shifted) {
  RowLimits lim;
  if (op == OpKind::kAddRmsNorm) lim.prefill_vpt = 2;
  if ((op == OpKind::kRmsNorm || op == OpKind::kLayerNorm) && !shifted) lim.wide_words_per_vector = 4;
  if (op == OpKind::kAddRmsNorm && !shifted) lim.wide_words_per_vector = 8;
  if (op == OpKind::kSoftmax && has_mask) {
    lim.max_vpt = 4;
    lim.heavy = true;
  }
  return lim;
}

int RowVectorElems(int64_t cols, int elem_bytes, bool all_aligned) {
  if (elem_bytes <= 0 || elem_bytes > 16 || 16 % elem_bytes != 0 || cols <= 0) return 1;
  return all_aligned && (cols * elem_bytes) % 16 == 0 ? 16 / elem_bytes : 1;
}

RowAccess ChooseRowAccess(int64_t cols, int elem_bytes, bool all_aligned) {
  RowAccess a;
  a.vec = RowVectorElems(cols, elem_bytes, all_aligned);
  a.window_cols = cols;
  if (a.vec == 1 && all_aligned && cols > 0 && elem_bytes > 0 && elem_bytes < 16 && 16 % elem_bytes == 0) {
    a.vec = 16 / elem_bytes;
    a.shifted = true;
    a.window_cols = cols + a.vec - 1;
  }
  return a;
}

std::string RowSplit::ToString() const { return fmt::format("cluster{}_t{}x{}", blocks, threads, vpt); }

std::optional<RowSplitPlan> PlanRowSplit(int64_t window_cols, int vec, int vec_bytes, int words_per_vec, int max_vpt) {
  if (window_cols <= 0 || vec < 1 || vec_bytes < 1 || words_per_vec < 1) return std::nullopt;
  const int64_t nv = CeilDiv(window_cols, vec);
  const int min_vpt = std::max(1, kRowSplitMinThreadBytes / vec_bytes);
  const int top = std::min(max_vpt, kRowSplitMaxWords / words_per_vec);
  RowSplitPlan p;
  p.vec = vec;
  p.window_cols = window_cols;
  // The fewest vectors per thread with which kRowSplitBlocks blocks hold the row: the most threads.
  const int64_t per_block = CeilDiv(nv, kRowSplitBlocks);
  for (int v = 1; v <= top && p.vpt == 0; v *= 2) {
    if (v < min_vpt && v * 2 <= top) continue;
    if (CeilDiv(per_block, v) <= kRowSplitMaxThreads) p.vpt = v;
  }
  if (p.vpt == 0) return std::nullopt;
  for (int b = 1; b <= kRowSplitBlocks && p.min_blocks == 0; b *= 2)
    if (CeilDiv(CeilDiv(nv, b), p.vpt) <= kRowSplitMaxThreads) p.min_blocks = b;
  return p;
}

RowSplit RowSplitFor(const RowSplitPlan& p, int64_t rows, int sm_count) {
  RowSplit r;
  r.vec = p.vec;
  r.vpt = p.vpt;
  r.blocks = kRowSplitBlocks;
  for (int b = std::max(p.min_blocks, 1); b <= kRowSplitBlocks; b *= 2)
    if (rows * b >= std::max(sm_count, 1)) {
      r.blocks = b;
      break;
    }
  r.chunk = RowSplitChunk(p.window_cols, p.vec, r.blocks);
  r.threads = static_cast<int>(std::max<int64_t>(32, CeilDiv(CeilDiv(r.chunk / p.vec, p.vpt), 32) * 32));
  return r;
}

bool UseRowSplit(int64_t rows, const DeviceInfo& dev, bool many_rows) {
  return dev.major >= 9 && rows > 0 && (many_rows || rows < std::max(dev.sm_count, 1));
}

std::optional<RowSplit> ChooseRowSplit(int64_t rows, int64_t cols, int elem_bytes, const DeviceInfo& dev, int words_per_vec,
                                       bool many_rows) {
  if (cols <= 0 || elem_bytes <= 0 || elem_bytes >= 16 || 16 % elem_bytes != 0) return std::nullopt;
  if (!UseRowSplit(rows, dev, many_rows)) return std::nullopt;
  const RowAccess a = ChooseRowAccess(cols, elem_bytes, true);  // 16-byte vectors over the (shifted) window
  auto plan = PlanRowSplit(a.window_cols, a.vec, 16, words_per_vec, kMaxVectorsPerThread);
  if (!plan) return std::nullopt;
  return RowSplitFor(*plan, rows, dev.sm_count);
}

std::string RowStage::ToString() const { return fmt::format("stage{}_t{}_b{}", twin ? "2" : "", threads, blocks_per_sm); }

int64_t RowStageWindowBytes(int64_t cols, int elem_bytes) {
  if (cols <= 0 || elem_bytes <= 0 || elem_bytes >= 16 || 16 % elem_bytes != 0) return 0;
  const int vec = 16 / elem_bytes;
  return CeilDiv(cols + vec - 1, vec) * 16;
}

std::optional<RowStage> RowStageFor(int64_t rows, int64_t stage_bytes, int64_t row_vectors, const DeviceInfo& dev,
                                    int regs_per_thread) {
  if (stage_bytes <= 0 || row_vectors <= 0) return std::nullopt;
  if (dev.major < 8 || rows < std::max(dev.sm_count, 1)) return std::nullopt;
  if (stage_bytes + kRowStageStaticBytes > dev.max_shared_mem_per_block_optin) return std::nullopt;
  RowStage st;
  st.buffer_bytes = stage_bytes;
  st.twin = 2 * stage_bytes + kRowStageStaticBytes <= dev.max_shared_mem_per_block_optin;
  st.smem_bytes = st.twin ? 2 * stage_bytes : stage_bytes;
  const int64_t per_sm = dev.shared_mem_per_sm > 0 ? dev.shared_mem_per_sm : dev.max_shared_mem_per_block_optin;
  st.blocks_per_sm = static_cast<int>(per_sm / (st.smem_bytes + kRowStageStaticBytes));
  if (st.blocks_per_sm < 1) return std::nullopt;
  const int sm_threads = dev.max_threads_per_sm > 0 ? dev.max_threads_per_sm : 2048;
  // warps the register file holds at this kernel's registers
  int64_t reg_warps = sm_threads / 32;
  if (const int64_t w = RegisterFileWarps(dev, regs_per_thread); w > 0) {
    reg_warps = w;
    while (st.blocks_per_sm > 1 && reg_warps / st.blocks_per_sm * 32 < kRowStageMinThreads) --st.blocks_per_sm;
  }
  const int64_t top = std::clamp<int64_t>(std::min<int64_t>(sm_threads / st.blocks_per_sm, reg_warps / st.blocks_per_sm * 32) / 32 * 32,
                                          kRowStageMinThreads, kRowStageMaxThreads);
  st.threads = static_cast<int>(std::clamp<int64_t>(CeilDiv(CeilDiv(row_vectors, kRowStageVectorsPerThread), 32) * 32,
                                                    kRowStageMinThreads, top));
  const int64_t slots = int64_t{st.blocks_per_sm} * std::max(dev.sm_count, 1);
  st.grid = std::min<int64_t>(rows, slots);
  st.wave_efficiency = static_cast<double>(rows) / static_cast<double>(CeilDiv(rows, slots) * slots);
  return st;
}

int64_t RowStreamMinRows(const DeviceInfo& dev) {
  constexpr int64_t kBlockBytes = int64_t{kRowStreamThreads} * kRowStreamUnroll * 16;
  return int64_t{std::max(dev.sm_count, 1)} * CeilDiv(kRowStreamBytesPerSm, kBlockBytes);
}

bool StageGivesWayToSplit(const RowStage& st, bool no_overlap_too) {
  return st.wave_efficiency < kRowStageMinWaveEfficiency || (no_overlap_too && !st.twin && st.blocks_per_sm == 1);
}

std::optional<RowStage> ChooseRowStage(int64_t rows, int64_t cols, int elem_bytes, int inputs, const DeviceInfo& dev,
                                       int regs_per_thread) {
  const int64_t window = RowStageWindowBytes(cols, elem_bytes);
  if (window == 0 || inputs < 1) return std::nullopt;
  return RowStageFor(rows, window * inputs, window / 16, dev, regs_per_thread);
}

std::string RowStageSplit::ToString() const { return fmt::format("stagesplit{}_t{}_b{}", blocks, threads, blocks_per_sm); }

std::optional<RowStageSplit> ChooseRowStageSplit(int64_t rows, int64_t cols, int elem_bytes, int inputs, const DeviceInfo& dev,
                                                 int regs_per_thread) {
  const int64_t window = RowStageWindowBytes(cols, elem_bytes);
  if (window == 0 || inputs < 1 || dev.major < 9 || rows < std::max(dev.sm_count, 1)) return std::nullopt;
  const int vec = 16 / elem_bytes;
  const int64_t window_cols = window / 16 * vec;
  const int64_t optin = dev.max_shared_mem_per_block_optin;
  const int64_t per_sm = dev.shared_mem_per_sm > 0 ? dev.shared_mem_per_sm : optin;
  const int64_t budget = per_sm / kRowStageSplitBlocksPerSm - kRowStageStaticBytes;
  RowStageSplit sp;
  for (int b = 2; b <= kRowSplitBlocks; b *= 2) {
    const int64_t chunk = RowSplitChunk(window_cols, vec, b), bytes = chunk * elem_bytes * inputs;
    if (bytes <= budget || (b == kRowSplitBlocks && bytes + kRowStageStaticBytes <= optin)) {
      sp.blocks = b;
      sp.chunk = chunk;
      sp.smem_bytes = bytes;
      break;
    }
  }
  if (sp.blocks == 0) return std::nullopt;
  sp.blocks_per_sm = static_cast<int>(per_sm / (sp.smem_bytes + kRowStageStaticBytes));
  if (sp.blocks_per_sm < 2) return std::nullopt;  // one block an SM: nothing to overlap, the split's
  // fewer blocks than kRowStageSplitMinBlocksPerSm an SM: nothing to overlap, the split's
  if (rows * sp.blocks < int64_t{kRowStageSplitMinBlocksPerSm} * std::max(dev.sm_count, 1)) return std::nullopt;
  const int64_t share_vectors = sp.chunk / vec;
  int64_t threads = std::clamp<int64_t>(CeilDiv(CeilDiv(share_vectors, kRowStageSplitVectorsPerThread), 32) * 32,
                                        kRowStageMinThreads, kRowStageSplitMaxThreads);
  const int sm_threads = dev.max_threads_per_sm > 0 ? dev.max_threads_per_sm : 2048;
  int64_t warps = sm_threads / 32;  // warps an SM holds: by threads, and by the kernel's registers where known
  if (const int64_t w = RegisterFileWarps(dev, regs_per_thread); w > 0) warps = std::min(warps, w);
  // fewer threads a block where the blocks the shared memory holds would not all be resident, but not
  // below kRowStageMinThreads: then fewer blocks
  while (sp.blocks_per_sm > 1 && warps / sp.blocks_per_sm * 32 < kRowStageMinThreads) --sp.blocks_per_sm;
  threads = std::max<int64_t>(kRowStageMinThreads, std::min<int64_t>(threads, warps / sp.blocks_per_sm * 32));
  sp.blocks_per_sm = static_cast<int>(std::min<int64_t>(sp.blocks_per_sm, warps * 32 / threads));
  sp.threads = static_cast<int>(threads);
  return sp;
}

const char* ReductionFormName(ReductionForm f) {
  switch (f) {
    case ReductionForm::kWarpRow: return "warprow";
    case ReductionForm::kBlockRow: return "blockrow";
    case ReductionForm::kClusterRow: return "clusterrow";
  }
  return "?";
}

int64_t WaveGrid(int64_t work, int64_t per_block, int sm_count, int blocks_per_sm) {
  if (work <= 0) return 0;
  const int64_t need = CeilDiv(work, std::max<int64_t>(per_block, 1));
  const int64_t cap = int64_t{std::max(sm_count, 1)} * std::max(blocks_per_sm, 1);
  return std::min(need, cap);
}

ReductionShape ChooseReduction(int64_t rows, int64_t cols, int vec, const DeviceInfo& dev) {
  ReductionShape s;
  const int sms = std::max(dev.sm_count, 1);
  const int v = std::max(vec, 1);
  if (rows <= 0) return s;
  // A warp per row for narrow rows, and whenever there are enough rows to fill the GPU with warps.
  if (cols <= 1024 || rows >= int64_t{sms} * 32) {
    s.form = ReductionForm::kWarpRow;
    s.block = 32 * kWarpRowsPerBlock;
    s.grid = WaveGrid(rows, kWarpRowsPerBlock, sms, 8);
    return s;
  }
  // A cluster per row: a few rows (one cluster block per SM at most) of at least 4096 columns, sm_90+.
  if (dev.major >= 9 && cols >= 4096 && rows * kReductionClusterBlocks <= sms) {
    s.form = ReductionForm::kClusterRow;
    s.block = kReductionClusterThreads;
    s.grid = rows * kReductionClusterBlocks;
    return s;
  }
  // A block per row: about kReductionUnroll vectors per thread (one whole chunk, all loads in flight),
  // 64..1024 threads.
  s.form = ReductionForm::kBlockRow;
  const int64_t nvec = CeilDiv(cols, v);
  s.block = static_cast<int>(std::clamp<int64_t>((nvec / kReductionUnroll + 31) / 32 * 32, 64, 1024));
  s.grid = std::min<int64_t>(rows, int64_t{sms} * 16);
  return s;
}

}  // namespace opfuse::target
