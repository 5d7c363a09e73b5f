// Launch-shape rules (target/launch_shape.h) on fake devices: no GPU needed, so they run in CI.
// The GPU tests (tests/gpu/library_fused_test.cc, library_ops_test.cc) check that the planners bind
// these shapes to kernels and that the kernels compute the right answer with them.
#include "target/launch_shape.h"

#include "fake_device.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace opfuse {
namespace {

using target::ChooseReduction;
using target::ChooseRowShape;
using target::CheckRowShape;
using target::DeviceInfo;
using target::ReductionForm;
using target::RowLimits;
using target::RowShape;

using testing_device::FakeDevice;
using testing_device::FakeH200;


TEST(LaunchShape, RowShapesDecodeVsPrefill) {
  const auto dev = FakeH200();
  // Decode: one row per block, one 16-byte vector per thread, the whole row in flight.
  RowShape s = target::ChooseRowShape(1, 2048, 8, dev);
  EXPECT_EQ(s.threads_per_row, 256);
  EXPECT_EQ(s.vectors_per_thread, 1);
  EXPECT_EQ(s.rows_per_block, 1);
  EXPECT_FALSE(s.looped);
  s = target::ChooseRowShape(32, 4096, 8, dev);
  EXPECT_EQ(s.threads_per_row, 512);
  EXPECT_EQ(s.vectors_per_thread, 1);
  s = target::ChooseRowShape(8, 16384, 8, dev);
  EXPECT_EQ(s.threads_per_row, 1024);
  EXPECT_EQ(s.vectors_per_thread, 2);
  // Prefill: 4 vectors per thread, 64 threads per 2048-wide bf16 row, ~128-thread blocks.
  s = target::ChooseRowShape(16384, 2048, 8, dev);
  EXPECT_EQ(s.threads_per_row, 64);
  EXPECT_EQ(s.vectors_per_thread, 4);
  EXPECT_EQ(s.rows_per_block, 2);
  s = target::ChooseRowShape(16384, 4096, 8, dev);
  EXPECT_EQ(s.threads_per_row, 128);
  EXPECT_EQ(s.vectors_per_thread, 4);
  EXPECT_EQ(s.block(), 128);
  s = target::ChooseRowShape(16384, 16384, 8, dev);
  EXPECT_EQ(s.threads_per_row, 512);
  EXPECT_EQ(s.vectors_per_thread, 4);
  EXPECT_FALSE(s.looped);
  // Narrow prefill rows: >= 8 threads per row (coalesced), several rows per warp.
  s = target::ChooseRowShape(16384, 64, 8, dev);
  EXPECT_EQ(s.threads_per_row, 8);
  EXPECT_EQ(s.vectors_per_thread, 1);
  EXPECT_EQ(s.rows_per_block, 16);
  // Between decode and prefill (65 .. 4 rows per SM - 1): at most 256 threads per row.
  EXPECT_EQ(target::ChooseRowShape(512, 4096, 8, dev).threads_per_row, 256);
  EXPECT_EQ(target::ChooseRowShape(512, 4096, 8, dev).vectors_per_thread, 2);
  EXPECT_EQ(target::ChooseRowShape(64, 4096, 8, dev).threads_per_row, 512);
  // The boundary between decode and prefill is 4 rows per SM.
  EXPECT_EQ(target::ChooseRowShape(4 * 132 - 1, 2048, 8, dev).threads_per_row, 256);
  EXPECT_EQ(target::ChooseRowShape(4 * 132, 2048, 8, dev).threads_per_row, 64);
  // Beyond the register path: looped.
  EXPECT_TRUE(target::ChooseRowShape(1, 20000, 8, dev).looped);
  EXPECT_TRUE(target::ChooseRowShape(16384, 20000, 8, dev).looped);
  // Scalar path on a wide row: more vectors than fit -> looped.
  EXPECT_TRUE(target::ChooseRowShape(16384, 16384, 1, dev).looped);
  // Heavy kernels (softmax with a mask) stay within 512 threads and 4 vectors.
  s = target::ChooseRowShape(16384, 4096, 8, dev, {4, true});
  EXPECT_LE(s.vectors_per_thread, 4);
  EXPECT_LE(s.block(), 512);
  // Every chosen register shape passes its own check.
  for (int64_t rows : {1, 3, 32, 513, 4096, 16384})
    for (int64_t cols : {1, 2, 64, 77, 1000, 2048, 4096, 5632, 16384, 20000})
      for (int vec : {1, 4, 8})
        for (target::RowLimits lim : {target::RowLimits{}, target::RowLimits{4, true}}) {
          s = target::ChooseRowShape(rows, cols, vec, dev, lim);
          EXPECT_TRUE(target::CheckRowShape(s, cols, lim).ok()) << rows << "x" << cols << " " << s.ToString();
          if (!s.looped) {
            EXPECT_GE(int64_t{s.threads_per_row} * s.vectors_per_thread * s.vec, cols);
          }
        }
}

TEST(LaunchShape, RowFamilyLimits) {
  EXPECT_EQ(target::RowFamilyLimits(OpKind::kRmsNorm, false).prefill_vpt, 4);
  EXPECT_EQ(target::RowFamilyLimits(OpKind::kLayerNorm, false).prefill_vpt, 4);
  EXPECT_EQ(target::RowFamilyLimits(OpKind::kAddRmsNorm, false).prefill_vpt, 2);
  const RowLimits masked = target::RowFamilyLimits(OpKind::kSoftmax, true);
  EXPECT_EQ(masked.max_vpt, 4);
  EXPECT_TRUE(masked.heavy);
  EXPECT_FALSE(target::RowFamilyLimits(OpKind::kSoftmax, false).heavy);
  // The families' prefill shapes at 16384 x 2048 bf16 (the planners' launch names in the GPU tests).
  const auto dev = FakeH200();
  EXPECT_EQ(ChooseRowShape(16384, 2048, 8, dev, target::RowFamilyLimits(OpKind::kAddRmsNorm, false)).ToString(), "v8_t128x2_p1");
  EXPECT_EQ(ChooseRowShape(16384, 2048, 8, dev, target::RowFamilyLimits(OpKind::kSoftmax, false)).ToString(), "v8_t64x4_p2");
  EXPECT_EQ(ChooseRowShape(16384, 2048, 8, dev, masked).ToString(), "v8_t64x4_p2");
}

TEST(LaunchShape, RowVectorElems) {
  EXPECT_EQ(target::RowVectorElems(2048, 2, true), 8);
  EXPECT_EQ(target::RowVectorElems(2048, 4, true), 4);
  EXPECT_EQ(target::RowVectorElems(2048, 2, false), 1);  // a base pointer off 16 bytes
  EXPECT_EQ(target::RowVectorElems(4999, 2, true), 1);   // row starts off 16 bytes
  EXPECT_EQ(target::RowVectorElems(12, 4, true), 4);
  EXPECT_EQ(target::RowVectorElems(6, 4, true), 1);
  EXPECT_EQ(target::RowVectorElems(0, 2, true), 1);
  EXPECT_EQ(target::RowVectorElems(64, 8, true), 2);
  EXPECT_EQ(target::RowVectorElems(64, 1, true), 16);
}

TEST(LaunchShape, RowAccessShiftsUnalignedRowStarts) {
  auto a = target::ChooseRowAccess(2048, 2, true);  // aligned rows: plain vectors
  EXPECT_EQ(a.vec, 8);
  EXPECT_FALSE(a.shifted);
  EXPECT_EQ(a.window_cols, 2048);
  a = target::ChooseRowAccess(4999, 2, true);  // row starts off the 16-byte grid: the aligned window
  EXPECT_EQ(a.vec, 8);
  EXPECT_TRUE(a.shifted);
  EXPECT_EQ(a.window_cols, 4999 + 7);
  a = target::ChooseRowAccess(77, 4, true);
  EXPECT_EQ(a.vec, 4);
  EXPECT_TRUE(a.shifted);
  EXPECT_EQ(a.window_cols, 80);
  a = target::ChooseRowAccess(4999, 2, false);  // an unaligned base: 1-element vectors
  EXPECT_EQ(a.vec, 1);
  EXPECT_FALSE(a.shifted);
  EXPECT_EQ(a.window_cols, 4999);
  // The window's shape covers it: a row of 4999 bf16 at decode takes 626 vectors' worth of threads.
  const RowShape s = ChooseRowShape(1, a.window_cols + 7, 8, FakeH200());
  EXPECT_GE(int64_t{s.threads_per_row} * s.vectors_per_thread * 8, 4999 + 7);
}

TEST(LaunchShape, RowSplitCoversTheWindowInAClusterOf8) {
  auto sp = target::ChooseRowSplit(1, 128256, 2, FakeH200(), 4, true);  // a Llama-3 vocabulary row, bf16
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(sp->blocks, 8);  // one row: the most blocks per row
  EXPECT_EQ(sp->vec, 8);
  EXPECT_EQ(sp->vpt, 4);      // 2004 vectors a block: 501 threads at 4 -> 512
  EXPECT_EQ(sp->threads, 512);
  EXPECT_EQ(sp->ToString(), "cluster8_t512x4");
  sp = target::ChooseRowSplit(64, 262144, 2, FakeH200(), 4, true);
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(sp->vpt, 8);
  EXPECT_EQ(sp->blocks, 8);
  EXPECT_FALSE(target::ChooseRowSplit(1, 262144, 4, FakeH200(), 4, true).has_value());  // f32: 65536 elements a block is too many
  EXPECT_FALSE(target::ChooseRowSplit(1, 4096, 3, FakeH200(), 4, true).has_value());
  // many rows split too, with the fewest blocks per row that hold the row at the compiled width
  sp = target::ChooseRowSplit(1255, 106875, 2, FakeH200(), 4, true);  // 13361 window vectors: 4 a thread, 8 blocks
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(sp->vpt, 4);
  EXPECT_EQ(sp->blocks, 8);
  EXPECT_EQ(sp->threads, 448);
  sp = target::ChooseRowSplit(179, 32000, 2, FakeH200(), 4, true);  // 4000 vectors: 2 a thread, so 4 blocks of 500
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(sp->vpt, 2);
  EXPECT_EQ(sp->blocks, 4);
  EXPECT_EQ(sp->threads, 512);
  sp = target::ChooseRowSplit(16, 32000, 2, FakeH200(), 4, true);  // 16 rows: 8 blocks each (128 of 132 SMs)
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(sp->blocks, 8);
  EXPECT_EQ(sp->threads, 256);
  EXPECT_FALSE(target::ChooseRowSplit(0, 128256, 2, FakeH200(), 4, true).has_value());
  // without `many_rows`: fewer rows than SMs only (the softmax over shifted rows, the JIT's narrow vectors)
  EXPECT_TRUE(target::ChooseRowSplit(131, 128256, 2, FakeH200(), 4, false).has_value());
  EXPECT_FALSE(target::ChooseRowSplit(132, 128256, 2, FakeH200(), 4, false).has_value());
  EXPECT_TRUE(target::UseRowSplit(5000, FakeH200(), true));
  EXPECT_FALSE(target::UseRowSplit(5000, FakeH200(), false));
  EXPECT_FALSE(target::UseRowSplit(1, FakeDevice(132, 8), true));
  EXPECT_FALSE(target::ChooseRowSplit(1, 128256, 2, FakeDevice(132, 8), 4, true).has_value());  // no clusters before sm_90
  std::mt19937_64 rng(7);
  for (int i = 0; i < 5000; ++i) {
    const int64_t cols = 16385 + static_cast<int64_t>(rng() % 300000);
    for (int esize : {2, 4}) {
      const int64_t rows = 1 + static_cast<int64_t>(rng() % 3000);
      auto r = target::ChooseRowSplit(rows, cols, esize, FakeH200(), 4, true);
      if (!r) {
        ASSERT_GT(cols, int64_t{8} * 512 * 8 * (16 / esize) - 16 / esize) << cols;
        continue;
      }
      const int64_t window = (cols * esize) % 16 ? cols + r->vec - 1 : cols;
      ASSERT_EQ(r->chunk % r->vec, 0);
      ASSERT_EQ(r->chunk, target::RowSplitChunk(window, r->vec, r->blocks));
      ASSERT_GE(r->chunk * r->blocks, window) << cols;   // the window is covered
      ASSERT_LT(r->chunk * (r->blocks - 1), window) << cols;  // no block is idle
      ASSERT_GE(int64_t{r->threads} * r->vpt * r->vec, r->chunk);
      ASSERT_LT(int64_t{r->threads - 32} * r->vpt * r->vec, r->chunk);  // no idle warp
      ASSERT_LE(r->threads, target::kRowSplitMaxThreads);
      ASSERT_EQ(r->threads % 32, 0);
      ASSERT_TRUE(r->blocks == 1 || r->blocks == 2 || r->blocks == 4 || r->blocks == 8);
      // every SM gets a block, or the row has the most blocks it can
      ASSERT_TRUE(rows * r->blocks >= 132 || r->blocks == target::kRowSplitBlocks) << rows << " x " << cols;
    }
  }
}

// The rule under the library's split and the JIT's: narrow vectors (odd widths, 1 element) hold more
// of them per thread, within the data-register budget; then the fewest blocks per row that hold it.
TEST(LaunchShape, PlanRowSplitKeepsBytesInFlightAndTheRegisterBudget) {
  // logsumexp bf16 x 169249 (odd): 1-element vectors, one 16-bit input (one register per vector)
  auto p = target::PlanRowSplit(169249, 1, 2, 1, 64);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->vpt, 64);  // 8 blocks: 21157 elements a block, 331 threads at 64
  EXPECT_EQ(p->min_blocks, 8);
  auto r = target::RowSplitFor(*p, 1, 132);
  EXPECT_EQ(r.blocks, 8);
  EXPECT_EQ(r.threads, 352);
  r = target::RowSplitFor(*p, 1000, 132);
  EXPECT_EQ(r.blocks, 8);  // never fewer than the plan's minimum
  // at least 32 bytes in flight per thread: 8 one-element f32 vectors, even where fewer would fit
  p = target::PlanRowSplit(3000, 1, 4, 1, 64);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->vpt, 8);
  EXPECT_EQ(p->min_blocks, 1);  // 375 threads
  EXPECT_EQ(target::RowSplitFor(*p, 200, 132).blocks, 1);
  EXPECT_EQ(target::RowSplitFor(*p, 20, 132).blocks, 8);  // 20 x 8 = 160 >= 132
  EXPECT_EQ(target::RowSplitFor(*p, 20, 132).threads, 64);  // 375 vectors a block over 8 -> 47 -> 64
  EXPECT_EQ(target::RowSplitFor(*p, 40, 132).blocks, 4);
  // two inputs held (8 words per 16-byte vector): at most 8 vectors
  EXPECT_FALSE(target::PlanRowSplit(int64_t{8} * 512 * 8 * 8 + 8, 8, 16, 8, 64).has_value());
  EXPECT_TRUE(target::PlanRowSplit(int64_t{8} * 512 * 8 * 8, 8, 16, 8, 64).has_value());
  // within the register budget: at most 96 words of one-element vectors (a power of two: 64)
  EXPECT_FALSE(target::PlanRowSplit(int64_t{8} * 512 * 64 + 1, 1, 2, 1, 64).has_value());
  EXPECT_EQ(target::PlanRowSplit(100000, 1, 2, 3, 64)->vpt, 32);  // 96 / 3 words: 32
  std::mt19937_64 rng(11);
  for (int i = 0; i < 5000; ++i) {
    const int64_t cols = 1 + static_cast<int64_t>(rng() % 300000);
    const int vec = 1 << (rng() % 4), esize = 1 << (1 + rng() % 2), words = 1 + static_cast<int>(rng() % 4);
    auto q = target::PlanRowSplit(cols, vec, vec * esize, words, 64);
    if (!q) continue;
    ASSERT_LE(q->vpt * words, target::kRowSplitMaxWords);
    for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{5000}}) {
      const auto s = target::RowSplitFor(*q, rows, 132);
      ASSERT_GE(s.blocks, q->min_blocks);
      ASSERT_EQ(s.chunk % vec, 0);
      ASSERT_GE(s.chunk * s.blocks, cols);
      ASSERT_GE(int64_t{s.threads} * s.vpt * s.vec, s.chunk);
      ASSERT_LE(s.threads, target::kRowSplitMaxThreads);
      ASSERT_EQ(s.threads % 32, 0);
    }
  }
}

TEST(LaunchShape, ReductionForms) {
  const auto dev = FakeH200();
  auto form = [&](int64_t rows, int64_t cols, int vec) { return ChooseReduction(rows, cols, vec, dev).form; };
  EXPECT_EQ(form(16384, 2048, 8), ReductionForm::kWarpRow);   // many rows: a warp each
  EXPECT_EQ(form(513, 77, 1), ReductionForm::kWarpRow);       // narrow rows
  EXPECT_EQ(form(1, 32000, 4), ReductionForm::kClusterRow);   // one vocabulary row: 8 blocks
  EXPECT_EQ(form(16, 32000, 8), ReductionForm::kClusterRow);  // 16 x 8 = 128 <= 132 SMs
  EXPECT_EQ(form(17, 32000, 8), ReductionForm::kBlockRow);    // 17 x 8 > 132
  EXPECT_EQ(form(1, 4095, 1), ReductionForm::kBlockRow);      // below 4096 columns
  EXPECT_EQ(ChooseReduction(1, 32000, 4, FakeDevice(132, 8)).form, ReductionForm::kBlockRow);  // no clusters before sm_90
  // Sizes: warp rows 8 per 256-thread block up to a wave of 8 blocks per SM; a block row ~8 vectors a thread.
  auto s = ChooseReduction(16384, 2048, 8, dev);
  EXPECT_EQ(s.block, 256);
  EXPECT_EQ(s.grid, 132 * 8);
  s = ChooseReduction(40, 2048, 8, dev);
  EXPECT_EQ(s.form, ReductionForm::kBlockRow);
  EXPECT_EQ(s.grid, 40);
  EXPECT_EQ(s.block, 64);  // 256 vectors / 8 = 32 threads, at least 64
  s = ChooseReduction(40, 131072, 8, dev);
  EXPECT_EQ(s.block, 1024);
  s = ChooseReduction(3, 65536, 8, dev);
  EXPECT_EQ(s.form, ReductionForm::kClusterRow);
  EXPECT_EQ(s.grid, 3 * target::kReductionClusterBlocks);
  EXPECT_EQ(s.block, target::kReductionClusterThreads);
  EXPECT_EQ(ChooseReduction(0, 2048, 8, dev).grid, 0);
}

TEST(LaunchShape, WaveGrid) {
  EXPECT_EQ(target::WaveGrid(0, 8, 132), 0);
  EXPECT_EQ(target::WaveGrid(1, 8, 132), 1);
  EXPECT_EQ(target::WaveGrid(17, 8, 132), 3);
  EXPECT_EQ(target::WaveGrid(int64_t{1} << 40, 8, 132), 132 * 8);
  EXPECT_EQ(target::WaveGrid(int64_t{1} << 40, 8, 132, 2), 264);
  EXPECT_EQ(target::WaveGrid(100, 8, 0), 8);  // an unknown SM count counts as one SM
}

// Random shapes with a fixed seed, aligned and not, on three machine sizes: every chosen shape is
// launchable and covers its row; reduction shapes are launchable and never ask for more blocks
// than the rows need (block row) or the SMs hold (cluster row).
TEST(LaunchShape, RandomShapesAreLaunchableAndCoverTheRow) {
  std::mt19937_64 rng(20261126);
  std::uniform_int_distribution<int> log_rows(0, 16), log_cols(0, 18);
  const int esizes[] = {1, 2, 4, 8};
  for (int sms : {16, 78, 132}) {
    const DeviceInfo dev = FakeDevice(sms);
    for (int i = 0; i < 3000; ++i) {
      const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(rng() % (int64_t{1} << log_rows(rng))) + 1);
      int64_t cols = static_cast<int64_t>(rng() % (int64_t{1} << log_cols(rng))) + 1;
      if (i % 7 == 0) cols = 262144 - static_cast<int64_t>(rng() % 17);
      const int esize = esizes[rng() % 4];
      const bool aligned = rng() % 3 != 0;
      const target::RowAccess access = target::ChooseRowAccess(cols, esize, aligned);
      if (access.shifted) {  // the window's shape covers the window (or the row is looped, then 1-element)
        const RowShape ws = ChooseRowShape(rows, access.window_cols, access.vec, dev);
        ASSERT_TRUE(CheckRowShape(ws, access.window_cols).ok()) << ws.ToString();
        ASSERT_EQ(access.window_cols, cols + access.vec - 1);
        ASSERT_EQ(access.vec * esize, 16);
      }
      const int vec = target::RowVectorElems(cols, esize, aligned);
      ASSERT_EQ(vec * esize <= 16, true);
      ASSERT_EQ(cols % vec, 0) << cols << " " << vec;
      for (OpKind op : {OpKind::kRmsNorm, OpKind::kAddRmsNorm, OpKind::kLayerNorm, OpKind::kSoftmax})
        for (bool mask : {false, true}) {
          if (mask && op != OpKind::kSoftmax) continue;
          const RowLimits lim = target::RowFamilyLimits(op, mask);
          const RowShape s = ChooseRowShape(rows, cols, vec, dev, lim);
          ASSERT_TRUE(CheckRowShape(s, cols, lim).ok()) << rows << "x" << cols << " " << s.ToString() << ": "
                                                        << CheckRowShape(s, cols, lim).message();
          ASSERT_EQ(s.vec, vec);
          ASSERT_LE(s.block(), 1024);
          ASSERT_GE(s.block(), 1);
          if (!s.looped) {
            ASSERT_LE(cols, target::kMaxRegisterCols);
            ASSERT_GE(int64_t{s.threads_per_row} * s.vectors_per_thread * s.vec, cols) << s.ToString();
          } else {
            ASSERT_EQ(s.rows_per_block, 1);
          }
        }
      const auto r = ChooseReduction(rows, cols, vec, dev);
      ASSERT_GT(r.grid, 0);
      ASSERT_GE(r.block, 32);
      ASSERT_LE(r.block, 1024);
      ASSERT_EQ(r.block % 32, 0);
      switch (r.form) {
        case ReductionForm::kWarpRow: ASSERT_LE(r.grid, (rows + 7) / 8); break;
        case ReductionForm::kBlockRow: ASSERT_LE(r.grid, rows); break;
        case ReductionForm::kClusterRow:
          ASSERT_LE(r.grid, sms);
          ASSERT_EQ(r.grid, rows * target::kReductionClusterBlocks);
          break;
      }
    }
  }
}

}  // namespace
}  // namespace opfuse
