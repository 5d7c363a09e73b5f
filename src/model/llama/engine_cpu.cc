// The CPU Runner (engine_runner.h): the reference backend runs both graphs; the KV cache is one
// [batch, S, Hkv, D] HostTensor pair per layer, handed to the executor as state (updated in place).
// Prefill runs the batch-1 graph on one row: the row is copied into a [1, S, Hkv, D] state tensor
// and back — a copy per prompt, negligible next to the reference's matmuls at the sizes the CPU
// serves (the `tiny` config; TinyLlama shapes run, slowly, for checks). The pipeline runs here
// rather than through Backend::Compile because smart_schedule hands the schedule pass a profile and
// size hints (PassContext), which CompileOptions does not carry; the run is then exactly the CPU
// backend's: RunGraphCpu with fused groups executed as groups (f32 intermediates).
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "model/llama/engine_runner.h"
#include "model/llama/graph_builder.h"
#include "passes/pipeline.h"
#include "runtime/cpu/cpu_executor.h"

namespace opfuse::llama {
namespace {

class CpuRunner final : public Runner {
 public:
  static StatusOr<std::unique_ptr<Runner>> Create(RunnerSetup s) {
    std::unique_ptr<CpuRunner> r(new CpuRunner());
    const auto t0 = std::chrono::steady_clock::now();
    PassContext ctx;
    ctx.config = s.fusion;
    ctx.profile = s.profile;
    OPFUSE_ASSIGN_OR_RETURN(
        r->plan_set_, CompilePrefillPlans(
                          s.prefill_lengths,
                          [&](const Bindings& b) -> StatusOr<Graph> {
                            Graph g = s.prefill;
                            PassContext c = ctx;
                            c.bindings = b;
                            OPFUSE_RETURN_IF_ERROR(RunPipeline(g, c));
                            return g;
                          },
                          [](const Graph& g) -> const Graph& { return g; }, &r->prefills_));
    r->decode_ = std::move(s.decode);
    OPFUSE_RETURN_IF_ERROR(RunPipeline(r->decode_, ctx));
    r->compile_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r->c_ = s.config;
    r->batch_ = s.batch;
    r->S_ = s.context;
    r->inputs_ = std::move(s.params);
    const int64_t Hkv = s.kv_heads, D = s.config.head_dim;
    for (int64_t l = 0; l < s.config.num_hidden_layers; ++l)
      for (const std::string& name : {CacheKeyName(l), CacheValueName(l)}) {
        HostTensor cache(s.dtype, {s.batch, s.context, Hkv, D});
        for (int64_t i = 0; i < cache.numel(); ++i) cache.set(i, 0.0);
        r->cache_[name] = std::move(cache);
        r->row_cache_[name] = HostTensor(s.dtype, {1, s.context, Hkv, D});
      }
    return std::unique_ptr<Runner>(std::move(r));
  }

  std::string device() const override { return "cpu (reference, f32 accumulation)"; }
  double compile_ms() const override { return compile_ms_; }
  const Graph& prefill_graph(int64_t tokens) const override { return prefills_[plan_set_.For(tokens)]; }
  int prefill_plans() const override { return static_cast<int>(prefills_.size()); }
  const Graph& decode_graph() const override { return decode_; }
  int kernels_per_decode_step() const override { return decode_runs_ ? Steps(decode_) : -1; }
  int kernels_per_prefill() const override { return prefill_runs_ ? Steps(prefills_[last_plan_]) : -1; }

  Status Prefill(int64_t row, std::span<const int32_t> ids, std::vector<float>* logits) override {
    const int64_t T = static_cast<int64_t>(ids.size());
    HostTensor tok(DType::kI32, {1, T}), pos(DType::kI32, {1, T});
    for (int64_t t = 0; t < T; ++t) {
      tok.set(t, ids[t]);
      pos.set(t, static_cast<double>(t));
    }
    HostTensor cache_pos(DType::kI32, {1}), last(DType::kI32, {1});
    cache_pos.set(0, 0);
    last.set(0, static_cast<double>(T - 1));
    inputs_["input_ids"] = std::move(tok);
    inputs_["position_ids"] = std::move(pos);
    inputs_["cache_pos"] = std::move(cache_pos);
    inputs_["last_index"] = std::move(last);
    const size_t row_bytes = row_cache_.begin()->second.data.size();
    for (auto& [name, t] : row_cache_) std::memcpy(t.data.data(), cache_.at(name).data.data() + row * row_bytes, row_bytes);
    last_plan_ = plan_set_.For(T);
    auto out = RunGraphCpu(prefills_[last_plan_], inputs_, CpuRunOptions{{}, true, &row_cache_});
    EraseStepInputs();
    OPFUSE_RETURN_IF_ERROR(out.status());
    for (auto& [name, t] : row_cache_) std::memcpy(cache_.at(name).data.data() + row * row_bytes, t.data.data(), row_bytes);
    *logits = out->at("logits").to_f32();
    ++prefill_runs_;
    return Status::Ok();
  }

  Status Decode(std::span<const int32_t> tokens, std::span<const int32_t> pos, std::vector<int32_t>* next,
                std::vector<float>* logits) override {
    HostTensor tok(DType::kI32, {batch_, 1}), cache_pos(DType::kI32, {batch_});
    for (int64_t b = 0; b < batch_; ++b) {
      tok.set(b, tokens[b]);
      cache_pos.set(b, pos[b]);
    }
    inputs_["input_ids"] = std::move(tok);
    inputs_["cache_pos"] = std::move(cache_pos);
    auto out = RunGraphCpu(decode_, inputs_, CpuRunOptions{{}, true, &cache_});
    EraseStepInputs();
    OPFUSE_RETURN_IF_ERROR(out.status());
    if (logits) *logits = out->at("logits").to_f32();
    if (next) {
      const HostTensor& n = out->at("next_token");
      next->resize(batch_);
      for (int64_t b = 0; b < batch_; ++b) (*next)[b] = static_cast<int32_t>(n.get_int(b));
    }
    ++decode_runs_;
    return Status::Ok();
  }

 private:
  // Node groups one run executes, counted as the CPU backend counts them (a fused group is one).
  static int Steps(const Graph& g) {
    int n = 0;
    for (const auto& grp : g.groups) n += grp.decision.fuse ? 1 : static_cast<int>(grp.nodes.size());
    return n;
  }

  void EraseStepInputs() {
    for (const char* n : {"input_ids", "position_ids", "cache_pos", "last_index"}) inputs_.erase(n);
  }

  std::vector<Graph> prefills_;  // after the pipeline: one per distinct plan (PrefillPlanSet)
  PrefillPlanSet plan_set_;
  size_t last_plan_ = 0;
  Graph decode_;
  double compile_ms_ = 0;
  LlamaConfig c_;
  int64_t batch_ = 1, S_ = 0;
  std::map<std::string, HostTensor> inputs_;  // params, plus the step's ids/positions while it runs
  std::map<std::string, HostTensor> cache_, row_cache_;
  int64_t prefill_runs_ = 0, decode_runs_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<Runner>> MakeCpuRunner(RunnerSetup s) { return CpuRunner::Create(std::move(s)); }

#ifndef OPFUSE_WITH_CUDA
StatusOr<std::unique_ptr<Runner>> MakeCudaRunner(RunnerSetup) {
  return Unavailable("no CUDA device: this opfuse was built without the CUDA backend (OPFUSE_CUDA=OFF)");
}
StatusOr<double> CudaFreeBytes() {
  return Unavailable("no CUDA device: this opfuse was built without the CUDA backend (OPFUSE_CUDA=OFF)");
}
StatusOr<std::unique_ptr<Runner>> MakeTensorParallelCudaRunner(std::vector<RunnerSetup>) {
  return Unavailable("no CUDA device: this opfuse was built without the CUDA backend (OPFUSE_CUDA=OFF)");
}
#endif

}  // namespace opfuse::llama
