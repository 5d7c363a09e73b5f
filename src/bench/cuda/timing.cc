// See timing.h for the rules; this file only implements them.
#include "bench/cuda/timing.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include <fmt/format.h>

#include "bench/cuda/bench_kernels.h"
#include "bench/harness.h"
#include "cuda/cuda_check.h"

namespace opfuse::bench {

namespace {
// kGateLeadUs, kGateMaxUs: bench/harness.h. Every call is queued kGateLeadUs (plus the ~1 µs the
// open takes to reach the GPU) when the start event fires; a host that died or hung never leaves
// the GPU spinning past kGateMaxUs.
using Clock = std::chrono::steady_clock;
double UsSince(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }
}

nlohmann::json TimingOptions::ToJson() const {
  return {{"warmup", warmup},     {"min_samples", min_samples}, {"max_samples", max_samples},
          {"budget_ms", budget_ms}, {"graph_runs", graph_runs}, {"host_calls", host_calls},
          {"max_sets", max_sets}};
}

TimingOptions TimingOptions::Quick() {
  TimingOptions o;
  o.warmup = 2;
  o.min_samples = 10;
  o.max_samples = 40;
  o.budget_ms = 20;
  o.graph_runs = 16;
  o.host_calls = 20;
  return o;
}

GraphExec& GraphExec::operator=(GraphExec&& o) noexcept {
  if (this != &o) {
    std::swap(graph_, o.graph_);
    std::swap(exec_, o.exec_);
  }
  return *this;
}

GraphExec::~GraphExec() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

StatusOr<std::unique_ptr<Harness>> Harness::Create(const cuda::DeviceInfo& dev, cudaStream_t stream,
                                                   cuda::CachingAllocator& alloc) {
  std::unique_ptr<Harness> h(new Harness());
  h->dev_ = dev;
  h->stream_ = stream;
  h->alloc_ = &alloc;
  const size_t flush = static_cast<size_t>(std::max<int64_t>(dev.l2_bytes, int64_t{1} << 20)) * kL2Factor;
  OPFUSE_ASSIGN_OR_RETURN(h->flush_, cuda::DeviceBuffer::Make(alloc, flush, stream));
  h->events_.resize(2, nullptr);
  for (auto& e : h->events_) OPFUSE_CUDA_CHECK(cudaEventCreate(&e));
  void* gate = nullptr;
  OPFUSE_CUDA_CHECK(cudaHostAlloc(&gate, sizeof(GateFlags), cudaHostAllocMapped));
  h->gate_host_ = new (gate) GateFlags{};
  void* gate_dev = nullptr;
  OPFUSE_CUDA_CHECK(cudaHostGetDevicePointer(&gate_dev, gate, 0));
  h->gate_dev_ = static_cast<GateFlags*>(gate_dev);
  return h;
}

Harness::~Harness() {
  for (auto e : events_)
    if (e) cudaEventDestroy(e);
  if (gate_host_) {
    // a gate still queued (an error path) opens at once and finds nothing to wait for
    reinterpret_cast<volatile uint64_t&>(gate_host_->release) = ~uint64_t{0};
    cudaStreamSynchronize(stream_);
    cudaFreeHost(gate_host_);
  }
}

Status Harness::FlushL2() {
  // Writing 2x L2 of fresh bytes evicts whatever the last call left in L2.
  static int value = 0;
  value = (value + 1) & 0x7f;
  OPFUSE_CUDA_CHECK(cudaMemsetAsync(flush_.get(), value, flush_.size(), stream_));
  return Status::Ok();
}

Status Harness::Spin(double us) { return LaunchSpin(us, stream_); }

StatusOr<double> Harness::HostUsPerCall(const RunFn& run, int calls) {
  // The median of kHostBatches batch means: one preempted call moves a single 50-call mean far, which
  // is how a cuBLASLt Run's host time read very differently in two consecutive bench ops runs. Each
  // batch starts synchronised, so the host never waits on a full queue.
  calls = std::max(calls, 1);
  std::vector<double> means;
  for (int b = 0; b < kHostBatches; ++b) {
    OPFUSE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) OPFUSE_RETURN_IF_ERROR(run(b * calls + i));
    const auto t1 = std::chrono::steady_clock::now();
    means.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
  }
  OPFUSE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::sort(means.begin(), means.end());
  return means[means.size() / 2];
}

StatusOr<SampleStats> Harness::Sample(const std::function<Status(int)>& one, bool flush, double divide,
                                      const TimingOptions& o) {
  std::vector<double> us;
  const int max_samples = std::max(o.max_samples, o.min_samples);
  const auto t0 = Clock::now();
  volatile uint64_t& release = gate_host_->release;
  const volatile uint64_t& running = gate_host_->running;
  volatile uint32_t& timed_out = gate_host_->timed_out;
  timed_out = 0;  // every earlier gate has been passed (each sample waits for its end event)
  for (int index = 0; static_cast<int>(us.size()) < max_samples; ++index) {
    for (const auto& [p, bytes] : demote_) OPFUSE_RETURN_IF_ERROR(LaunchL2Demote(p, bytes, stream_));
    if (flush) {  // the flush ends before the gate, so it never delays an open gate
      OPFUSE_RETURN_IF_ERROR(FlushL2());
      OPFUSE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    const uint64_t ticket = ++ticket_;
    OPFUSE_RETURN_IF_ERROR(LaunchGate(&gate_dev_->release, &gate_dev_->running, ticket, kGateMaxUs,
                                      &gate_dev_->timed_out, stream_));
    // Every way out of this sample opens the gate (an error must not leave the GPU spinning).
    struct Opener {
      volatile uint64_t& release;
      uint64_t ticket;
      void Open() {
        std::atomic_thread_fence(std::memory_order_seq_cst);
        release = ticket;
        std::atomic_thread_fence(std::memory_order_seq_cst);
      }
      ~Opener() {
        if (release < ticket) Open();
      }
    } opener{release, ticket};
    OPFUSE_CUDA_CHECK(cudaEventRecord(events_[0], stream_));
    OPFUSE_RETURN_IF_ERROR(one(index));
    OPFUSE_CUDA_CHECK(cudaEventRecord(events_[1], stream_));
    const cudaError_t q = cudaStreamQuery(stream_);  // submits what is enqueued; "not ready" is expected
    if (q != cudaSuccess && q != cudaErrorNotReady) OPFUSE_CUDA_CHECK(q);
    const auto wait = Clock::now();
    while (running < ticket) {
      if (timed_out) return Internal("benchmark gate gave up before the host reached it");
      if (UsSince(wait) > 1e6) return Internal("benchmark gate: the GPU did not reach the gate within 1 s");
    }
    const auto at_gate = Clock::now();
    while (UsSince(at_gate) < kGateLeadUs) {
    }
    opener.Open();
    OPFUSE_CUDA_CHECK(cudaEventSynchronize(events_[1]));
    if (timed_out)
      return Internal("benchmark gate timed out: the host opened it more than 2 s late — the timed call, or a tool "
                      "around the process (compute-sanitizer serialises launches), waited for the stream the gate "
                      "holds; time outside such tools");
    float ms = 0;
    OPFUSE_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[0], events_[1]));
    us.push_back(ms * 1e3 / divide);
    if (static_cast<int>(us.size()) >= o.min_samples && UsSince(t0) >= o.budget_ms * 1e3) break;
  }
  return SummarizeSamples(std::move(us));
}

StatusOr<SampleStats> Harness::TimeEvents(const RunFn& run, bool flush, const TimingOptions& o) {
  return Sample(run, flush, 1.0, o);
}

StatusOr<GraphExec> Harness::Capture(const RunFn& run, int runs) {
  OPFUSE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  OPFUSE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  Status st;
  for (int i = 0; i < runs && st.ok(); ++i) st = run(i);
  GraphExec g;
  const cudaError_t end = cudaStreamEndCapture(stream_, &g.graph_);
  if (!st.ok()) return Internal("while capturing: " + st.message());
  OPFUSE_CUDA_CHECK(end);
  if (!g.graph_) return Internal("stream capture produced no graph");
  OPFUSE_CUDA_CHECK(cudaGraphInstantiate(&g.exec_, g.graph_, 0));
  OPFUSE_CUDA_CHECK(cudaGraphUpload(g.exec_, stream_));
  OPFUSE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return g;
}

StatusOr<SampleStats> Harness::TimeGraph(const GraphExec& g, int runs, bool flush, const TimingOptions& o) {
  // Warm the instantiated graph once (first launches pay setup).
  OPFUSE_CUDA_CHECK(cudaGraphLaunch(g.get(), stream_));
  OPFUSE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  auto one = [&](int) -> Status {
    OPFUSE_CUDA_CHECK(cudaGraphLaunch(g.get(), stream_));
    return Status::Ok();
  };
  return Sample(one, flush, std::max(runs, 1), o);
}

StatusOr<SampleStats> Harness::TimeSimple(const std::function<Status()>& enqueue, int samples) {
  std::vector<double> us;
  for (int s = 0; s < samples; ++s) {
    OPFUSE_RETURN_IF_ERROR(Spin(20));
    OPFUSE_CUDA_CHECK(cudaEventRecord(events_[0], stream_));
    OPFUSE_RETURN_IF_ERROR(enqueue());
    OPFUSE_CUDA_CHECK(cudaEventRecord(events_[1], stream_));
    OPFUSE_CUDA_CHECK(cudaEventSynchronize(events_[1]));
    float ms = 0;
    OPFUSE_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[0], events_[1]));
    us.push_back(ms * 1e3);
  }
  return SummarizeSamples(std::move(us));
}

StatusOr<CopyCeiling> MeasureCopyCeiling(Harness& h, int64_t bytes) {
  bytes = (bytes + 15) / 16 * 16;
  cudaStream_t s = h.stream();
  OPFUSE_ASSIGN_OR_RETURN(auto src, cuda::DeviceBuffer::Make(h.allocator(), static_cast<size_t>(bytes), s));
  OPFUSE_ASSIGN_OR_RETURN(auto dst, cuda::DeviceBuffer::Make(h.allocator(), static_cast<size_t>(bytes), s));
  OPFUSE_RETURN_IF_ERROR(LaunchFillUniform(src.get(), DType::kF32, bytes / 4, 0x5eed, false, h.device().sm_count, s));
  auto kernel = [&]() { return LaunchCopy16(src.get(), dst.get(), static_cast<size_t>(bytes), s); };
  auto memcpy = [&]() -> Status {
    OPFUSE_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, s));
    return Status::Ok();
  };
  for (int i = 0; i < 2; ++i) {
    OPFUSE_RETURN_IF_ERROR(kernel());
    OPFUSE_RETURN_IF_ERROR(memcpy());
  }
  OPFUSE_ASSIGN_OR_RETURN(SampleStats k, h.TimeSimple(kernel, 9));
  OPFUSE_ASSIGN_OR_RETURN(SampleStats m, h.TimeSimple(memcpy, 9));
  CopyCeiling c;
  c.bytes = bytes;
  c.kernel_gbps = 2.0 * static_cast<double>(bytes) / k.median_us / 1e3;
  c.memcpy_gbps = 2.0 * static_cast<double>(bytes) / m.median_us / 1e3;
  return c;
}

StatusOr<double> MeasureLaunchUs(Harness& h, int launches) {
  if (launches < 1) return InvalidArgument("MeasureLaunchUs: launches must be >= 1");
  auto empty = [&](int) { return LaunchSpin(0, h.stream()); };
  for (int i = 0; i < 4; ++i) OPFUSE_RETURN_IF_ERROR(empty(i));
  OPFUSE_ASSIGN_OR_RETURN(GraphExec g, h.Capture(empty, launches));
  TimingOptions o = TimingOptions::Quick();
  OPFUSE_ASSIGN_OR_RETURN(SampleStats st, h.TimeGraph(g, launches, /*flush=*/false, o));
  return st.median_us;
}

StatusOr<double> MeasureEventFloorUs(Harness& h, const TimingOptions& o) {
  auto empty = [&](int) { return LaunchSpin(0, h.stream()); };
  for (int i = 0; i < 4; ++i) OPFUSE_RETURN_IF_ERROR(empty(i));
  OPFUSE_ASSIGN_OR_RETURN(SampleStats st, h.TimeEvents(empty, /*flush=*/false, o));
  return st.median_us;
}

StatusOr<double> MeasureGemmTflops(Harness& h, cuda::MatmulType type, int64_t m, int64_t n, int64_t k) {
  cudaStream_t s = h.stream();
  const int64_t es = cuda::MatmulTypeSize(type);
  const DType dt = type == cuda::MatmulType::kBF16 ? DType::kBF16 : type == cuda::MatmulType::kF16 ? DType::kF16 : DType::kF32;
  OPFUSE_ASSIGN_OR_RETURN(auto a, cuda::DeviceBuffer::Make(h.allocator(), static_cast<size_t>(m * k * es), s));
  OPFUSE_ASSIGN_OR_RETURN(auto b, cuda::DeviceBuffer::Make(h.allocator(), static_cast<size_t>(n * k * es), s));
  OPFUSE_ASSIGN_OR_RETURN(auto c, cuda::DeviceBuffer::Make(h.allocator(), static_cast<size_t>(m * n * es), s));
  OPFUSE_RETURN_IF_ERROR(LaunchFillUniform(a.get(), dt, m * k, 0xa11ce, false, h.device().sm_count, s));
  OPFUSE_RETURN_IF_ERROR(LaunchFillUniform(b.get(), dt, n * k, 0xb0b, false, h.device().sm_count, s));
  cuda::MatmulArgs args;
  args.type = type;
  args.m = m;
  args.n = n;
  args.k = k;
  args.a = a.get();
  args.b = b.get();
  args.c = c.get();
  args.transpose_b = true;  // nn.Linear layout, as the matmul cases
  auto run = [&]() { return cuda::Matmul(args, s); };
  for (int i = 0; i < 3; ++i) OPFUSE_RETURN_IF_ERROR(run());
  OPFUSE_ASSIGN_OR_RETURN(SampleStats st, h.TimeSimple(run, 10));
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / st.median_us / 1e6;
}

}  // namespace opfuse::bench
