// The decode GEMV (src/kernels/gemv.cu) and fuse_matmul's groups on the GPU, against the CPU
// reference; plus the GEMV's planning rules on the host.
//
// Design: each case is a small .ofg graph run by the CUDA executor (the GEMV is picked at plan time
// for rows <= 8) and by RunGraphCpu with the same fusion groups (f32 inside a group, as the fused
// kernel keeps gate/up in registers). Fresh signed random inputs (seed printed), outputs poisoned
// by RunHost, norm-wise relative error with the per-dtype bounds of tests/jit_cases.h, NaN and
// all-zero outputs rejected. Shapes cover 1..8 rows (every MR instance, ragged m, and the cuBLASLt side of the row limit), k = 8 (one
// pack: most lanes idle), k not a multiple of 256 (partial unroll), the TinyLlama widths, odd n,
// bias, three sibling weights of different n, the swiglu epilogue, and rows = 9 / 40 (cuBLASLt
// path of the same groups). The GEMV-vs-cuBLASLt launch count and the executor's gemv=false are
// checked to differ only in kernels, not results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <random>
#include <string>

#include <fmt/format.h>

#include "../expect_close.h"
#include "../jit_cases.h"
#include "../matmul_graphs.h"
#include "opfuse/graph.h"
#include "runtime/cpu/cpu_executor.h"
#include "ir/host_tensor.h"

#ifdef OPFUSE_WITH_CUDA
#include "gpu/gpu_test_util.h"
#include "kernels/gemv.h"
#include "runtime/cuda/executor.h"
#endif

namespace opfuse {
namespace {

#ifndef OPFUSE_WITH_CUDA
TEST(Gemv, BuiltWithoutCuda) { GTEST_SKIP() << "built without OPFUSE_CUDA"; }
#else

using testing_cases::Bound;
using testing_cases::RelErr;

using testing_cases::ExpectClose;
using testing_gpu::FreshSeed;


// Runs `text` on the GPU (gemv on) and on the CPU with the same groups; returns kernels per run.
int RunAndCompare(const std::string& what, const std::string& text, const Bindings& b, bool gemv = true,
                  const kernels::GemvTuning& tuning = {}, const scheduler::ProfileDb* profile = nullptr) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  if (!g.ok()) return -1;
  auto inputs = RandomInputs(*g, b, FreshSeed());
  cuda::ExecutorOptions o;
  o.gemv = gemv;
  o.gemv_tuning = tuning;
  o.profile = profile;
  if (profile) o.schedule_bindings = b;
  // without a profile: fuse_matmul's groups as `opfuse profile` times them, one GEMV launch up to
  // the GEMV's capacity; with one, the schedule's choice of rows
  else o.gemv_group_max_rows = kernels::kGemvMaxRows;
  auto ex = cuda::CudaExecutable::Create(*g, o);
  EXPECT_TRUE(ex.ok()) << what << ": " << ex.status().ToString();
  if (!ex.ok()) return -1;
  auto ref = RunGraphCpu((*ex)->graph(), inputs, CpuRunOptions{b, /*fuse_groups=*/true});
  EXPECT_TRUE(ref.ok()) << ref.status().ToString();
  auto out = (*ex)->RunHost(inputs, b);
  EXPECT_TRUE(out.ok()) << what << ": " << out.status().ToString();
  if (!ref.ok() || !out.ok()) return -1;
  for (const auto& [name, t] : *ref) ExpectClose(what + ":" + name, out->at(name), t);
  return (*ex)->kernels_per_run();
}

std::string MatmulGraph(const char* dt, int64_t n, int64_t k, bool bias) {
  return fmt::format(
      "graph mm\ninput a: {0}[M, {2}]\nparam w: {0}[{1}, {2}]\n{3}y = matmul(a, w{4}) {{transpose_b=1}}\noutput y\n", dt, n,
      k, bias ? fmt::format("param bias: {}[{}]\n", dt, n) : "", bias ? ", bias" : "");
}

class GemvTest : public testing_gpu::WithGpu<> {};

// Row counts that reach every kernel instance of both forms and their edges: the CUDA-core form's
// 1, 2 and 4 rows a lane (and 3: ragged), the tensor-core form's 1, 2, 4 and 8 tiles of 8 rows, full
// and ragged.
const std::vector<int64_t> kRows = {1, 2, 3, 4, 5, 8, 9, 16, 17, 31, 32, 33, 64};

kernels::GemvTuning Form(bool tensor_cores) {
  kernels::GemvTuning t;
  t.tensor_cores = tensor_cores ? 1 : 0;
  return t;
}

TEST_F(GemvTest, SingleMatmulMatchesReference) {
  struct Case {
    const char* dt;
    int64_t m, n, k;
    bool bias;
  };
  const Case cases[] = {
      {"bf16", 1, 2048, 2048, false}, {"bf16", 1, 256, 2048, true},   {"bf16", 2, 37, 8, false},
      {"bf16", 3, 129, 72, true},     {"bf16", 4, 2048, 5632, false}, {"bf16", 5, 61, 2056, false},
      {"bf16", 8, 1000, 264, true},   {"f16", 1, 640, 2048, false},   {"f16", 7, 333, 5632, true},
      {"f16", 8, 1, 16, false},
  };
  for (const Case& c : cases) {
    const std::string what = fmt::format("{} m={} n={} k={}{}", c.dt, c.m, c.n, c.k, c.bias ? " +bias" : "");
    const int kernels = RunAndCompare(what, MatmulGraph(c.dt, c.n, c.k, c.bias), {{"M", c.m}});
    EXPECT_EQ(kernels, 1) << what;
  }
}

// The tensor-core form on its own (GemvTuning::tensor_cores = 1): every B-tile instance (1, 2, 4, 8
// tiles of 8 rows) full and ragged, column counts that end inside a 16-column tile, k that ends
// inside a 32-element chunk and k = 8 (one pack), more warps than chunks, and 1, 2, 3, 5 and 16 warps
// a block (GemvTuning::mma_warps: the k split and its reduction); f16 and bias.
TEST_F(GemvTest, TensorCoreFormShapesAndWarps) {
  struct Case {
    const char* dt;
    int64_t n, k;
    bool bias;
  };
  const Case cases[] = {{"bf16", 2048, 2048, false}, {"bf16", 37, 2056, true}, {"f16", 1000, 264, true},
                        {"bf16", 29, 8, false},      {"f16", 17, 5632, false}, {"bf16", 300, 4104, true}};
  for (int warps : {0, 1, 2, 3, 5, 16}) {
    kernels::GemvTuning t = Form(true);
    t.mma_warps = warps;
    for (int64_t m : kRows)
      for (const Case& c : cases) {
        if (warps != 0 && m != 1 && m != 17 && m != 64) continue;  // the split's edges at a few row counts
        const std::string what = fmt::format("warps={} {} m={} n={} k={}{}", warps, c.dt, m, c.n, c.k, c.bias ? " +bias" : "");
        EXPECT_EQ(RunAndCompare(what, MatmulGraph(c.dt, c.n, c.k, c.bias), {{"M", m}}, true, t), 1) << what;
      }
  }
}

// Long k split over 1, 2 or 4 warps per column (GemvTuning::ksplit): column counts that leave idle
// warps in the last block, k not a multiple of the split's slices, bias.
TEST_F(GemvTest, LongKSplitOverWarps) {
  for (int ks : {1, 2, 4}) {
    kernels::GemvTuning t = Form(false);
    t.ksplit = ks;
    for (int64_t m = 1; m <= kernels::kGemvCudaCoreMaxRows; ++m) {
      EXPECT_EQ(RunAndCompare(fmt::format("ks={} m={} n=2048 k=5632", ks, m), MatmulGraph("bf16", 2048, 5632, false), {{"M", m}}, true, t), 1);
      EXPECT_EQ(RunAndCompare(fmt::format("ks={} m={} n=37 k=2056 +bias", ks, m), MatmulGraph("bf16", 37, 2056, true), {{"M", m}}, true, t), 1);
      EXPECT_EQ(RunAndCompare(fmt::format("ks={} m={} f16 n=3 k=4104", ks, m), MatmulGraph("f16", 3, 4104, false), {{"M", m}}, true, t), 1);
    }
  }
}

TEST_F(GemvTest, CublasLtAboveRowLimitAndWhenDisabled) {
  // A plain matmul above kDecodeGemvMaxRows rows and above kGemvMaxRows: cuBLASLt; gemv=false at 1
  // row: cuBLASLt too. Same results.
  EXPECT_EQ(RunAndCompare("bf16 m=9", MatmulGraph("bf16", 300, 512, true), {{"M", 9}}), 1);
  EXPECT_EQ(RunAndCompare("bf16 m=max+1", MatmulGraph("bf16", 300, 512, false), {{"M", kernels::kGemvMaxRows + 1}}), 1);
  EXPECT_EQ(RunAndCompare("bf16 m=1 gemv off", MatmulGraph("bf16", 300, 512, false), {{"M", 1}}, false), 1);
}

// q/k/v-style siblings (different n, bias on all) and a SwiGLU MLP: one launch each at decode.
constexpr const char* kSiblingsAndSwiglu = R"(graph mlp
input x: bf16[M, 512]
param wq: bf16[512, 512]
param wk: bf16[64, 512]
param wv: bf16[64, 512]
param bq: bf16[512]
param bk: bf16[64]
param bv: bf16[64]
param wg: bf16[1408, 512]
param wu: bf16[1408, 512]
q = matmul(x, wq, bq) {transpose_b=1}
k = matmul(x, wk, bk) {transpose_b=1}
v = matmul(x, wv, bv) {transpose_b=1}
g = matmul(x, wg) {transpose_b=1}
u = matmul(x, wu) {transpose_b=1}
s = silu(g)
act = mul(s, u)
output q, k, v, act
)";

TEST_F(GemvTest, SiblingsAndSwigluGroups) {
  auto g = ParseGraph(kSiblingsAndSwiglu);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto ex = cuda::CudaExecutable::Create(*g, {});
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  int sib = 0, swi = 0;
  for (const auto& grp : (*ex)->graph().groups) {
    sib += grp.kind == "matmul:siblings";
    swi += grp.kind == "matmul:swiglu";
  }
  EXPECT_EQ(sib, 1);
  EXPECT_EQ(swi, 1);
  for (int64_t m : kRows) {
    // the sibling GEMV + the swiglu GEMV: 2 kernels, on each form the rows allow
    EXPECT_EQ(RunAndCompare(fmt::format("m={}", m), kSiblingsAndSwiglu, {{"M", m}}), 2) << m;
    for (bool tc : {false, true})
      if (tc || m <= kernels::kGemvCudaCoreMaxRows) {
        EXPECT_EQ(RunAndCompare(fmt::format("m={} tensor_cores={}", m, tc), kSiblingsAndSwiglu, {{"M", m}}, true, Form(tc)), 2);
      }
  }
  // Above the GEMV's rows: member by member (3 + 2 matmuls + the swiglu kernel), same groups.
  EXPECT_EQ(RunAndCompare("m=max+1", kSiblingsAndSwiglu, {{"M", kernels::kGemvMaxRows + 1}}), 6);
  EXPECT_EQ(RunAndCompare("m=100", kSiblingsAndSwiglu, {{"M", 100}}), 6);
  // f16 too
  std::string f16 = kSiblingsAndSwiglu;
  for (size_t p = f16.find("bf16"); p != std::string::npos; p = f16.find("bf16", p)) f16.replace(p, 4, "f16");
  EXPECT_EQ(RunAndCompare("f16 m=max", f16, {{"M", kernels::kGemvMaxRows}}), 2);
}

// Norm prologues: rms_norm -> q/k (+bias), add_rms_norm -> gate/up + swiglu (its sum an output too),
// rms_norm -> a single head matmul. One GEMV launch per group at decode.
const std::string kNormed = testing_graphs::NormedBlock("bf16", 512, 1000, true);

TEST_F(GemvTest, NormPrologueGroups) {
  auto g = ParseGraph(kNormed);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto ex = cuda::CudaExecutable::Create(*g, {});
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  std::map<std::string, int> kinds;
  for (const auto& grp : (*ex)->graph().groups) kinds[grp.kind] += grp.decision.fuse;
  EXPECT_EQ(kinds["matmul:norm_siblings"], 1);
  EXPECT_EQ(kinds["matmul:norm_swiglu"], 1);
  EXPECT_EQ(kinds["matmul:norm"], 1);
  for (int64_t m : kRows) {
    EXPECT_EQ(RunAndCompare(fmt::format("normed m={}", m), kNormed, {{"M", m}}), 3) << m;
    if (m <= kernels::kGemvCudaCoreMaxRows) {
      EXPECT_EQ(RunAndCompare(fmt::format("normed m={} tensor cores", m), kNormed, {{"M", m}}, true, Form(true)), 3) << m;
    }
  }
  // Above the GEMV's rows: member by member (norm kernel + cuBLASLt per matmul + swiglu): 3 + 4 + 2.
  EXPECT_EQ(RunAndCompare("normed m=max+1", kNormed, {{"M", kernels::kGemvMaxRows + 1}}), 9);
  EXPECT_EQ(RunAndCompare("normed f16 m=1", testing_graphs::NormedBlock("f16", 512, 1000, true), {{"M", 1}}), 3);
  // up written before gate: the swiglu epilogue still takes gate as its first segment.
  EXPECT_EQ(RunAndCompare("normed up-first m=1", testing_graphs::NormedBlock("bf16", 512, 1000, true, true), {{"M", 1}}), 3);
}

// smart_schedule with a profile where each matmul group's ops one by one are faster (hand-written
// numbers): the declined groups run their ops on their own library kernels — the norm, each
// matmul's GEMV, the swiglu — and still match the CPU reference; a profile that favours the
// fused groups keeps one GEMV launch each.
TEST_F(GemvTest, NormPrologueGroupsDeclinedByTheProfileRunTheirOpsOneByOne) {
  // keys (should_fuse's DescribeGroup): kind:k512, cols = the matmuls' columns together
  auto profile_for = [](double unfused, double library, double cublaslt = 0) {
    std::string entries;
    for (const auto& [kind, cols] : std::vector<std::pair<std::string, int>>{
             {"matmul:norm_siblings:k512", 512 + 64}, {"matmul:norm_swiglu:k512", 2 * 1408}, {"matmul:norm:k512", 1000}})
      for (int m : {1, 2, 4})
        entries += fmt::format(R"({}{{"pattern": "{}", "dtype": "bf16", "shape": {{"rows": {}, "cols": {}}},
            "variants_us": {{"unfused": {}, "library": {}{}}}, "samples": 10}})",
                               entries.empty() ? "" : ",", kind, m, cols, unfused, library,
                               cublaslt > 0 && m <= kDecodeGemvMaxRows ? fmt::format(", \"cublaslt\": {}", cublaslt) : "");
    return scheduler::ProfileDb::Parse(fmt::format(R"({{"schema": 1, "device": {{"name": "test", "sm": "9.0",
        "driver": "hand-written", "copy_gbps": 3000, "launch_us": 2}}, "entries": [{}]}})", entries));
  };
  auto split = profile_for(5.0, 10.0), fused = profile_for(10.0, 5.0), lt = profile_for(10.0, 10.0, 2.0);
  ASSERT_TRUE(split.ok()) << split.status().message();
  ASSERT_TRUE(fused.ok()) << fused.status().message();
  // a profile with no point for these groups (another model's K): the default rows, kDecodeGemvMaxRows
  auto other = scheduler::ProfileDb::Parse(R"({"schema": 1, "device": {"name": "test", "sm": "9.0", "driver": "hand-written",
      "copy_gbps": 3000, "launch_us": 2}, "entries": [{"pattern": "matmul:norm:k4096", "dtype": "bf16",
      "shape": {"rows": 1, "cols": 1000}, "variants_us": {"unfused": 1.0, "library": 2.0}, "samples": 10}]})");
  ASSERT_TRUE(other.ok()) << other.status().message();
  for (int64_t m : kRows) {
    // norm + q + k; add_rms_norm + gate + up + swiglu; norm + head
    EXPECT_EQ(RunAndCompare(fmt::format("declined m={}", m), kNormed, {{"M", m}}, true, {}, &*split), 9) << m;
    // kept on the profile: one GEMV launch per group up to the GEMV's capacity (m = 3: interpolated)
    EXPECT_EQ(RunAndCompare(fmt::format("kept m={}", m), kNormed, {{"M", m}}, true, {}, &*fused), 3) << m;
    EXPECT_EQ(RunAndCompare(fmt::format("unmeasured m={}", m), kNormed, {{"M", m}}, true, {}, &*other),
              m <= kDecodeGemvMaxRows ? 3 : 9) << m;
  }
  // the cuBLASLt form (measured up to kDecodeGemvMaxRows rows): each group kept with gemv_max_rows 0,
  // its norm, its matmuls on cuBLASLt one by one and its SwiGLU — 9 kernels, against the CPU reference
  ASSERT_TRUE(lt.ok()) << lt.status().message();
  for (int64_t m = 1; m <= kDecodeGemvMaxRows; ++m) {
    EXPECT_EQ(RunAndCompare(fmt::format("cublaslt form m={}", m), kNormed, {{"M", m}}, true, {}, &*lt), 9) << m;
    auto g = ParseGraph(kNormed);
    ASSERT_TRUE(g.ok());
    cuda::ExecutorOptions o;
    o.profile = &*lt;
    o.schedule_bindings = {{"M", m}};
    auto ex = cuda::CudaExecutable::Create(*g, o);
    ASSERT_TRUE(ex.ok()) << ex.status().ToString();
    int kept = 0;
    for (const auto& grp : (*ex)->graph().groups)
      if (grp.matmul) {
        EXPECT_TRUE(grp.decision.fuse) << grp.decision.reason;
        EXPECT_EQ(grp.matmul->gemv_max_rows, 0) << grp.decision.reason;
        kept += grp.decision.fuse && grp.matmul->gemv_max_rows == 0;
      }
    EXPECT_EQ(kept, 3) << m;
  }
}

// q/k/v with RoPE epilogues on q and k (with biases, as in Qwen2: the pair's second column has its own)
// after an rms_norm prologue: the decode attention block's front, one GEMV launch.
// An rms_norm over k, then q (qh heads), k (kh heads) of head_dim hd with RoPE and v of vn columns,
// biases on all three.
std::string QkvRope(int64_t k, int64_t qh, int64_t kh, int64_t hd, int64_t vn) {
  return fmt::format(R"(graph qkv
input x: bf16[M, {0}]
input cos: bf16[M, 1, 1, {3}]
input sin: bf16[M, 1, 1, {3}]
param n1: bf16[{0}]
param wq: bf16[{5}, {0}]
param wk: bf16[{6}, {0}]
param wv: bf16[{4}, {0}]
param bq: bf16[{5}]
param bk: bf16[{6}]
param bv: bf16[{4}]
h = rms_norm(x, n1) {{eps=1e-05}}
q = matmul(h, wq, bq) {{transpose_b=1}}
k = matmul(h, wk, bk) {{transpose_b=1}}
v = matmul(h, wv, bv) {{transpose_b=1}}
q4 = reshape(q) {{shape=[M, 1, {1}, {3}]}}
k4 = reshape(k) {{shape=[M, 1, {2}, {3}]}}
qr = rope(q4, cos, sin)
kr = rope(k4, cos, sin)
output qr, kr, v
)",
                     k, qh, kh, hd, vn, qh * hd, kh * hd);
}
const std::string kQkvRope = QkvRope(512, 8, 2, 64, 128);

TEST_F(GemvTest, RopeEpilogueGroup) {
  auto g = ParseGraph(kQkvRope);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto ex = cuda::CudaExecutable::Create(*g, {});
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  int rope_groups = 0;
  for (const auto& grp : (*ex)->graph().groups) rope_groups += grp.kind == "matmul:norm_siblings_rope" && grp.decision.fuse;
  EXPECT_EQ(rope_groups, 1);
  for (int64_t m : kRows) {
    EXPECT_EQ(RunAndCompare(fmt::format("qkv rope m={}", m), kQkvRope, {{"M", m}}), 1) << m;
    if (m <= kernels::kGemvCudaCoreMaxRows) {
      EXPECT_EQ(RunAndCompare(fmt::format("qkv rope m={} tensor cores", m), kQkvRope, {{"M", m}}, true, Form(true)), 1) << m;
    }
  }
  // Above the GEMV's rows: the norm kernel, 3 cuBLASLt matmuls, 2 rope kernels.
  EXPECT_EQ(RunAndCompare("qkv rope m=max+1", kQkvRope, {{"M", kernels::kGemvMaxRows + 1}}), 6);
  std::string f16 = kQkvRope;
  for (size_t p = f16.find("bf16"); p != std::string::npos; p = f16.find("bf16", p)) f16.replace(p, 4, "f16");
  EXPECT_EQ(RunAndCompare("qkv rope f16 m=1", f16, {{"M", 1}}), 1);
}

// Segment and head boundaries inside a 16-column tile of the tensor-core form: q of 3 heads of
// head_dim 40 (RoPE pairs c, c + 20: a pair's columns are in different tiles), k of one head, v of
// 37 columns, each segment starting mid-tile, with biases; at every row count on both forms the
// rows allow, against the CPU reference.
TEST_F(GemvTest, SegmentsAndRopeHeadsStraddleTiles) {
  const std::string text = QkvRope(264, 3, 1, 40, 37);
  for (int64_t m : kRows)
    for (bool tc : {false, true})
      if (tc || m <= kernels::kGemvCudaCoreMaxRows) {
        EXPECT_EQ(RunAndCompare(fmt::format("straddling m={} tensor_cores={}", m, tc), text, {{"M", m}}, true, Form(tc)), 1);
      }
}

// The persistent grid (a block walks logical blocks b, b + grid, ...; the next column's first loads
// issued during the current one's last chunk; KS > 1 sums double-buffered across iterations): the
// launch per logical block (BLOCKS_PER_SM=0), one block per SM, and grids of 1, 3 and 7 blocks,
// over the plain, long-k, sibling, SwiGLU, norm-prologue and RoPE kernels at every row count.
TEST_F(GemvTest, PersistentGridWalksLogicalBlocks) {
  auto tuning = [](int blocks_per_sm, int grid) {
    kernels::GemvTuning t = Form(false);
    t.blocks_per_sm = blocks_per_sm;
    t.grid = grid;
    return t;
  };
  const std::pair<const char*, kernels::GemvTuning> settings[] = {{"blocks_per_sm=0", tuning(0, 0)},
                                                                  {"blocks_per_sm=1", tuning(1, 0)},
                                                                  {"grid=1", tuning(-1, 1)},
                                                                  {"grid=3", tuning(-1, 3)},
                                                                  {"grid=7", tuning(-1, 7)}};
  for (const auto& [tag, t] : settings) {
    for (int64_t m = 1; m <= kernels::kGemvCudaCoreMaxRows; ++m) {
      const Bindings b{{"M", m}};
      EXPECT_EQ(RunAndCompare(fmt::format("{} m={} n=2048 k=5632", tag, m), MatmulGraph("bf16", 2048, 5632, false), b, true, t), 1);
      EXPECT_EQ(RunAndCompare(fmt::format("{} m={} n=37 k=2056 +bias", tag, m), MatmulGraph("bf16", 37, 2056, true), b, true, t), 1);
      EXPECT_EQ(RunAndCompare(fmt::format("{} m={} n=1000 k=264 +bias", tag, m), MatmulGraph("f16", 1000, 264, true), b, true, t), 1);
      EXPECT_EQ(RunAndCompare(fmt::format("{} m={} n=29 k=8", tag, m), MatmulGraph("bf16", 29, 8, false), b, true, t), 1);
      EXPECT_EQ(RunAndCompare(fmt::format("{} siblings+swiglu m={}", tag, m), kSiblingsAndSwiglu, b, true, t), 2);
      EXPECT_EQ(RunAndCompare(fmt::format("{} normed m={}", tag, m), kNormed, b, true, t), 3);
      EXPECT_EQ(RunAndCompare(fmt::format("{} qkv rope m={}", tag, m), kQkvRope, b, true, t), 1);
    }
  }
}

// GemvSupported (what the GEMV covers) is host-only: tests/unit/gemv_rules_test.cc runs it in CI.

#endif

}  // namespace
}  // namespace opfuse
