// The benchmark harness on a GPU (skips without one, with QueryDevice()'s reason): the helper
// kernels do what they claim (copy copies, fills are signed / positive / in range and not
// constant), the timing rules measure a known duration (a 10 µs spin times as ~10 µs through
// events and through a CUDA-graph replay), the copy ceiling is plausible (> 100 GB/s) and so is
// the GEMM ceiling, and a small decode case through `RunOpBench` times > 0 in every variant, by
// graph replay, each variant checked correct against the CPU reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "ir/host_tensor.h"

#ifdef OPFUSE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "bench/cuda/bench_kernels.h"
#include "bench/cuda/op_runner.h"
#include "bench/cuda/timing.h"
#include "gpu/gpu_test_util.h"
#include "runtime/cuda/allocator.h"
#include "cuda/device.h"
#endif

namespace opfuse::bench {
namespace {

#ifndef OPFUSE_WITH_CUDA

TEST(BenchTiming, BuiltWithoutCuda) { GTEST_SKIP() << "built without OPFUSE_CUDA"; }

#else

class BenchTiming : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = cuda::QueryDevice();
    if (!d.ok()) GTEST_SKIP() << d.status().message();
    dev_ = *d;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    auto h = Harness::Create(dev_, stream_, cuda::CachingAllocator::ForDevice(dev_.ordinal));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    h_ = std::move(*h);
  }
  void TearDown() override {
    h_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }
  cuda::CachingAllocator& alloc() { return cuda::CachingAllocator::ForDevice(dev_.ordinal); }
  // The op suite's cases of the ops matching `ops` at `rows` rows, width 2048.
  static StatusOr<OpSuite> Cases(const std::string& ops, std::vector<int64_t> rows) {
    SuiteFilter f;
    f.ops_regex = ops;
    f.rows = std::move(rows);
    f.widths = {2048};
    return BuildOpSuite(f);
  }
  cuda::DeviceInfo dev_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Harness> h_;
};

TEST_F(BenchTiming, HelperKernels) {
  const int64_t n = (int64_t{1} << 22) + 13;  // odd tail
  auto buf = cuda::DeviceBuffer::Make(alloc(), n * 2, stream_);
  ASSERT_TRUE(buf.ok());
  ASSERT_OK(LaunchFillUniform(buf->get(), DType::kBF16, n, 42, false, dev_.sm_count, stream_));
  HostTensor t(DType::kBF16, {n});
  ASSERT_EQ(cudaMemcpyAsync(t.data.data(), buf->get(), n * 2, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  double sum = 0, mn = 1e9, mx = -1e9;
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = t.get(i);
    sum += v;
    mn = std::min(mn, v);
    mx = std::max(mx, v);
    zeros += v == 0;
  }
  EXPECT_GE(mn, -1.0);
  EXPECT_LE(mx, 1.0);
  EXPECT_LT(mn, -0.99);
  EXPECT_GT(mx, 0.99);
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_LT(zeros, n / 1000);
  // Positive fill: |x| + 0.5 in [0.5, 1.5].
  ASSERT_OK(LaunchFillUniform(buf->get(), DType::kBF16, n, 43, true, dev_.sm_count, stream_));
  ASSERT_EQ(cudaMemcpyAsync(t.data.data(), buf->get(), n * 2, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  for (int64_t i = 0; i < n; i += 97) {
    ASSERT_GE(t.get(i), 0.5);
    ASSERT_LE(t.get(i), 1.5);
  }
  // Ids in range.
  auto ids = cuda::DeviceBuffer::Make(alloc(), 4096 * 4, stream_);
  ASSERT_TRUE(ids.ok());
  ASSERT_OK(LaunchFillIds(static_cast<int32_t*>(ids->get()), 4096, 32000, 7, dev_.sm_count, stream_));
  std::vector<int32_t> hid(4096);
  ASSERT_EQ(cudaMemcpyAsync(hid.data(), ids->get(), 4096 * 4, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  int32_t hi = 0;
  for (int32_t v : hid) {
    ASSERT_GE(v, 0);
    ASSERT_LT(v, 32000);
    hi = std::max(hi, v);
  }
  EXPECT_GT(hi, 30000);
  // Copy: every byte arrives (odd number of 16-byte vectors).
  const size_t bytes = (size_t{64} << 20) + 16 * 7;
  auto src = cuda::DeviceBuffer::Make(alloc(), bytes, stream_);
  auto dst = cuda::DeviceBuffer::Make(alloc(), bytes, stream_);
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_OK(LaunchFillUniform(src->get(), DType::kF32, bytes / 4, 9, false, dev_.sm_count, stream_));
  ASSERT_EQ(cudaMemsetAsync(dst->get(), 0, bytes, stream_), cudaSuccess);
  ASSERT_OK(LaunchCopy16(src->get(), dst->get(), bytes, stream_));
  std::vector<uint8_t> a(bytes), b(bytes);
  ASSERT_EQ(cudaMemcpyAsync(a.data(), src->get(), bytes, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(b.data(), dst->get(), bytes, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_TRUE(a == b);
  EXPECT_EQ(LaunchCopy16(src->get(), dst->get(), 15, stream_).code(), StatusCode::kInvalidArgument);
}

TEST_F(BenchTiming, MeasuresAKnownDuration) {
  TimingOptions o;
  o.min_samples = 20;
  o.max_samples = 40;
  o.budget_ms = 10;
  auto spin = [&](int) { return LaunchSpin(10.0, stream_); };
  auto ev = h_->TimeEvents(spin, true, o);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  std::printf("[bench] 10 us spin via events: median %.2f us (min %.2f, p90 %.2f, %d samples)\n", ev->median_us, ev->min_us,
              ev->p90_us, ev->samples);
  EXPECT_GE(ev->samples, 20);
  EXPECT_GT(ev->median_us, 9.0);
  EXPECT_LT(ev->median_us, 30.0);
  auto g = h_->Capture([&](int) { return LaunchSpin(10.0, stream_); }, 8);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto gr = h_->TimeGraph(*g, 8, false, o);
  ASSERT_TRUE(gr.ok()) << gr.status().ToString();
  std::printf("[bench] 10 us spin via graph replay of 8: median %.2f us per call\n", gr->median_us);
  EXPECT_GT(gr->median_us, 9.0);
  EXPECT_LT(gr->median_us, 20.0);
  auto host = h_->HostUsPerCall(spin, 20);
  ASSERT_TRUE(host.ok());
  EXPECT_GT(*host, 0.0);
}

// The demote step before each sample (timing.h): it changes L2 priorities only, never data, over an
// unaligned range too, and a harness with demote spans still times a known duration.
TEST_F(BenchTiming, L2DemoteKeepsDataAndTimes) {
  const size_t bytes = (size_t{8} << 20) + 200;
  auto buf = cuda::DeviceBuffer::Make(alloc(), bytes, stream_);
  ASSERT_TRUE(buf.ok());
  ASSERT_OK(LaunchFillUniform(buf->get(), DType::kF32, bytes / 4, 11, false, dev_.sm_count, stream_));
  std::vector<uint8_t> before(bytes), after(bytes);
  ASSERT_EQ(cudaMemcpyAsync(before.data(), buf->get(), bytes, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_OK(LaunchL2Demote(buf->get(), bytes, stream_));
  ASSERT_OK(LaunchL2Demote(static_cast<char*>(buf->get()) + 40, bytes - 100, stream_));
  ASSERT_OK(LaunchL2Demote(nullptr, 0, stream_));
  ASSERT_EQ(cudaMemcpyAsync(after.data(), buf->get(), bytes, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_TRUE(before == after);
  h_->set_demote_spans({{buf->get(), bytes}});
  TimingOptions o;
  o.min_samples = 20;
  o.max_samples = 40;
  o.budget_ms = 10;
  auto ev = h_->TimeEvents([&](int) { return LaunchSpin(10.0, stream_); }, false, o);
  h_->set_demote_spans({});
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_GT(ev->median_us, 9.0);  // the demote runs before the gate, never inside the timed window
  EXPECT_LT(ev->median_us, 30.0);
}

TEST_F(BenchTiming, CeilingsArePlausible) {
  auto copy = MeasureCopyCeiling(*h_);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  std::printf("[bench] copy ceiling on %s: kernel %.0f GB/s, cudaMemcpy %.0f GB/s (1 GiB, read + write)\n",
              dev_.name.c_str(), copy->kernel_gbps, copy->memcpy_gbps);
  EXPECT_GT(copy->kernel_gbps, 100.0);
  EXPECT_GT(copy->memcpy_gbps, 100.0);
  EXPECT_LT(copy->kernel_gbps, 50000.0);
  EXPECT_EQ(copy->bytes, int64_t{1} << 30);
  auto gemm = MeasureGemmTflops(*h_, cuda::MatmulType::kBF16, 4096, 4096, 4096);
  ASSERT_TRUE(gemm.ok()) << gemm.status().ToString();
  std::printf("[bench] cuBLASLt bf16 4096^3: %.0f TFLOP/s\n", *gemm);
  EXPECT_GT(*gemm, 10.0);
  EXPECT_LT(*gemm, 10000.0);
  ASSERT_OK(alloc().EmptyCache());
}

// The event floor: an empty kernel timed by the per-call rule costs more than the same kernel inside a
// graph (the per-launch term) and far less than the 10 µs spin of MeasuresAKnownDuration.
TEST_F(BenchTiming, EventFloorIsBetweenLaunchAndSpin) {
  auto floor = MeasureEventFloorUs(*h_);
  ASSERT_TRUE(floor.ok()) << floor.status().ToString();
  auto launch = MeasureLaunchUs(*h_);
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  std::printf("[bench] event floor on %s: %.2f us (an empty kernel in a graph: %.2f us)\n", dev_.name.c_str(), *floor,
              *launch);
  EXPECT_GT(*floor, 0.0);
  EXPECT_GE(*floor, *launch);
  EXPECT_LT(*floor, 9.0);
}

TEST_F(BenchTiming, DecodeCaseTimesThroughTheExecutor) {
  auto suite = Cases("rmsnorm|exp2", {8});
  ASSERT_TRUE(suite.ok()) << suite.status().ToString();
  ASSERT_EQ(suite->cases.size(), 2u);
  OpBenchOptions o;
  o.timing = TimingOptions::Quick();
  auto r = RunOpBench(*suite, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->complete) << r->aborted;
  EXPECT_GT(r->ceilings.copy_gbps, 100.0);
  EXPECT_GT(r->ceilings.GemmFor("bf16"), 10.0);
  ASSERT_EQ(r->cases.size(), 2u);
  for (const auto& c : r->cases) {
    EXPECT_EQ(c.phase, "decode");
    ASSERT_EQ(c.variants.size(), 3u);
    for (const auto& v : c.variants) {
      std::printf("[bench] %s %s: %.2f us (%s), host %.2f us, %d kernels, rel_err %.2e%s%s\n", c.id.c_str(),
                  v.name.c_str(), v.us, v.method.c_str(), v.host_us, v.kernels_per_run, v.rel_err,
                  v.same_as.empty() ? "" : (" same_as " + v.same_as).c_str(), v.note.empty() ? "" : (" note: " + v.note).c_str());
      EXPECT_TRUE(v.error.empty()) << c.id << " " << v.name << ": " << v.error;
      EXPECT_GT(v.us, 0.0) << c.id << " " << v.name;
      EXPECT_LT(v.us, 1000.0) << c.id << " " << v.name;
      EXPECT_EQ(v.method.rfind("graph", 0), 0u) << c.id << " " << v.name << ": " << v.method << " " << v.note;
      ASSERT_TRUE(v.correct.has_value()) << c.id << " " << v.name << ": " << v.check_error;
      EXPECT_TRUE(*v.correct) << c.id << " " << v.name << ": " << v.check_error;
      EXPECT_GT(v.host_us, 0.0);
      EXPECT_GT(v.mbu, 0.0);
    }
    EXPECT_TRUE(std::isnan(c.copy_same_us)) << "measured without measure_copy_same";
  }
}

// The per-case copy of the same bytes (bench ops' default): timed by the case's method (graph replay
// at decode, events at prefill), positive, and in the range of the case's own kernels.
TEST_F(BenchTiming, SameSizeCopyReference) {
  auto suite = Cases("rmsnorm", {8, 2048});
  ASSERT_TRUE(suite.ok()) << suite.status().ToString();
  ASSERT_EQ(suite->cases.size(), 2u);
  OpBenchOptions o;
  o.timing = TimingOptions::Quick();
  o.variants = {"library"};
  o.measure_copy_same = true;
  o.measure_gemm = false;
  auto r = RunOpBench(*suite, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->complete) << r->aborted;
  for (const auto& c : r->cases) {
    std::printf("[bench] %s: same-size copy %.2f us (%s), library %.2f us, best = %.0f%% of the copy's bandwidth\n",
                c.id.c_str(), c.copy_same_us, c.copy_same_method.c_str(), c.best_us, 100 * c.best_of_copy_same);
    ASSERT_TRUE(Has(c.copy_same_us)) << c.id << ": " << c.copy_same_method;
    EXPECT_GT(c.copy_same_us, 0.0);
    EXPECT_NE(c.copy_same_method.find(c.phase == "decode" ? "graph x" : "events"), std::string::npos) << c.copy_same_method;
    ASSERT_TRUE(Has(c.best_of_copy_same)) << c.id;
    EXPECT_GT(c.best_of_copy_same, 0.1) << c.id;  // a norm is not 10x slower than a copy of its bytes
    EXPECT_LT(c.best_of_copy_same, 3.0) << c.id;  // nor 3x faster
  }
}

#endif  // OPFUSE_WITH_CUDA

}  // namespace
}  // namespace opfuse::bench
