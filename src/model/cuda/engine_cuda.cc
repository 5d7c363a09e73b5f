// The CUDA Runner (src/model/llama/engine_runner.h): weights and the KV cache in device buffers,
// prefill through CudaExecutable::Run, and the decode step as one CUDA graph.
//
// Design note (DESIGN.md "Backends and execution"; docs/engine.md): every pointer the decode graph
// touches is fixed for the engine's life — weights, per-layer caches [batch, S, Hkv, D], the step
// buffer (token ids then positions, 2 x batch i32) and the outputs — so the step is captured once
// (CudaExecutable::Capture) and each step is: one host-to-device copy of 8 x batch bytes from
// pinned memory, one cudaGraphLaunch, one device-to-host copy (4 x batch bytes of argmax for greedy
// decoding, the logits when sampling), one stream sync. Positions live in device memory, so the
// graph never needs re-capture — except with background_compile, when a JIT kernel that was
// compiling lands (CudaExecutable::generation() moved past the graph's): the next step re-captures. Prefill runs the batch-1 graph eagerly on a cache row: row b of a
// [batch, S, Hkv, D] cache is itself a contiguous [1, S, Hkv, D] tensor, so it is a pointer offset,
// not a copy. Built with OPFUSE_CUDA only.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "model/llama/engine_runner.h"
#include "model/llama/graph_builder.h"
#include "runtime/cuda/allocator.h"
#include "cuda/cuda_check.h"
#include "cuda/device.h"
#include "runtime/cuda/executor.h"
#include "runtime/cuda/nccl_comm.h"
#include "runtime/cuda/stream.h"
#include "model/llama/engine_tp.h"

namespace opfuse::llama {
namespace {

using cuda::CudaExecutable;
using cuda::DeviceBuffer;

// Page-locked host memory (async copies need it to be truly asynchronous).
struct Pinned {
  void* p = nullptr;
  ~Pinned() { if (p) cudaFreeHost(p); }
  Status Alloc(size_t bytes) {
    OPFUSE_CUDA_CHECK(cudaMallocHost(&p, bytes));
    return Status::Ok();
  }
  template <typename T> T* as() const { return static_cast<T*>(p); }
};

class CudaRunner final : public Runner {
 public:
  ~CudaRunner() override {
    if (device_ordinal_ >= 0) cudaSetDevice(device_ordinal_);
    graph_.reset();
    (void)cuda::DestroyStream(stream_);  // with its cuBLASLt workspace and cached blocks
  }

  // `comm`: the rank's transport under tensor parallelism (nullptr: one GPU).
  static StatusOr<std::unique_ptr<CudaRunner>> Create(RunnerSetup s, cuda::DeviceCommunicator* comm = nullptr) {
    std::unique_ptr<CudaRunner> r(new CudaRunner());
    if (s.device >= 0) OPFUSE_CUDA_CHECK(cudaSetDevice(s.device));
    OPFUSE_CUDA_CHECK(cudaGetDevice(&r->device_ordinal_));
    r->c_ = s.config;
    r->batch_ = s.batch;
    r->S_ = s.context;
    OPFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&r->stream_, cudaStreamNonBlocking));

    const auto t0 = std::chrono::steady_clock::now();
    cuda::ExecutorOptions eo;
    eo.config = s.fusion;
    // smart_schedule: the schedule pass runs should_fuse with the profile (an empty one: the cost
    // model with default constants) at each prefill plan's prompt length (PrefillPlanLengths), one
    // executable per distinct plan; the decode graph's shapes are static.
    eo.profile = s.profile;
    eo.background_compile = s.background_compile;
    eo.comm = comm;
    OPFUSE_ASSIGN_OR_RETURN(
        r->plan_set_, CompilePrefillPlans(
                          s.prefill_lengths,
                          [&](const Bindings& b) {
                            cuda::ExecutorOptions pe = eo;
                            pe.schedule_bindings = b;
                            return CudaExecutable::Create(s.prefill, pe);
                          },
                          [](const std::unique_ptr<CudaExecutable>& ex) -> const Graph& { return ex->graph(); }, &r->prefills_));
    OPFUSE_ASSIGN_OR_RETURN(r->decode_, CudaExecutable::Create(s.decode, eo));
    r->compile_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r->alloc_ = &cuda::CachingAllocator::ForDevice(r->decode_->device().ordinal);
    r->device_ = r->decode_->device().ToString();

    // Weights (and the RoPE tables): uploaded once, then the host copies are dropped.
    for (auto& [name, t] : s.params) {
      OPFUSE_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::Make(*r->alloc_, t.data.size()));
      OPFUSE_CUDA_CHECK(cudaMemcpy(buf.get(), t.data.data(), t.data.size(), cudaMemcpyHostToDevice));
      r->bufs_.emplace(name, std::move(buf));
      t = HostTensor();
    }
    // KV caches, zeroed (a slot is always written before it is read; zeros keep a bug visible, not NaN).
    const size_t cache_bytes = static_cast<size_t>(s.batch * s.context * s.kv_heads *
                                                   s.config.head_dim * DTypeSize(s.dtype));
    r->row_bytes_ = cache_bytes / s.batch;
    for (int64_t l = 0; l < s.config.num_hidden_layers; ++l)
      for (const std::string& name : {CacheKeyName(l), CacheValueName(l)}) {
        OPFUSE_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::Make(*r->alloc_, cache_bytes));
        OPFUSE_CUDA_CHECK(cudaMemset(buf.get(), 0, cache_bytes));
        r->bufs_.emplace(name, std::move(buf));
      }
    OPFUSE_RETURN_IF_ERROR(r->AllocStepBuffers());
    OPFUSE_RETURN_IF_ERROR(r->CaptureDecode());
    return r;
  }

  std::string device() const override { return device_; }
  double compile_ms() const override { return compile_ms_; }
  const Graph& prefill_graph(int64_t tokens) const override { return prefills_[plan_set_.For(tokens)]->graph(); }
  int prefill_plans() const override { return static_cast<int>(prefills_.size()); }
  const Graph& decode_graph() const override { return decode_->graph(); }
  int kernels_per_decode_step() const override { return graph_ ? graph_->kernels() : -1; }
  int kernels_per_prefill() const override { return prefill_runs_ ? prefills_[last_plan_]->kernels_per_run() : -1; }

  Status Prefill(int64_t row, std::span<const int32_t> ids, std::vector<float>* logits) override {
    OPFUSE_CUDA_CHECK(cudaSetDevice(device_ordinal_));
    const int64_t T = static_cast<int64_t>(ids.size());
    // Packed: ids [T], positions [T], cache_pos [1], last_index [1].
    int32_t* h = h_prefill_.as<int32_t>();
    for (int64_t t = 0; t < T; ++t) {
      h[t] = ids[t];
      h[T + t] = static_cast<int32_t>(t);
    }
    h[2 * T] = 0;
    h[2 * T + 1] = static_cast<int32_t>(T - 1);
    int32_t* d = static_cast<int32_t*>(d_prefill_.get());
    OPFUSE_CUDA_CHECK(cudaMemcpyAsync(d, h, (2 * T + 2) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    std::map<std::string, const void*> in = {{"input_ids", d}, {"position_ids", d + T}, {"cache_pos", d + 2 * T},
                                             {"last_index", d + 2 * T + 1}};
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l)
      for (const std::string& name : {CacheKeyName(l), CacheValueName(l)})
        in[name] = static_cast<const char*>(bufs_.at(name).get()) + row * row_bytes_;
    last_plan_ = plan_set_.For(T);
    CudaExecutable& prefill = *prefills_[last_plan_];
    OPFUSE_ASSIGN_OR_RETURN(auto ptrs, Pointers(prefill, in));
    OPFUSE_RETURN_IF_ERROR(prefill.Run(ptrs, {d_prefill_logits_.get()}, {{"T", T}}, stream_));
    const int64_t V = c_.vocab_size;
    OPFUSE_CUDA_CHECK(cudaMemcpyAsync(h_logits_.p, d_prefill_logits_.get(), V * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    OPFUSE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    logits->assign(h_logits_.as<float>(), h_logits_.as<float>() + V);
    ++prefill_runs_;
    return Status::Ok();
  }

  Status Decode(std::span<const int32_t> tokens, std::span<const int32_t> pos, std::vector<int32_t>* next,
                std::vector<float>* logits) override {
    OPFUSE_CUDA_CHECK(cudaSetDevice(device_ordinal_));
    int32_t* h = h_step_.as<int32_t>();
    std::memcpy(h, tokens.data(), batch_ * sizeof(int32_t));
    std::memcpy(h + batch_, pos.data(), batch_ * sizeof(int32_t));
    OPFUSE_CUDA_CHECK(cudaMemcpyAsync(d_step_.get(), h, 2 * batch_ * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    if (graph_->generation() != decode_->generation()) {
      // A background compile landed (background_compile): re-capture so the step runs it. The
      // capture's eager run is this very step (its tokens and positions are in d_step_ now), and
      // the replay below writes the same K/V again: harmless.
      OPFUSE_CUDA_CHECK(cudaStreamSynchronize(stream_));
      OPFUSE_RETURN_IF_ERROR(CaptureDecode());
    }
    OPFUSE_RETURN_IF_ERROR(graph_->Launch(stream_));
    const int64_t V = c_.vocab_size;
    if (next)
      OPFUSE_CUDA_CHECK(cudaMemcpyAsync(h_next_.p, d_next_.get(), batch_ * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    if (logits)
      OPFUSE_CUDA_CHECK(cudaMemcpyAsync(h_logits_.p, d_logits_.get(), batch_ * V * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    OPFUSE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (next) next->assign(h_next_.as<int32_t>(), h_next_.as<int32_t>() + batch_);
    if (logits) logits->assign(h_logits_.as<float>(), h_logits_.as<float>() + batch_ * V);
    return Status::Ok();
  }

 private:
  CudaRunner() = default;

  Status AllocStepBuffers() {
    const int64_t V = c_.vocab_size;
    OPFUSE_ASSIGN_OR_RETURN(d_step_, DeviceBuffer::Make(*alloc_, 2 * batch_ * sizeof(int32_t)));
    OPFUSE_CUDA_CHECK(cudaMemset(d_step_.get(), 0, 2 * batch_ * sizeof(int32_t)));
    OPFUSE_ASSIGN_OR_RETURN(d_next_, DeviceBuffer::Make(*alloc_, batch_ * sizeof(int32_t)));
    OPFUSE_ASSIGN_OR_RETURN(d_logits_, DeviceBuffer::Make(*alloc_, batch_ * V * sizeof(float)));
    OPFUSE_ASSIGN_OR_RETURN(d_prefill_, DeviceBuffer::Make(*alloc_, (2 * S_ + 2) * sizeof(int32_t)));
    OPFUSE_ASSIGN_OR_RETURN(d_prefill_logits_, DeviceBuffer::Make(*alloc_, V * sizeof(float)));
    OPFUSE_RETURN_IF_ERROR(h_step_.Alloc(2 * batch_ * sizeof(int32_t)));
    OPFUSE_RETURN_IF_ERROR(h_next_.Alloc(batch_ * sizeof(int32_t)));
    OPFUSE_RETURN_IF_ERROR(h_logits_.Alloc(batch_ * V * sizeof(float)));
    OPFUSE_RETURN_IF_ERROR(h_prefill_.Alloc((2 * S_ + 2) * sizeof(int32_t)));
    return Status::Ok();
  }

  // Input pointers in `ex`'s graph input order: the step's own buffers, else weights/caches.
  StatusOr<std::vector<const void*>> Pointers(const CudaExecutable& ex, const std::map<std::string, const void*>& own) {
    std::vector<const void*> out;
    for (int v : ex.graph().inputs) {
      const std::string& name = ex.graph().values[v].name;
      if (auto it = own.find(name); it != own.end()) {
        out.push_back(it->second);
      } else if (auto b = bufs_.find(name); b != bufs_.end()) {
        out.push_back(b->second.get());
      } else {
        return Internal(fmt::format("engine: no device buffer for graph input '{}'", name));
      }
    }
    return out;
  }

  // The decode step, captured once. Capture runs it once eagerly on the zeroed step buffer (token 0
  // at position 0 of every row): that writes cache slot 0, which every prefill overwrites.
  Status CaptureDecode() {
    const int32_t* d = static_cast<const int32_t*>(d_step_.get());
    OPFUSE_ASSIGN_OR_RETURN(auto ptrs, Pointers(*decode_, {{"input_ids", d}, {"cache_pos", d + batch_}}));
    std::vector<void*> outs;
    for (int v : decode_->graph().outputs) {
      const std::string& name = decode_->graph().values[v].name;
      if (name == "logits") outs.push_back(d_logits_.get());
      else if (name == "next_token") outs.push_back(d_next_.get());
      else return Internal(fmt::format("engine: unexpected decode output '{}'", name));
    }
    OPFUSE_ASSIGN_OR_RETURN(graph_, decode_->Capture(ptrs, outs, {}));
    return Status::Ok();
  }

  LlamaConfig c_;
  int device_ordinal_ = -1;
  int64_t batch_ = 1, S_ = 0;
  size_t row_bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  cuda::CachingAllocator* alloc_ = nullptr;
  std::string device_;
  std::vector<std::unique_ptr<CudaExecutable>> prefills_;  // one per distinct plan (PrefillPlanSet)
  PrefillPlanSet plan_set_;
  size_t last_plan_ = 0;
  std::unique_ptr<CudaExecutable> decode_;
  std::unique_ptr<cuda::CudaGraph> graph_;
  double compile_ms_ = 0;
  std::map<std::string, DeviceBuffer> bufs_;  // weights, rope tables, caches
  DeviceBuffer d_step_, d_next_, d_logits_, d_prefill_, d_prefill_logits_;
  Pinned h_step_, h_next_, h_logits_, h_prefill_;
  int64_t prefill_runs_ = 0;
};

// Tensor parallelism: rank r on GPU r, joined through NCCL. Every call runs rank r's work on its
// own thread with GPU r current; a rank that fails aborts the NCCL communicators so that no rank
// waits forever in a collective.
// Device µs of fuse_collective's group — all_reduce then add_rms_norm over [rows, cols] — on
// transport `t` (kGroup: one launch where it takes the message; kNccl: the all-reduce, then the norm
// kernel): each rank's executable of that graph, timed as cuda::TimeOnRanks times a collective.
StatusOr<double> TimeAllReduceNormUs(cuda::NcclGroup& group, int world, int64_t rows, int64_t cols, DType dtype,
                                     cuda::NcclGroup::Transport t) {
  constexpr int kIters = 50;
  const std::string dt = DTypeName(dtype);
  OPFUSE_ASSIGN_OR_RETURN(Graph g, ParseGraph(fmt::format(R"(graph all_reduce_add_rms_norm
input part: {0}[{1}, {2}]
input residual: {0}[{1}, {2}]
param weight: {0}[{2}]
eps = constant() {{value=1e-05}}
s = all_reduce(part) {{world={3}}}
h = add(residual, s)
h2 = mul(h, h)
ms = mean(h2)
ms_eps = add(ms, eps)
inv = rsqrt(ms_eps)
hn = mul(h, inv)
y = mul(hn, weight)
output y, h
)", dt, rows, cols, world)));
  const size_t bytes = static_cast<size_t>(rows * cols * DTypeSize(dtype));
  struct Rank {
    std::unique_ptr<cuda::CudaExecutable> ex;
    void *part = nullptr, *res = nullptr, *w = nullptr, *y = nullptr, *h = nullptr;
  };
  std::vector<Rank> ranks(world);
  return cuda::TimeOnRanks(
      world, kIters,
      [&](int r, cudaStream_t) -> Status {
        Rank& k = ranks[r];
        cuda::ExecutorOptions eo;
        eo.comm = group.transport(r, t);
        OPFUSE_ASSIGN_OR_RETURN(k.ex, cuda::CudaExecutable::Create(g, eo));
        for (void** p : {&k.part, &k.res, &k.y, &k.h}) {
          OPFUSE_RETURN_IF_ERROR(cuda::CudaStatus(cudaMalloc(p, bytes), "cudaMalloc"));
          OPFUSE_RETURN_IF_ERROR(cuda::CudaStatus(cudaMemset(*p, 0, bytes), "cudaMemset"));
        }
        const size_t wbytes = static_cast<size_t>(cols * DTypeSize(dtype));
        OPFUSE_RETURN_IF_ERROR(cuda::CudaStatus(cudaMalloc(&k.w, wbytes), "cudaMalloc"));
        return cuda::CudaStatus(cudaMemset(k.w, 0, wbytes), "cudaMemset");
      },
      [&](int r, cudaStream_t s) {
        Rank& k = ranks[r];
        return k.ex->Run({k.part, k.res, k.w}, {k.y, k.h}, {}, s);  // graph inputs, params; outputs
      },
      [&](int r) {
        Rank& k = ranks[r];
        for (void* p : {k.part, k.res, k.w, k.y, k.h})
          if (p) cudaFree(p);
        k.ex.reset();
      });
}

class CudaRankGroup final : public RankGroup {
 public:
  explicit CudaRankGroup(std::unique_ptr<cuda::NcclGroup> nccl) : nccl_(std::move(nccl)) {}
  Status RunAsRank(int rank, const std::function<Status()>& f) override {
    OPFUSE_CUDA_CHECK(cudaSetDevice(rank));
    return f();
  }
  void Abort() override { nccl_->Abort(); }
  StatusOr<std::map<std::string, double>> AllReduceUs(int64_t rows, int64_t cols, DType dtype) override {
    using T = cuda::NcclGroup::Transport;
    const int64_t count = rows * cols;
    std::map<std::string, double> out;
    OPFUSE_ASSIGN_OR_RETURN(out["nccl"], nccl_->TimeAllReduceUs(count, dtype, T::kNccl));
    if (nccl_->one_shot()) {
      OPFUSE_ASSIGN_OR_RETURN(out["one_shot"], nccl_->TimeAllReduceUs(count, dtype, T::kOneShot));
    }
    OPFUSE_ASSIGN_OR_RETURN(out["used"], nccl_->TimeAllReduceUs(count, dtype, T::kGroup));  // what the graphs run
    out["one_shot_max_bytes"] = static_cast<double>(nccl_->one_shot_max_bytes());
    const int world = nccl_->transport(0, T::kNccl)->world();
    // The fused kernel (on in the graphs where it applies, NcclGroup::set_fused_add_rms_norm) beside
    // the two launches it replaces: the group's all-reduce then the norm kernel, and NCCL's then the
    // norm kernel. The group's setting is restored after.
    const bool was = nccl_->fused_add_rms_norm();
    nccl_->set_fused_add_rms_norm(true);
    const bool fusable = nccl_->transport(0, T::kGroup)->FusedAddRmsNormSupported(rows, cols, dtype);
    StatusOr<double> fused = fusable ? TimeAllReduceNormUs(*nccl_, world, rows, cols, dtype, T::kGroup) : StatusOr<double>(0.0);
    nccl_->set_fused_add_rms_norm(false);
    StatusOr<double> two = TimeAllReduceNormUs(*nccl_, world, rows, cols, dtype, T::kGroup);
    nccl_->set_fused_add_rms_norm(was);
    if (fusable) {
      OPFUSE_ASSIGN_OR_RETURN(out["fused_add_rms_norm"], std::move(fused));
    }
    OPFUSE_ASSIGN_OR_RETURN(out["group_then_add_rms_norm"], std::move(two));
    OPFUSE_ASSIGN_OR_RETURN(out["nccl_then_add_rms_norm"], TimeAllReduceNormUs(*nccl_, world, rows, cols, dtype, T::kNccl));
    return out;
  }

 private:
  std::unique_ptr<cuda::NcclGroup> nccl_;
};

}  // namespace

StatusOr<std::unique_ptr<Runner>> MakeCudaRunner(RunnerSetup s) {
  OPFUSE_ASSIGN_OR_RETURN(std::unique_ptr<CudaRunner> r, CudaRunner::Create(std::move(s)));
  return std::unique_ptr<Runner>(std::move(r));
}

StatusOr<std::unique_ptr<Runner>> MakeTensorParallelCudaRunner(std::vector<RunnerSetup> setups) {
  const int world = static_cast<int>(setups.size());
  OPFUSE_ASSIGN_OR_RETURN(std::unique_ptr<cuda::NcclGroup> nccl,
                          cuda::NcclGroup::Create(world, !setups.at(0).fusion.IsDisabled("pdl")));
  // Concurrently: each rank's creation runs its decode step once (the capture), collectives included.
  std::vector<StatusOr<std::unique_ptr<CudaRunner>>> made;
  for (int r = 0; r < world; ++r) made.emplace_back(Internal("not made"));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      setups[r].device = r;
      made[r] = CudaRunner::Create(std::move(setups[r]), nccl->comm(r));
      if (!made[r].ok()) nccl->Abort();
    });
  for (auto& t : threads) t.join();
  std::vector<std::unique_ptr<Runner>> ranks;
  for (auto& m : made) {
    OPFUSE_RETURN_IF_ERROR(m.status());
    ranks.push_back(std::move(*m));
  }
  return MakeTensorParallelRunner(std::move(ranks), std::make_unique<CudaRankGroup>(std::move(nccl)));
}


StatusOr<double> CudaFreeBytes() {
  OPFUSE_RETURN_IF_ERROR(cuda::DeviceCount().status());  // Unavailable("no CUDA device: ...") without one
  size_t free_b = 0, total_b = 0;
  if (const cudaError_t e = cudaMemGetInfo(&free_b, &total_b); e != cudaSuccess)
    return Unavailable(fmt::format("no CUDA device: cudaMemGetInfo failed: {}", cudaGetErrorString(e)));
  return static_cast<double>(free_b);
}

}  // namespace opfuse::llama
