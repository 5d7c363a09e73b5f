// The CUDA executor: a Graph compiled for the GPU and run with pre-resolved launches.
//
// Design (DESIGN.md "Backends and execution"):
//  * Create() runs the pass pipeline on a copy of the graph, picks each fused group's variant —
//    the group's scheduled variant, or the one forced by ExecutorOptions::variant — and compiles
//    what it needs: JIT kernels through the kernel cache (memory + disk, never recompiled), library
//    kernels need nothing. A group whose chosen variant cannot run falls back (library → jit →
//    unfused) and the reason is kept in fallbacks() and logged to stderr once; never silent.
//  * Each ungrouped node runs its library kernel (src/kernels), matmul through cuBLASLt, reshape as
//    an alias. "unfused" runs a group's nodes one library kernel each, composites decomposed into
//    their primitives first (that is the never-fuse path).
//  * Run() looks up a Plan for (symbol bindings, I/O device pointers): intermediates allocated from
//    the caching allocator, every launch resolved to a KernelLaunch (kernel, grid, block, argument
//    bytes). The first call with a new key builds the plan (a few µs per node); later calls only
//    loop over cudaLaunchKernel. Plans are kept (LRU, kMaxPlans) so rotated input sets each keep
//    theirs and a captured CUDA graph's pointers stay valid while its plan lives.
//  * Capture() records one Run into a CUDA graph (cudaStreamBeginCapture on a private stream) and
//    returns a CudaGraph that replays it with one cudaGraphLaunch.
// Built with OPFUSE_CUDA only.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "jit/kernel_cache.h"
#include "runtime/cuda/device_comm.h"
#include "kernels/gemv.h"
#include "scheduler/profile_db.h"
#include "opfuse/config.h"
#include "opfuse/graph.h"
#include "cuda/device.h"
#include "cuda/launch.h"
#include "ir/host_tensor.h"

namespace opfuse::cuda {

// The variant requested for every fused group (opfuse::Variant, graph.h): kAuto runs each group's
// scheduled variant; kUnfused every group op by op; kLibrary the hand-written fused kernel where
// one exists, else JIT; kJit a generated kernel for every fused group. The schedule pass resolves
// the request per group (PassContext::variant) and records why where it cannot be honoured.
using opfuse::Variant;
using opfuse::VariantName;
using opfuse::ParseVariant;

struct ExecutorOptions {
  FusionConfig config;              // pipeline config; enable_fusion = false is never-fuse
  Variant variant = Variant::kAuto;
  // With kJit: nodes left outside any group that the JIT can compile (elementwise, reductions)
  // are compiled as one-node kernels too (for benchmarking the JIT on single ops).
  bool jit_single_ops = false;
  jit::KernelCache* cache = nullptr;  // nullptr: the process-wide cache (OPFUSE_CACHE_DIR)
  std::string arch;                   // "" = the device's
  int jit_threads = 0;                // parallel NVRTC compiles; 0 = hardware concurrency
  // The smart schedule: with a profile (not owned; must outlive Create), the schedule pass picks
  // each group's variant by should_fuse under kAuto — profile, then cost model — at the symbol
  // values in `schedule_bindings` (the shapes the executable will mostly run; unbound symbols leave
  // the profile unconsulted, and the decision says so). Without one: library/jit for fused groups.
  const scheduler::ProfileDb* profile = nullptr;
  Bindings schedule_bindings;
  // Matmuls of at most kernels::kGemvMaxRows rows (decode) run on the GEMV library kernel
  // (src/kernels/gemv.h) instead of cuBLASLt; off with this false or OPFUSE_DISABLE=gemv.
  bool gemv = true;
  kernels::GemvTuning gemv_tuning;  // the GEMV planner's overrides (tests; the defaults are the tuned rules)
  // The most rows a fuse_matmul group runs as one GEMV launch; 0 = each group's own
  // (MatmulGroupPlan::gemv_max_rows: the schedule's). `opfuse profile` times the fused group up to the
  // GEMV's capacity (kernels::kGemvMaxRows) with it.
  int64_t gemv_group_max_rows = 0;
  // Background compile (docs/runtime.md): a JIT kernel not in the kernel cache is not compiled in
  // Create; its group runs its fallback (library for a pattern group with a library kernel, else
  // op by op) while a worker thread compiles it, and plans built once it is ready use it. Off:
  // every JIT kernel is compiled (or loaded from the cache) before Create returns.
  bool background_compile = false;
  // Auto graph: a plan (one set of I/O pointers and symbol values) whose launches cost more host time
  // than replaying them as a CUDA graph is captured and replayed by Run from then on. Measured, not
  // assumed: the plan's first kAutoGraphEagerRuns Runs on a stream launch as usual, the host time of
  // every one but the first (which carries one-time costs) is timed, and if the fastest reading is at
  // least auto_graph_min_host_us the next Run captures the launches on that stream and replays them there.
  // Why a threshold: on the host a cuBLASLt call (its Hopper kernels) costs several times a graph
  // launch, but a cheap plan (a 1-row cuBLASLt call) read slower replayed as a graph than launched in
  // bench ops (docs/BENCHMARKS.md). Not on the legacy default stream (it cannot be captured)
  // nor inside the caller's own capture (Run then launches, and the caller's graph records them). Off
  // with this false or OPFUSE_DISABLE=auto_graph. A capture that fails is logged and leaves that plan
  // on launches.
  bool auto_graph = true;
  double auto_graph_min_host_us = 5.0;
  // Tensor parallelism: the transport of the graph's collective ops (all_reduce, all_gather with
  // world > 1; not owned, must outlive the executable). A graph with such an op and no
  // communicator, or one of another size, is refused by Create. With one, auto_graph is off: every
  // rank must issue its collectives the same way, and the auto graph is a per-rank timing decision.
  DeviceCommunicator* comm = nullptr;
  // Called on the compile thread before each background compile starts, with the kernel's name
  // (tests hold it there to observe the fallback deterministically). Must not call back into the
  // executable.
  std::function<void(const std::string& kernel)> before_background_compile;
};

// A device tensor passed to Run: contiguous row-major, shape bound.
struct DeviceTensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
};

// One step of the executable program, as compiled (before shapes are bound).
struct StepInfo {
  std::string name;      // kernel-style name, e.g. "fz_add_rms_norm_bf16_h2048" or "lib:add"
  std::string kind;      // "jit" | "library" | "matmul" | "alias"
  std::vector<int> nodes;  // node ids of graph() it computes
  // "" runs in every plan. With background_compile, a group whose JIT kernel compiles in the
  // background has a "background_jit" step (runs once the kernel is ready) and "fallback" steps
  // (run until then, and for good if the compile fails).
  std::string guard;
};

class CudaGraph;

class CudaExecutable {
 public:
  static constexpr size_t kMaxPlans = 64;
  static constexpr int kAutoGraphEagerRuns = 2;  // ExecutorOptions::auto_graph: the first untimed, then one timed

  // Compiles `g` (a verified graph; the pipeline runs on a copy). Unavailable("no CUDA device: ...")
  // without a GPU.
  static StatusOr<std::unique_ptr<CudaExecutable>> Create(const Graph& g, ExecutorOptions opts = {});
  ~CudaExecutable();

  // Runs on `stream` without synchronising. `inputs` in graph().inputs order (inputs and params),
  // `outputs` in graph().outputs order, device pointers; `bindings` must bind every symbol (use
  // BindShapes to derive them from input shapes).
  Status Run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs, const Bindings& bindings,
             cudaStream_t stream);
  // By name, with shapes checked against the graph; output shapes must be the bound ones.
  Status Run(const std::map<std::string, DeviceTensor>& inputs, const std::map<std::string, DeviceTensor>& outputs,
             cudaStream_t stream);
  // Host tensors in, host tensors out: uploads, runs, downloads, synchronises (tests, CLI).
  // `state` as in Executable::Run: state inputs found there are uploaded, and downloaded back into
  // those tensors after the run.
  StatusOr<std::map<std::string, HostTensor>> RunHost(const std::map<std::string, HostTensor>& inputs,
                                                      const Bindings& explicit_bindings = {},
                                                      std::map<std::string, HostTensor>* state = nullptr);

  // Records one Run into a CUDA graph; replay it with CudaGraph::Launch. Pointers and bindings are
  // baked in (the plan is pinned while the CudaGraph lives).
  StatusOr<std::unique_ptr<CudaGraph>> Capture(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                                               const Bindings& bindings);

  const Graph& graph() const { return graph_; }  // after the pipeline (groups, variants)
  const std::vector<StepInfo>& steps() const { return steps_; }
  // Runs that replayed an auto graph (ExecutorOptions::auto_graph), and plans captured for it.
  int64_t auto_graph_replays() const;
  int auto_graphs() const;
  // Device kernels the last Run (or Capture) launched (cuBLASLt matmul counts 1, aliases 0);
  // -1 before the first run. Counted from the plan actually used, never estimated.
  int kernels_per_run() const;
  // Of those, the launches with the PDL attribute (library kernels and JIT kernels, unless
  // OPFUSE_DISABLE=pdl); -1 before the first Run.
  int pdl_launches_per_run() const;
  // Why a group did not get the variant it asked for ("group 2 fz_...: library → jit: no library kernel for generic groups"),
  // as of now: with background_compile also the groups still compiling ("... (pending): ...") and
  // those whose background compile failed ("...: background compile failed: <why>", also logged).
  std::vector<std::string> fallbacks() const;
  // Background compiles (ExecutorOptions::background_compile). generation() moves on each time one
  // finishes (ok or failed); a plan built before is rebuilt on its next Run, so Run switches to the
  // JIT kernel by itself. A CudaGraph keeps what it captured (CudaGraph::generation()): callers
  // re-Capture when generation() differs from it. pending_compiles(): not finished yet.
  uint64_t generation() const;
  int pending_compiles() const;
  void WaitForBackgroundCompiles();  // blocks until none is pending (tests, benchmarks)
  // Output shapes for `bindings`, in graph().outputs order.
  StatusOr<std::vector<std::vector<int64_t>>> OutputShapes(const Bindings& bindings) const;
  const DeviceInfo& device() const { return device_; }
  double compile_ms() const { return compile_ms_; }  // JIT compile (or cache load) time in Create

  struct Impl;

 private:
  CudaExecutable() = default;
  Graph graph_;
  std::vector<StepInfo> steps_;
  std::vector<std::string> fallbacks_;
  DeviceInfo device_;
  double compile_ms_ = 0;
  std::unique_ptr<Impl> impl_;
};

// A captured Run, replayed with one cudaGraphLaunch.
class CudaGraph {
 public:
  ~CudaGraph();
  Status Launch(cudaStream_t stream) const;
  int kernels() const { return kernels_; }
  // The executable's generation() the captured plan was built at (re-capture when it moved on).
  uint64_t generation() const { return generation_; }

 private:
  friend class CudaExecutable;
  CudaGraph() = default;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::shared_ptr<void> pin_;  // keeps the plan (its buffers) alive
  int kernels_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace opfuse::cuda
