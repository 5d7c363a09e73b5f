// ChooseRowShape / CheckRowShape: launch shapes of the fused row kernels (design in fused.h).
#include <algorithm>

#include <fmt/format.h>

#include "kernels/fused.h"

namespace opfuse::kernels {
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

bool ValidThreadsPerRow(int t) { return (t >= 1 && t < 32 && (t & (t - 1)) == 0) || (t >= 32 && t <= 1024 && t % 32 == 0); }

}  // namespace

std::string RowShape::ToString() const {
  return fmt::format("v{}_t{}x{}_p{}{}", vec, threads_per_row, vectors_per_thread, rows_per_block, looped ? "_looped" : "");
}

RowShape ChooseRowShape(int64_t rows, int64_t cols, int vec, const cuda::DeviceInfo& dev, RowLimits lim) {
  RowShape s;
  s.vec = std::max(vec, 1);
  const int64_t v = CeilDiv(std::max<int64_t>(cols, 1), s.vec);  // vectors per row
  const int64_t sms = std::max(dev.sm_count, 1);
  const bool prefill = rows >= kPrefillRowsPerSm * sms;
  const int max_vpt = std::clamp(lim.max_vpt, 1, kMaxVectorsPerThread);
  if (cols <= kMaxRegisterCols) {
    int tpr = 0, vpt = 0;
    if (prefill) {
      // Several 16-byte loads in flight per thread; at least 8 threads per row so that one warp
      // load covers >= 128 contiguous bytes of a row.
      const int target = std::clamp(lim.prefill_vpt, 1, max_vpt);
      tpr = RoundThreads(std::max(CeilDiv(v, target), std::min<int64_t>(v, 8)));
      vpt = SmallestVpt(CeilDiv(v, tpr), max_vpt);
      // A capped group (1024 threads) may need more vectors than allowed, or a larger block than
      // the kernel is built for: try fewer vectors per thread on wider groups.
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
  if (cols > kMaxRegisterCols)
    return InvalidArgument(fmt::format("row shape {}: {} columns exceed the register path ({})", what, cols, kMaxRegisterCols));
  if (static_cast<int64_t>(s.threads_per_row) * s.vectors_per_thread * s.vec < cols)
    return InvalidArgument(fmt::format("row shape {}: covers {} of {} columns", what,
                                       static_cast<int64_t>(s.threads_per_row) * s.vectors_per_thread * s.vec, cols));
  return Status::Ok();
}

}  // namespace opfuse::kernels
