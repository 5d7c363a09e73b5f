// Tensor parallelism on GPUs (docs/tensor_parallel.md): the collective ops through NCCL against the
// CPU reference (fresh signed random inputs, odd sizes, all_gather along an inner axis), and the
// engine split over 2 GPUs (and 4 where the machine has them) against one GPU and transformers on
// the committed family fixtures. Skips without a GPU, and with fewer than 2 GPUs.
#ifdef OPFUSE_WITH_CUDA
#include <cmath>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu_test_util.h"
#include "jit_cases.h"
#include "kernels/allreduce.h"
#include "model/llama/engine.h"
#include "rel_error.h"
#include "ops/collective.h"
#include "runtime/cpu/cpu_executor.h"
#include "runtime/cpu/inprocess_comm.h"
#include "runtime/cuda/executor.h"
#include "runtime/cuda/nccl_comm.h"

namespace opfuse {
namespace {

using testing_gpu::WithGpu;

class TensorParallelGpu : public WithGpu<> {
 protected:
  void SetUp() override {
    WithGpu<>::SetUp();
    if (IsSkipped()) return;
    auto n = cuda::DeviceCount();
    ASSERT_TRUE(n.ok());
    if (*n < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << *n;
    auto info = cuda::NcclLibraryInfo();
    ASSERT_TRUE(info.ok()) << info.status().message();  // a multi-GPU machine must have NCCL
    std::printf("NCCL: %s\n", info->c_str());
    worlds_ = {2};
    if (*n >= 4) worlds_.push_back(4);
  }
  std::vector<int> worlds_;  // the group sizes this machine can run: 2, and 4 with 4 GPUs
};

// The one-shot kernels' take-rules, on the host (no GPU): a staging buffer of 2 x B bytes (two
// halves of kOneShotMaxBlocks regions) takes every all-reduce of up to B bytes — one block per 16
// KiB, so a block's share fits its region — and the fused add_rms_norm where a block's whole rows
// fit its region.
TEST(OneShotRules, WhatTheStagingBuffersTake) {
  kernels::OneShotArgs a;
  a.world = 2;
  a.staging_bytes = 2 * cuda::kOneShotMaxBytes;  // as NcclGroup makes them
  a.in = a.out = reinterpret_cast<void*>(uintptr_t{256});
  const int64_t region = a.staging_bytes / (2 * kernels::kOneShotMaxBlocks);
  for (DType dt : {DType::kBF16, DType::kF32, DType::kF16}) {
    a.dtype = dt;
    const int64_t es = DTypeSize(dt);
    for (int64_t count : {int64_t{1}, int64_t{7}, 4096 / es, 16384 / es + 1, cuda::kOneShotMaxBytes / es}) {
      a.count = count;
      EXPECT_TRUE(kernels::OneShotSupported(a)) << DTypeName(dt) << " count " << count;
    }
    a.count = cuda::kOneShotMaxBytes / es + 16 / es;  // past B: a block's share outgrows its region
    EXPECT_FALSE(kernels::OneShotSupported(a)) << DTypeName(dt);
    // Fused with add_rms_norm: ceil(rows / min(64, rows)) whole rows per block.
    const int64_t row_fits = region / es;  // the widest row one region holds
    EXPECT_TRUE(kernels::OneShotAddRmsNormSupported(a, 1, row_fits)) << DTypeName(dt);
    EXPECT_FALSE(kernels::OneShotAddRmsNormSupported(a, 1, row_fits + 1)) << DTypeName(dt);
    EXPECT_TRUE(kernels::OneShotAddRmsNormSupported(a, kernels::kOneShotMaxBlocks, row_fits)) << DTypeName(dt);
    EXPECT_FALSE(kernels::OneShotAddRmsNormSupported(a, kernels::kOneShotMaxBlocks + 1, row_fits)) << DTypeName(dt);
    EXPECT_TRUE(kernels::OneShotAddRmsNormSupported(a, 2 * kernels::kOneShotMaxBlocks, row_fits / 2)) << DTypeName(dt);
  }
  a.dtype = DType::kBF16;
  EXPECT_TRUE(kernels::OneShotAddRmsNormSupported(a, 1, 4096));    // the decode message of an 8B model
  EXPECT_FALSE(kernels::OneShotAddRmsNormSupported(a, 300, 4096));  // 5 rows a block: the all-reduce, then the norm
  a.dtype = DType::kI32;
  a.count = 16;
  EXPECT_FALSE(kernels::OneShotSupported(a));
  EXPECT_FALSE(kernels::OneShotAddRmsNormSupported(a, 1, 16));
  a.dtype = DType::kBF16;
  a.world = 1;  // one rank: nothing to exchange
  EXPECT_FALSE(kernels::OneShotSupported(a));
  EXPECT_FALSE(kernels::OneShotAddRmsNormSupported(a, 1, 16));
  a.world = kernels::kOneShotMaxRanks + 1;
  EXPECT_FALSE(kernels::OneShotAddRmsNormSupported(a, 1, 16));
}

HostTensor Random(DType dt, std::vector<int64_t> shape, std::mt19937_64& rng) {
  HostTensor t(dt, shape);
  std::uniform_real_distribution<double> u(-2, 2);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, u(rng));
  return t;
}

// `g` on every rank at once, rank r on its own thread: the CPU reference through the in-process
// communicator, and the CUDA executor on GPU r over `nccl`'s transport `tr`, with the kernels its run
// launched.
struct RankRuns {
  std::vector<StatusOr<std::map<std::string, HostTensor>>> want, got;
  std::vector<int> kernels;
};
RankRuns RunOnRanks(const Graph& g, const std::vector<std::map<std::string, HostTensor>>& in, cuda::NcclGroup& nccl,
                    cuda::NcclGroup::Transport tr) {
  const int world = static_cast<int>(in.size());
  RankRuns runs{std::vector<StatusOr<std::map<std::string, HostTensor>>>(world, Internal("not run")),
                std::vector<StatusOr<std::map<std::string, HostTensor>>>(world, Internal("not run")),
                std::vector<int>(world, -1)};
  InProcessGroup cpu(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      {
        ScopedCommunicator scope(cpu.comm(r));
        runs.want[r] = RunGraphCpu(g, in[r]);
      }
      if (cudaSetDevice(r) != cudaSuccess) return;
      cuda::ExecutorOptions eo;
      eo.comm = nccl.transport(r, tr);
      auto ex = cuda::CudaExecutable::Create(g, eo);
      if (!ex.ok()) {
        runs.got[r] = ex.status();
        return;
      }
      runs.got[r] = (*ex)->RunHost(in[r]);
      runs.kernels[r] = (*ex)->kernels_per_run();
    });
  for (auto& t : threads) t.join();
  return runs;
}

TEST_F(TensorParallelGpu, CollectivesMatchTheCpuReference) {
  for (const int kWorld : worlds_) {
  SCOPED_TRACE(fmt::format("world {}", kWorld));
  auto nccl = cuda::NcclGroup::Create(kWorld);
  ASSERT_TRUE(nccl.ok()) << nccl.status().message();
  std::mt19937_64 rng(testing_gpu::FreshSeed());
  struct Case {
    OpKind op;
    DType dt;
    std::vector<int64_t> shape;
    int64_t axis;
  };
  std::printf("one-shot all-reduce (peer access between the GPUs): %s, up to %lld bytes\n",
              (*nccl)->one_shot() ? "available" : "not available", static_cast<long long>((*nccl)->one_shot_max_bytes()));
  for (const auto& t : (*nccl)->timings())
    std::printf("  %lld bytes: one-shot %.2f us, NCCL %.2f us\n", static_cast<long long>(t.bytes), t.one_shot_us, t.nccl_us);
  // The rule taken is the measurements' prefix: every size up to the limit measured faster.
  for (const auto& t : (*nccl)->timings())
    if (t.bytes <= (*nccl)->one_shot_max_bytes()) {
      EXPECT_LT(t.one_shot_us, t.nccl_us) << t.bytes;
    }
  // Each transport on its own must give the reference's bits, whatever the rule picked.
  using Transport = cuda::NcclGroup::Transport;
  std::vector<Transport> transports = {Transport::kNccl, Transport::kGroup};
  if ((*nccl)->one_shot()) transports.push_back(Transport::kOneShot);
  // Sizes on both sides of kOneShotMaxBytes (the one-shot transport gives the 2.4 MB one to NCCL),
  // odd counts (the one-shot kernel's masked tail).
  const std::vector<Case> cases = {
      {OpKind::kAllReduce, DType::kF32, {3, 1001}, 0},  {OpKind::kAllReduce, DType::kBF16, {7, 4099}, 0},
      {OpKind::kAllReduce, DType::kF16, {1, 2048}, 0},  {OpKind::kAllReduce, DType::kBF16, {1, 1}, 0},
      {OpKind::kAllReduce, DType::kF32, {600, 1000}, 0}, {OpKind::kAllReduce, DType::kBF16, {64, 4096}, 0},
      {OpKind::kAllGather, DType::kF32, {1, 333}, -1},
      {OpKind::kAllGather, DType::kBF16, {5, 8017}, -1}, {OpKind::kAllGather, DType::kF32, {4, 3, 7}, 1},
      {OpKind::kAllGather, DType::kI32, {6, 5}, 0},
  };
  // Twice over: the one-shot kernel's flags are counters that persist from call to call.
  for (Transport tr : transports)
  for (int rep = 0; rep < 2; ++rep)
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} {} axis {} rep {} transport {}", OpName(c.op), DTypeName(c.dt), c.axis, rep,
                             static_cast<int>(tr)));
    GraphBuilder b("collective");
    Shape s;
    for (int64_t d : c.shape) s.push_back(Dim(d));
    const int x = b.Input("x", c.dt, s);
    Attrs attrs = {{"world", int64_t{kWorld}}};
    if (c.op == OpKind::kAllGather) attrs["axis"] = c.axis;
    b.Output(b.Op(c.op, {x}, attrs), "y");
    auto g = b.Build();
    ASSERT_TRUE(g.ok()) << g.status().message();
    std::vector<HostTensor> in;
    std::vector<std::map<std::string, HostTensor>> feeds;
    for (int r = 0; r < kWorld; ++r) {
      in.push_back(Random(c.dt, c.shape, rng));
      feeds.push_back({{"x", in[r]}});
    }
    // The CPU reference: the same graph on every rank's thread through the in-process communicator.
    RankRuns runs = RunOnRanks(*g, feeds, **nccl, tr);
    const auto &want = runs.want, &got = runs.got;
    // The CPU reference and the one-shot kernel sum in f32 in rank order and round once: the same
    // bits. NCCL's ring order is its own: at 2 ranks one addition per element, rounded once (the same
    // bits); at more ranks each hop rounds to the dtype, so NCCL's all-reduces are compared within a
    // rounding per hop of the summed magnitudes. all_gather copies: the same bits always.
    // The one-shot transport hands messages over kOneShotMaxBytes to NCCL, the group those over
    // its measured limit.
    const int64_t one_shot_limit = tr == Transport::kNccl    ? 0
                                   : tr == Transport::kGroup ? (*nccl)->one_shot_max_bytes()
                                                             : cuda::kOneShotMaxBytes;
    const bool nccl_path = in[0].numel() * DTypeSize(c.dt) > one_shot_limit;
    const bool exact = c.op != OpKind::kAllReduce || kWorld == 2 || !nccl_path;
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(want[r].ok()) << want[r].status().message();
      ASSERT_TRUE(got[r].ok()) << got[r].status().message();
      const HostTensor &w = want[r]->at("y"), &o = got[r]->at("y");
      ASSERT_EQ(o.shape, w.shape);
      if (exact) {
        EXPECT_EQ(o.data, w.data) << "rank " << r;
        continue;
      }
      const double ulp = c.dt == DType::kF32 ? 0x1p-23 : c.dt == DType::kF16 ? 0x1p-10 : 0x1p-7;
      int64_t bad = 0;
      for (int64_t i = 0; i < w.numel(); ++i) {
        double mag = 0;
        for (int q = 0; q < kWorld; ++q) mag += std::fabs(in[q].get(i));
        if (std::fabs(o.get(i) - w.get(i)) > kWorld * ulp * mag) ++bad;
      }
      EXPECT_EQ(bad, 0) << "rank " << r << " of " << w.numel();
    }
  }
  }
  // A graph sharded for 2 ranks without a communicator is refused by Create.
  GraphBuilder b("no_comm");
  b.Output(b.AllReduce({b.Input("x", DType::kF32, {Dim(4)})}, {{"world", int64_t{2}}}), "y");
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  auto ex = cuda::CudaExecutable::Create(*g);
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("world=2 needs a communicator"), std::string::npos) << ex.status().message();
}

using opfuse::testing::RelError;

// fuse_collective's group on the GPU: an all_reduce used only by the add_rms_norm after it. On the
// group's transport (the one-shot kernel where it takes the message: one launch) and on NCCL (the
// all-reduce, then the norm kernel: two launches), against the CPU reference on every rank: the
// residual stream (the sum) bit-exact where the reduction order is the reference's, the normalised
// output within the fused kernels' bound.
// Odd widths, rows past what the fused kernel's staging holds (the fallback), every float dtype.
// Also prints the device µs of one fused call against NCCL + the norm kernel (graph replays).
TEST_F(TensorParallelGpu, FusedAllReduceAddRmsNormMatchesTheCpuReference) {
  using Transport = cuda::NcclGroup::Transport;
  struct Case {
    DType dt;
    int64_t rows, cols;
  };
  const std::vector<Case> cases = {{DType::kBF16, 1, 4096}, {DType::kBF16, 7, 4099}, {DType::kF32, 3, 1000},
                                   {DType::kF16, 2, 2048},  {DType::kBF16, 64, 8192}, {DType::kBF16, 300, 4096}};
  std::mt19937_64 rng(testing_gpu::FreshSeed());
  for (const int world : worlds_) {
    auto nccl = cuda::NcclGroup::Create(world);
    ASSERT_TRUE(nccl.ok()) << nccl.status().message();
    (*nccl)->set_fused_add_rms_norm(true);  // the default, set so that this test, the kernel's, does not depend on it
    for (const Case& c : cases)
    for (Transport tr : {Transport::kGroup, Transport::kNccl}) {
      const std::string dt = DTypeName(c.dt);
      SCOPED_TRACE(fmt::format("world {} {} [{}, {}] transport {}", world, dt, c.rows, c.cols, static_cast<int>(tr)));
      const std::string text = fmt::format(R"(graph tp
input part: {0}[T, {1}]
input residual: {0}[T, {1}]
param weight: {0}[{1}]
eps = constant() {{value=1e-05}}
s = all_reduce(part) {{world={2}}}
h = add(residual, s)
h2 = mul(h, h)
ms = mean(h2)
ms_eps = add(ms, eps)
inv = rsqrt(ms_eps)
hn = mul(h, inv)
y = mul(hn, weight)
output y, h
)", dt, c.cols, world);
      auto g = ParseGraph(text);
      ASSERT_TRUE(g.ok()) << g.status().message();
      std::vector<std::map<std::string, HostTensor>> in(world);
      const HostTensor weight = Random(c.dt, {c.cols}, rng);
      for (int r = 0; r < world; ++r)
        in[r] = {{"part", Random(c.dt, {c.rows, c.cols}, rng)}, {"residual", Random(c.dt, {c.rows, c.cols}, rng)}, {"weight", weight}};
      for (int r = 1; r < world; ++r) in[r]["residual"] = in[0]["residual"];  // the residual stream is replicated
      const RankRuns runs = RunOnRanks(*g, in, **nccl, tr);
      const auto &want = runs.want, &got = runs.got;
      const bool fused = tr == Transport::kGroup && (*nccl)->transport(0, tr)->FusedAddRmsNormSupported(c.rows, c.cols, c.dt);
      // The sum is the CPU reference's bit for bit where the ranks' parts are added in rank order in
      // f32 and rounded once (the one-shot kernels; any order at 2 ranks); NCCL's reduction order at
      // more ranks rounds partial sums, so there it is held to the dtype's bound.
      const int64_t bytes = c.rows * c.cols * static_cast<int64_t>(DTypeSize(c.dt));
      const bool nccl_path = tr == Transport::kNccl || (!fused && bytes > (*nccl)->one_shot_max_bytes());
      const bool exact = world == 2 || !nccl_path;
      const auto floats = [](const HostTensor& t) {
        std::vector<float> v;
        for (int64_t i = 0; i < t.numel(); ++i) v.push_back(static_cast<float>(t.get(i)));
        return v;
      };
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(want[r].ok()) << want[r].status().message();
        ASSERT_TRUE(got[r].ok()) << got[r].status().message();
        EXPECT_EQ(runs.kernels[r], fused ? 1 : 2) << "rank " << r;  // one launch, or the all-reduce then the norm
        if (exact) EXPECT_EQ(got[r]->at("h").data, want[r]->at("h").data) << "rank " << r;
        else EXPECT_LE(RelError(floats(got[r]->at("h")), floats(want[r]->at("h"))), testing_cases::Bound(c.dt)) << "rank " << r;
        // y: the norm in f32 (fused or the norm kernel) against the reference's op-by-op rounding of
        // every intermediate (mean, rsqrt, the two products): the fused kernels' bound, max-norm.
        EXPECT_LE(RelError(floats(got[r]->at("y")), floats(want[r]->at("y"))), testing_cases::Bound(c.dt)) << "rank " << r;
      }
    }
  }
}


// The family fixtures (f32) on 2 GPUs, and 4 where the machine has them (the fixtures' 2 KV heads
// are then replicated): transformers' greedy tokens, logits within 1e-4 of transformers' and of one
// GPU's, under never and always fusion.
TEST_F(TensorParallelGpu, FamiliesOnSeveralGpusMatchOneGpuAndTransformers) {
  for (const std::string family : {"llama", "mistral", "qwen2", "qwen3", "mistral_window", "qwen2_window"}) {
    const std::string dir = std::string(OPFUSE_SOURCE_DIR) + "/tests/data/families/" + family;
    const nlohmann::json ex = nlohmann::json::parse(std::ifstream(dir + "/expected.json"));
    const auto prompt = ex.at("prompt").get<std::vector<int32_t>>();
    const auto tokens = ex.at("tokens").get<std::vector<int32_t>>();
    const auto hf = ex.at("logits").get<std::vector<std::vector<float>>>();
    for (auto s : {llama::Strategy::kNeverFuse, llama::Strategy::kAlwaysFuse}) {
      SCOPED_TRACE(fmt::format("{} {}", family, llama::StrategyName(s)));
      std::vector<llama::GenerateResult> res;
      std::vector<int64_t> tps = {1};
      for (int w : worlds_) tps.push_back(w);
      for (int64_t tp : tps) {
        llama::EngineOptions o;
        o.model_dir = dir;
        o.backend = "cuda";
        o.strategy = s;
        o.tensor_parallel = tp;
        o.max_context = 64;
        auto e = llama::Engine::Create(o);
        ASSERT_TRUE(e.ok()) << e.status().message();
        llama::GenerateOptions g;
        g.max_new_tokens = static_cast<int64_t>(tokens.size());
        g.keep_logits = true;
        auto r = (*e)->Generate({prompt}, g);
        ASSERT_TRUE(r.ok()) << r.status().message();
        res.push_back(std::move(*r));
      }
      for (size_t i = 1; i < res.size(); ++i) {
        SCOPED_TRACE(fmt::format("tp {}", tps[i]));
        EXPECT_EQ(res[i].tokens[0], tokens);
        ASSERT_EQ(res[i].logits[0].size(), hf.size());
        for (size_t step = 0; step < hf.size(); ++step) {
          EXPECT_LE(RelError(res[i].logits[0][step], hf[step]), 1e-4) << "step " << step;
          EXPECT_LE(RelError(res[i].logits[0][step], res[0].logits[0][step]), 1e-4) << "step " << step;
        }
      }
    }
  }
}

}  // namespace
}  // namespace opfuse
#endif  // OPFUSE_WITH_CUDA
