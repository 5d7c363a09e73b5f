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

// Rows past kMaxRegisterCols: the norms keep them in registers at two rows per SM or more, with at most
// kRegisterRowWords words of row data a thread; fewer rows, the softmax, add_rms_norm (8 words a
// vector) and f32 stay off the register path.
TEST(LaunchShape, WideRowsInRegistersWhereTheWordsFit) {
  const auto dev = FakeH200();
  const RowLimits rms = target::RowFamilyLimits(OpKind::kRmsNorm, false);
  const RowLimits layer = target::RowFamilyLimits(OpKind::kLayerNorm, false);
  const RowLimits add = target::RowFamilyLimits(OpKind::kAddRmsNorm, false);
  const RowLimits sm = target::RowFamilyLimits(OpKind::kSoftmax, false);
  EXPECT_EQ(rms.wide_words_per_vector, 4);
  EXPECT_EQ(add.wide_words_per_vector, 8);
  EXPECT_EQ(sm.wide_words_per_vector, 0);
  // shifted rows (row starts off the 16-byte grid) keep wide rows off the register path
  for (OpKind op : {OpKind::kRmsNorm, OpKind::kLayerNorm, OpKind::kAddRmsNorm}) {
    EXPECT_EQ(target::RowFamilyLimits(op, false, true).wide_words_per_vector, 0) << OpName(op);
    EXPECT_TRUE(target::ChooseRowShape(5000, 20190 + 7, 8, dev, target::RowFamilyLimits(op, false, true)).looped) << OpName(op);
    if (op != OpKind::kAddRmsNorm)  // (two held inputs: 16 words are 2 vectors, 16384 columns, no wide rows)
      EXPECT_FALSE(target::ChooseRowShape(5000, 20192, 8, dev, target::RowFamilyLimits(op, false, false)).looped) << OpName(op);
  }
  // bf16 7708 x 17412 (the shifted window: 17419 columns): prefill shape, 4 vectors a thread
  RowShape s = ChooseRowShape(7708, 17419, 8, dev, rms);
  EXPECT_FALSE(s.looped) << s.ToString();
  EXPECT_EQ(s.ToString(), "v8_t576x4_p1");
  EXPECT_TRUE(CheckRowShape(s, 17419, rms).ok());
  EXPECT_FALSE(ChooseRowShape(7708, 17419, 8, dev, layer).looped);
  // the widest: 1024 threads x 4 vectors x 8 elements
  s = ChooseRowShape(4185, 32768, 8, dev, rms);
  EXPECT_EQ(s.ToString(), "v8_t1024x4_p1");
  EXPECT_TRUE(ChooseRowShape(4185, 32776, 8, dev, rms).looped);
  // two rows per SM to 4 ("mid"): more than 256 threads a row rather than 8 vectors (32 words)
  s = ChooseRowShape(300, 16390, 8, dev, rms);
  EXPECT_EQ(s.ToString(), "v8_t544x4_p1");
  EXPECT_TRUE(ChooseRowShape(2 * 132 - 1, 20000, 8, dev, rms).looped);  // fewer than two rows an SM: split
  EXPECT_FALSE(ChooseRowShape(2 * 132, 20000, 8, dev, rms).looped);
  EXPECT_TRUE(ChooseRowShape(7708, 17419, 8, dev, add).looped);  // 2 vectors of 8 words: <= 16384 only
  EXPECT_TRUE(ChooseRowShape(7708, 17419, 8, dev, sm).looped);
  EXPECT_TRUE(ChooseRowShape(7708, 17412, 4, dev, rms).looped);  // f32: 4096 vectors of 4 hold 16384
  EXPECT_FALSE(ChooseRowShape(7708, 16384, 4, dev, rms).looped);
  // forced shapes: within the words, and not past them or for a family without wide rows
  RowShape forced;
  forced.vec = 8;
  forced.threads_per_row = 1024;
  forced.vectors_per_thread = 4;
  EXPECT_TRUE(CheckRowShape(forced, 32768, rms).ok());
  EXPECT_FALSE(CheckRowShape(forced, 32768, sm).ok());
  forced.threads_per_row = 512;
  forced.vectors_per_thread = 8;
  EXPECT_FALSE(CheckRowShape(forced, 32768, rms).ok());
  // every chosen shape passes its own check and covers the row
  std::mt19937 rng(20261128);
  for (int i = 0; i < 400; ++i) {
    const int64_t rows = std::uniform_int_distribution<int64_t>(1, 20000)(rng);
    const int64_t cols = std::uniform_int_distribution<int64_t>(16000, 40000)(rng);
    for (const RowLimits& lim : {rms, layer, add, sm})
      for (int vec : {1, 4, 8}) {
        s = ChooseRowShape(rows, cols, vec, dev, lim);
        EXPECT_TRUE(CheckRowShape(s, cols, lim).ok()) << rows << "x" << cols << " " << s.ToString();
        if (!s.looped) {
          EXPECT_GE(int64_t{s.threads_per_row} * s.vectors_per_thread * s.vec, cols);
          if (cols > target::kMaxRegisterCols) {
            EXPECT_GE(rows, target::kWideRowsPerSm * dev.sm_count);
            EXPECT_LE(s.vectors_per_thread * lim.wide_words_per_vector, target::kRegisterRowWords);
          }
        }
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

// The staged split: a cluster a row, each block staging its share in shared memory. The fewest of 2,
// 4, 8 blocks whose share fits a sixth of an SM's shared memory (else 8 where it fits a block), about 8
// vectors of the share a thread; from one row per SM up, sm_90+.
TEST(LaunchShape, RowStageSplit) {
  const auto h200 = FakeH200();
  // bf16 rms_norm 1112 x 120600: 15076 window vectors; 4 blocks: 60 KB shares (over 36 KiB), 8: 30 KB
  auto sp = target::ChooseRowStageSplit(1112, 120600, 2, 1, h200);
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(sp->blocks, 8);
  EXPECT_EQ(sp->chunk, 1885 * 8);
  EXPECT_EQ(sp->smem_bytes, 1885 * 16);
  EXPECT_EQ(sp->threads, 256);  // 1885 vectors / 8 = 236 -> whole warps
  EXPECT_EQ(sp->blocks_per_sm, 7);
  EXPECT_EQ(sp->ToString(), "stagesplit8_t256_b7");
  // 2249 x 59664: 4 blocks of 29.8 KB; add_rms_norm (x and the residual staged) needs 8
  sp = target::ChooseRowStageSplit(2249, 59664, 2, 1, h200);
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(sp->blocks, 4);
  EXPECT_EQ(target::ChooseRowStageSplit(2249, 59664, 2, 2, h200)->blocks, 8);
  // 385 x 235064: 8 blocks of 57.4 KiB (over the sixth, within a block): 3 an SM, 480 threads
  sp = target::ChooseRowStageSplit(385, 235064, 2, 1, h200);
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(sp->blocks, 8);
  EXPECT_EQ(sp->blocks_per_sm, 3);
  EXPECT_EQ(sp->threads, 480);
  // fewer than 3 blocks an SM: 133 rows of 16385 columns take 2 blocks a row (266 < 396): none
  EXPECT_FALSE(target::ChooseRowStageSplit(133, 16385, 2, 1, h200).has_value());
  EXPECT_TRUE(target::ChooseRowStageSplit(198, 16385, 2, 1, h200).has_value());
  // f32 rows past 8 x 227 KiB: none; shares past half an SM's shared memory (one block an SM): none
  EXPECT_FALSE(target::ChooseRowStageSplit(500, 8 * 60000, 4, 1, h200).has_value());
  EXPECT_FALSE(target::ChooseRowStageSplit(385, 235064, 2, 2, h200).has_value());  // add_rms_norm: 2 x 57.4 KiB
  EXPECT_TRUE(target::ChooseRowStageSplit(648, 173616, 2, 2, h200).has_value());   // 2 x 42.4 KiB: two an SM
  EXPECT_FALSE(target::ChooseRowStageSplit(131, 120600, 2, 1, h200).has_value());  // fewer rows than SMs: the split's
  EXPECT_FALSE(target::ChooseRowStageSplit(5000, 120600, 2, 1, FakeDevice(132, 8)).has_value());  // no clusters
  EXPECT_FALSE(target::ChooseRowStageSplit(5000, 120600, 3, 1, h200).has_value());
  // the kernel's registers: the blocks the shared memory allows stay resident in the register file
  auto regs = h200;
  regs.regs_per_sm = 65536;
  sp = target::ChooseRowStageSplit(1112, 120600, 2, 1, regs, 64);  // 32 warps an SM: 7 blocks of 4 warps
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(sp->blocks_per_sm, 7);
  EXPECT_EQ(sp->threads, 128);
  sp = target::ChooseRowStageSplit(1112, 120600, 2, 1, regs, 128);  // 16 warps: 4 blocks of 4 warps
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(sp->blocks_per_sm, 4);
  EXPECT_EQ(sp->threads, 128);
  const int64_t optin = h200.max_shared_mem_per_block_optin, per_sm = h200.shared_mem_per_sm;
  std::mt19937_64 rng(12);
  for (int i = 0; i < 5000; ++i) {
    const int64_t cols = 1 + static_cast<int64_t>(rng() % 600000);
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 70000);
    for (int esize : {2, 4})
      for (int inputs : {1, 2}) {
        auto r = target::ChooseRowStageSplit(rows, cols, esize, inputs, h200);
        const int vec = 16 / esize;
        const int64_t window_cols = target::RowStageWindowBytes(cols, esize) / 16 * vec;
        const int64_t share8 = target::RowSplitChunk(window_cols, vec, 8) * esize * inputs;
        if (rows * 8 >= 3 * 132 && rows >= 132 && 2 * (share8 + target::kRowStageStaticBytes) <= per_sm) {
          // (the fewest blocks that fit may give fewer than 3 blocks an SM: then none)
        } else {
          ASSERT_FALSE(r.has_value()) << rows << " x " << cols;
        }
        if (!r) continue;
        ASSERT_GE(rows * r->blocks, 3 * 132);  // three blocks an SM or more
        ASSERT_TRUE(r->blocks == 2 || r->blocks == 4 || r->blocks == 8);
        ASSERT_EQ(r->chunk, target::RowSplitChunk(window_cols, vec, r->blocks));
        ASSERT_EQ(r->chunk % vec, 0);
        ASSERT_GE(r->chunk * r->blocks, window_cols);  // the window is covered
        ASSERT_EQ(r->smem_bytes, r->chunk * esize * inputs);
        ASSERT_LE(r->smem_bytes + target::kRowStageStaticBytes, optin);  // a block's share fits its opt-in limit
        const int64_t budget = per_sm / target::kRowStageSplitBlocksPerSm - target::kRowStageStaticBytes;
        ASSERT_TRUE(r->smem_bytes <= budget || r->blocks == 8);
        if (r->blocks > 2) {  // the fewest blocks: half as many would not fit the budget
          ASSERT_GT(target::RowSplitChunk(window_cols, vec, r->blocks / 2) * esize * inputs, budget);
        }
        ASSERT_GE(r->blocks_per_sm, 2);
        ASSERT_LE(r->blocks_per_sm * (r->smem_bytes + target::kRowStageStaticBytes), per_sm);
        ASSERT_LE(r->blocks_per_sm * r->threads, 2048);
        ASSERT_EQ(r->threads % 32, 0);
        ASSERT_GE(r->threads, target::kRowStageMinThreads);
        ASSERT_LE(r->threads, target::kRowStageSplitMaxThreads);
      }
  }
}

// Staged rows: taken from one row per SM up where the window of every staged input fits one block's
// opt-in shared memory; the block's threads copy about kRowStageVectorsPerThread vectors each.
TEST(LaunchShape, RowStage) {
  const auto h200 = FakeH200();
  auto st = target::ChooseRowStage(2730, 49152, 2, 1, h200);  // 6145 vectors of 16 bytes: 96 KiB, twice
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->buffer_bytes, 6145 * 16);  // the worst-placed row's window: cols + 7 elements
  EXPECT_TRUE(st->twin);
  EXPECT_EQ(st->smem_bytes, 2 * 6145 * 16);
  EXPECT_EQ(st->blocks_per_sm, 1);
  EXPECT_EQ(st->threads, 1024);  // the SM's 2048 threads over one block, at most 1024
  EXPECT_EQ(st->grid, 132);
  EXPECT_DOUBLE_EQ(st->wave_efficiency, 2730.0 / (21 * 132));  // 21 waves of 132 blocks
  EXPECT_EQ(st->ToString(), "stage2_t1024_b1");
  st = target::ChooseRowStage(2730, 65778, 2, 1, h200);  // 128 KiB: one set, one block an SM
  ASSERT_TRUE(st.has_value());
  EXPECT_FALSE(st->twin);
  EXPECT_EQ(st->blocks_per_sm, 1);
  EXPECT_EQ(st->ToString(), "stage_t1024_b1");
  st = target::ChooseRowStage(200, 20000, 2, 2, h200);  // add_rms_norm: x and the residual, 2 x 2 x 39 KiB
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->twin);
  EXPECT_EQ(st->blocks_per_sm, 1);
  EXPECT_EQ(st->grid, 132);
  st = target::ChooseRowStage(5000, 16500, 4, 1, h200);  // f32: 2 x 64.5 KiB, one block
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->twin);
  st = target::ChooseRowStage(5000, 16500, 2, 1, h200);  // bf16: 2 x 32 KiB, three blocks
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->blocks_per_sm, 3);
  EXPECT_EQ(st->threads, 672);  // 2048 / 3 in whole warps
  EXPECT_EQ(st->grid, 396);
  EXPECT_FALSE(target::ChooseRowStage(2730, 65536, 4, 1, h200).has_value());  // f32: 256 KiB
  EXPECT_FALSE(target::ChooseRowStage(131, 49152, 2, 1, h200).has_value());   // fewer rows than SMs: the split's
  EXPECT_TRUE(target::ChooseRowStage(132, 49152, 2, 1, h200).has_value());
  EXPECT_FALSE(target::ChooseRowStage(5000, 49152, 2, 1, FakeDevice(132, 7)).has_value());  // no cp.async before sm_80
  EXPECT_TRUE(target::ChooseRowStage(5000, 49152, 2, 1, FakeDevice(132, 8)).has_value());
  EXPECT_FALSE(target::ChooseRowStage(5000, 49152, 3, 1, h200).has_value());
  // the kernel's registers: the blocks the shared memory allows stay resident in the register file
  auto regs = h200;
  regs.regs_per_sm = 65536;
  st = target::ChooseRowStage(6647, 20190, 2, 1, regs, 64);  // 2 x 39.5 KiB twin: two blocks an SM by shared memory
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->blocks_per_sm, 2);
  EXPECT_EQ(st->threads, 512);  // 64 registers: 32 warps an SM, 16 a block (not 1024 threads, one block resident)
  EXPECT_EQ(target::ChooseRowStage(6647, 20190, 2, 1, regs, 32)->threads, 1024);  // 32 registers: both fit at 1024
  EXPECT_EQ(target::ChooseRowStage(6647, 20190, 2, 1, regs, 0)->threads, 1024);   // unknown: the thread rule alone
  EXPECT_EQ(target::ChooseRowStage(6647, 20190, 2, 1, h200, 64)->threads, 1024);  // unknown register file: likewise
  st = target::ChooseRowStage(5000, 16500, 2, 1, regs, 64);  // three blocks by shared memory: 10 warps each
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->blocks_per_sm, 3);
  EXPECT_EQ(st->threads, 320);
  st = target::ChooseRowStage(5000, 16500, 2, 1, regs, 255);  // 8 warps an SM: fewer blocks, each >= 128 threads
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->blocks_per_sm, 2);
  EXPECT_EQ(st->threads, 128);
  EXPECT_EQ(st->grid, 264);
  // the give-way rule: rows that fill the blocks unevenly, and (norms) no overlap on the SM
  st = target::ChooseRowStage(179, 32000, 2, 1, h200);  // 179 rows over 132 one-block SMs: two waves, 0.68
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(target::StageGivesWayToSplit(*st, false));
  st = target::ChooseRowStage(2730, 49152, 2, 1, h200);  // 21 waves, twin
  ASSERT_TRUE(st.has_value());
  EXPECT_FALSE(target::StageGivesWayToSplit(*st, true));
  st = target::ChooseRowStage(2640, 65778, 2, 1, h200);  // 20 full waves, one buffer, one block an SM
  ASSERT_TRUE(st.has_value());
  EXPECT_DOUBLE_EQ(st->wave_efficiency, 1.0);
  EXPECT_FALSE(target::StageGivesWayToSplit(*st, false));
  EXPECT_TRUE(target::StageGivesWayToSplit(*st, true));
  const int64_t optin = h200.max_shared_mem_per_block_optin, per_sm = h200.shared_mem_per_sm;
  std::mt19937_64 rng(11);
  for (int i = 0; i < 5000; ++i) {
    const int64_t cols = 1 + static_cast<int64_t>(rng() % 300000);
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 70000);
    for (int esize : {2, 4})
      for (int inputs : {1, 2}) {
        auto r = target::ChooseRowStage(rows, cols, esize, inputs, h200);
        const int64_t window_bytes = (cols + 16 / esize - 1 + 16 / esize - 1) / (16 / esize) * 16;
        ASSERT_EQ(window_bytes, target::RowStageWindowBytes(cols, esize));
        const int64_t bytes = window_bytes * inputs;
        const bool fits = bytes + target::kRowStageStaticBytes <= optin;
        ASSERT_EQ(r.has_value(), rows >= 132 && fits) << rows << " x " << cols;
        if (!r) continue;
        ASSERT_EQ(r->buffer_bytes, bytes);
        ASSERT_EQ(r->twin, 2 * bytes + target::kRowStageStaticBytes <= optin);  // double-buffered wherever it fits
        ASSERT_EQ(r->smem_bytes, r->twin ? 2 * bytes : bytes);
        ASSERT_GE(r->blocks_per_sm, 1);
        ASSERT_LE(r->blocks_per_sm * (r->smem_bytes + target::kRowStageStaticBytes), per_sm);
        ASSERT_GT((r->blocks_per_sm + 1) * (r->smem_bytes + target::kRowStageStaticBytes), per_sm);
        ASSERT_EQ(r->grid, std::min<int64_t>(rows, int64_t{132} * r->blocks_per_sm));
        const int64_t slots = int64_t{132} * r->blocks_per_sm, waves = (rows + slots - 1) / slots;
        ASSERT_GT(r->wave_efficiency, static_cast<double>(waves - 1) / waves - 1e-12);  // the last wave has at least a row
        ASSERT_LE(r->wave_efficiency, 1.0);
        ASSERT_EQ(r->wave_efficiency == 1.0, rows % slots == 0);
        ASSERT_EQ(r->threads % 32, 0);
        ASSERT_GE(r->threads, target::kRowStageMinThreads);
        ASSERT_LE(r->threads, target::kRowStageMaxThreads);
        const int top = std::max(target::kRowStageMinThreads, std::min(target::kRowStageMaxThreads, 2048 / r->blocks_per_sm / 32 * 32));
        ASSERT_LE(r->threads, top);  // the SM's threads shared out over its blocks
        // about kRowStageVectorsPerThread vectors a thread, unless at the thread bounds
        const int64_t nv = window_bytes / 16;
        if (r->threads > target::kRowStageMinThreads && r->threads < top) {
          ASSERT_LE(nv, int64_t{r->threads} * target::kRowStageVectorsPerThread);
          ASSERT_GT(nv, int64_t{r->threads - 32} * target::kRowStageVectorsPerThread);
        }
      }
  }
}

// Streamed row reductions: from the rows at which every SM holds the blocks whose 16-byte loads in
// flight (threads x unroll x 16 bytes a block) cover kRowStreamBytesPerSm — on 132 SMs with 16 KiB a
// block and 16 KiB an SM, a row an SM; proportional to the SMs.
TEST(LaunchShape, RowStreamMinRows) {
  auto dev = FakeH200();
  const int64_t block = int64_t{target::kRowStreamThreads} * target::kRowStreamUnroll * 16;
  EXPECT_EQ(block, 16 * 1024);
  EXPECT_EQ(target::RowStreamMinRows(dev), 132);
  for (int sms : {1, 7, 78, 114, 132}) {
    dev.sm_count = sms;
    const int64_t rows = target::RowStreamMinRows(dev);
    EXPECT_EQ(rows % sms, 0);
    EXPECT_GE(rows / sms * block, target::kRowStreamBytesPerSm);
    EXPECT_LT((rows / sms - 1) * block, target::kRowStreamBytesPerSm);
  }
  dev.sm_count = 0;
  EXPECT_GE(target::RowStreamMinRows(dev), 1);
}

}  // namespace
}  // namespace opfuse
