// The emitter's launch geometry (no GPU needed): where the decode and prefill shapes of a register-path
// row kernel are one function, the decode launch uses that function's compiled block (its rows per
// block are a constant in the source), and every block is a whole number of row groups. A decode-sized
// block on the shared function once left 12 of 17 rows of a 20-wide logsumexp unwritten.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "codegen/cuda_emitter.h"
#include "jit_cases.h"
#include "opfuse/graph.h"

namespace opfuse {
namespace {

TEST(JitGeometry, SharedFunctionKeepsItsBlockAtDecodeSizes) {
  int shared = 0, separate = 0;
  for (const char* dt : {"bf16", "f16", "f32"})
    for (int64_t w : {1, 4, 7, 20, 33, 64, 77, 128, 200, 512, 1000, 2048, 4999, 8192}) {
      for (const char* body : {"m = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\nl = log(s)\ny = add(l, m)\n",
                               "m = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\ny = div(e, s)\n"}) {
        const std::string text = fmt::format("graph g\ninput x: {}[T, {}]\n{}output y\n", dt, w, body);
        SCOPED_TRACE(text);
        auto g = ParseGraph(text);
        ASSERT_TRUE(g.ok()) << g.status().message();
        auto k = testing_cases::WholeGraphKernel(*g);
        ASSERT_TRUE(k.ok()) << k.status().message();
        auto em = codegen::EmitCuda(*k);
        ASSERT_TRUE(em.ok()) << em.status().message();
        if (!em->row_in_registers) continue;
        ASSERT_GT(em->threads_per_row, 0);
        EXPECT_EQ(em->threads % em->threads_per_row, 0);
        EXPECT_EQ(em->rows_per_block * em->threads_per_row, em->threads);
        EXPECT_LE(em->decode_threads, 1024);
        EXPECT_GE(em->decode_rows_per_block, 1);
        EXPECT_EQ(em->decode_threads % em->decode_rows_per_block, 0);
        if (em->decode_function == em->function) {
          ++shared;
          EXPECT_EQ(em->decode_threads, em->threads);
          EXPECT_EQ(em->decode_rows_per_block, em->rows_per_block);
        } else {
          ++separate;
        }
      }
    }
  EXPECT_GT(shared, 0) << "no case had one function for both shapes";
  EXPECT_GT(separate, 0);
}

}  // namespace
}  // namespace opfuse
