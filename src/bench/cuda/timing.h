// The measuring rules of every opfuse GPU benchmark, in one place (DESIGN.md "Measuring").
//
//  * Device time with CUDA events after warm-up; the median (also min and p90) of many samples:
//    at least min_samples, then until budget_ms of wall time has passed or max_samples.
//  * Each sample is preceded by an L2 flush when the timed data would fit in L2 (a cudaMemsetAsync
//    over a buffer of 2x DeviceInfo::l2_bytes, finished before the sample goes on) and by a gate: a
//    one-thread kernel that holds the stream until the host opens it (LaunchGate). The host enqueues
//    gate, start event, the call and the end event, waits until the GPU is at the gate, waits
//    kGateLeadUs more and opens it. The start event therefore never waits on the host (events time
//    device work only), and every call — whatever its host cost — has been queued for the same
//    short time when the gate opens. That matters: with a fixed-length spin instead (the earlier
//    method), a call enqueued long before the spin ended measured slower than one enqueued just
//    before (dev/kernel_ab/peer_ab.py --delay-us, now in git history: swiglu 2048 x 4096 read
//    faster the longer the host delayed the launch), so a fast host path (opfuse's executor) read
//    slower than a slow one (torch.compile's).
//  * Before that (flush, gate), a kernel puts every 128-byte line of the case's tensors (all sets)
//    back to normal L2 priority (LaunchL2Demote; set_demote_spans names them). Lines a kernel loaded
//    with an L2::evict_last policy — torch.compile's Triton reduction kernels load their inputs so —
//    survive both the flush and a case bigger than L2 streaming through, so the next call would find
//    part of its input in L2 (enough to shift a 134 MB rms norm's reading; dev/kernel_ab's
//    state_probe.sh and tags_ab.sh, now in git history). opfuse's kernels never tag (JitKernelTest.
//    EmittedSourceNeverTagsEvictLast); tools/bench_peer.py does the same before each of its samples,
//    so both harnesses run the same steps.
//  * Callers rotate over several input sets (sample i uses set i mod K; see op_runner.cc for K).
//  * Decode sizes (kernels of a few µs, where a single event pair measures launch latency rather
//    than the kernel): R calls, rotating the sets, are captured into one CUDA graph, and one graph
//    replay is timed with events, divided by R.
//  * Host time per call: wall clock over many calls without synchronising (what a serving loop pays
//    on the CPU per call).
//  * Ceilings, measured on the device at start, never looked up: copy bandwidth (a 16-byte-vector
//    copy kernel over >= 1 GiB and cudaMemcpyAsync D2D; bytes read + written) and GEMM throughput
//    (cuBLASLt 8192^3 through runtime/cuda/cublaslt_matmul.h).
// Built with OPFUSE_CUDA only.
#pragma once
#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/harness.h"
#include "bench/report.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/cublaslt_matmul.h"
#include "cuda/device.h"

namespace opfuse::bench {

struct TimingOptions {
  int warmup = 5;          // calls per input set before sampling (the first also builds plans)
  int min_samples = 25;
  int max_samples = 200;
  double budget_ms = 100;  // sampling continues past min_samples until this much wall time
  int graph_runs = 64;     // R: calls per captured graph (decode sizes); rounded up to a multiple of K
  int host_calls = 50;     // calls in the host-time loop
  int max_sets = kMaxRotatedSets;  // rotated input sets at most (bench/harness.h)
  nlohmann::json ToJson() const;
  static TimingOptions Quick();
};

// An instantiated CUDA graph, destroyed with its owner.
class GraphExec {
 public:
  GraphExec() = default;
  GraphExec(GraphExec&& o) noexcept { *this = std::move(o); }
  GraphExec& operator=(GraphExec&& o) noexcept;
  ~GraphExec();
  cudaGraphExec_t get() const { return exec_; }

 private:
  friend class Harness;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

class Harness {
 public:
  // `run(i)` enqueues one call on stream() with rotated input set i mod K (i counts from 0).
  using RunFn = std::function<Status(int)>;

  // Allocates the L2 flush buffer (2x L2) and the events; `stream` stays the caller's.
  static StatusOr<std::unique_ptr<Harness>> Create(const cuda::DeviceInfo& dev, cudaStream_t stream,
                                                   cuda::CachingAllocator& alloc);
  ~Harness();

  const cuda::DeviceInfo& device() const { return dev_; }
  cudaStream_t stream() const { return stream_; }
  cuda::CachingAllocator& allocator() const { return *alloc_; }
  int64_t flush_bytes() const { return static_cast<int64_t>(flush_.size()); }
  // The tensors whose L2 lines each sample first demotes to normal priority (timing rules above);
  // the caller keeps them allocated while it times, and clears the list after.
  using Spans = std::vector<std::pair<const void*, size_t>>;
  void set_demote_spans(Spans spans) { demote_ = std::move(spans); }

  Status FlushL2();          // enqueues the flush
  Status Spin(double us);    // enqueues the spin kernel (a fixed-length wait; samples use the gate)

  // Host wall time per call: the median over kHostBatches batches of `calls` calls of each batch's
  // mean (the stream synchronised before each batch and after the last, not inside).
  static constexpr int kHostBatches = 5;
  StatusOr<double> HostUsPerCall(const RunFn& run, int calls);
  // One sample = [flush] + gate + event + run(i) + event (the gate opened once all is enqueued, so
  // the call's host time needs no margin).
  StatusOr<SampleStats> TimeEvents(const RunFn& run, bool flush, const TimingOptions& o);
  // Captures run(0) .. run(runs-1) into one graph on stream(). Every input set must have been run
  // before (plans built, nothing allocated during capture).
  StatusOr<GraphExec> Capture(const RunFn& run, int runs);
  // One sample = [flush] + gate + event + graph replay + event, divided by `runs`.
  StatusOr<SampleStats> TimeGraph(const GraphExec& g, int runs, bool flush, const TimingOptions& o);

  // Times `enqueue` (already warm, big enough not to need flushing) `samples` times with events.
  StatusOr<SampleStats> TimeSimple(const std::function<Status()>& enqueue, int samples);

 private:
  Harness() = default;
  StatusOr<SampleStats> Sample(const std::function<Status(int)>& one, bool flush, double divide, const TimingOptions& o);
  // Mapped host memory the gate kernel and the host share (LaunchGate).
  struct GateFlags {
    uint64_t release = 0, running = 0;
    uint32_t timed_out = 0;
  };
  cuda::DeviceInfo dev_;
  cudaStream_t stream_ = nullptr;
  cuda::CachingAllocator* alloc_ = nullptr;
  cuda::DeviceBuffer flush_;
  Spans demote_;
  std::vector<cudaEvent_t> events_;  // start, end (one sample at a time: each waits for its end event)
  GateFlags* gate_host_ = nullptr;   // cudaHostAllocMapped
  GateFlags* gate_dev_ = nullptr;    // its device address
  uint64_t ticket_ = 0;              // the last gate's number
};

struct CopyCeiling {
  double kernel_gbps = kNaN, memcpy_gbps = kNaN;
  int64_t bytes = 0;  // bytes copied per call (one direction)
};
// Copy of `bytes` (>= 1 GiB by default) with the 16-byte copy kernel and with cudaMemcpyAsync;
// GB/s = 2 * bytes / median time.
StatusOr<CopyCeiling> MeasureCopyCeiling(Harness& h, int64_t bytes = int64_t{1} << 30);
// Device time of one kernel launch: `launches` empty kernels (LaunchSpin(0)) captured into one CUDA
// graph, one replay timed with events, divided by `launches` — the cost model's per-launch term
// (what an extra kernel costs the device between two kernels of a step).
StatusOr<double> MeasureLaunchUs(Harness& h, int launches = 256);
// The fixed cost of one event-timed call: an empty kernel (LaunchSpin(0)) timed by TimeEvents, the
// per-call rule of prefill-size cases (gate, start event, launch, end event),
// median of `o`'s samples. Every prefill-size µs contains it; a kernel streaming at the copy ceiling
// still measures bytes / ceiling + about this much.
StatusOr<double> MeasureEventFloorUs(Harness& h, const TimingOptions& o = TimingOptions::Quick());
// cuBLASLt C[m,n] = A[m,k]·B[n,k]ᵀ of `type` on random inputs; TFLOP/s = 2mnk / median time.
StatusOr<double> MeasureGemmTflops(Harness& h, cuda::MatmulType type, int64_t m, int64_t n, int64_t k);

}  // namespace opfuse::bench
