// The backend-specific half of the Engine (engine.h): compiled prefill/decode executables, the KV
// cache and the weights on one device. Internal to src/model; the CPU runner lives in
// engine_cpu.cc, the CUDA runner (device buffers, CUDA-graph decode) in src/model/cuda/.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/llama/config.h"
#include "model/llama/engine.h"
#include "opfuse/config.h"
#include "opfuse/graph.h"
#include "ir/host_tensor.h"
#include "scheduler/profile_db.h"

namespace opfuse::llama {

struct RunnerSetup {
  LlamaConfig config;
  DType dtype = DType::kF32;
  int64_t batch = 1;
  int64_t context = 0;     // S
  Graph prefill, decode;   // as built (the runner compiles them)
  int64_t kv_heads = 0;    // KV heads the caches hold: the graphs' (LocalKvHeads with tensor parallelism)
  FusionConfig fusion;     // the strategy's pipeline config
  const scheduler::ProfileDb* profile = nullptr;  // smart_schedule: the scheduler consults it (may be empty)
  // smart_schedule: the prompt lengths the prefill graph is scheduled at (PrefillPlanLengths, engine.h);
  // empty: one plan, no size hint
  std::vector<int64_t> prefill_lengths;
  bool background_compile = false;  // cuda: ExecutorOptions::background_compile
  int device = -1;                  // cuda: the GPU ordinal (-1: the current device)
  std::map<std::string, HostTensor> params;  // every param of both graphs, in the model dtype
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual std::string device() const = 0;
  virtual double compile_ms() const = 0;
  virtual const Graph& prefill_graph(int64_t tokens) const = 0;  // the plan a prompt of `tokens` runs, after the pipeline
  virtual int prefill_plans() const = 0;                          // distinct prefill plans
  virtual const Graph& decode_graph() const = 0;
  virtual int kernels_per_decode_step() const = 0;
  virtual int kernels_per_prefill() const = 0;
  // ids (T tokens) into cache row `row` from position 0; the last token's logits [vocab] (f32).
  virtual Status Prefill(int64_t row, std::span<const int32_t> ids, std::vector<float>* logits) = 0;
  // tokens[b] at position pos[b] for every row; next [batch] (argmax) and/or logits [batch * vocab].
  virtual Status Decode(std::span<const int32_t> tokens, std::span<const int32_t> pos, std::vector<int32_t>* next,
                        std::vector<float>* logits) = 0;
  // Collectives rank 0 has run since creation, and the wall-clock ms it spent in them (waiting for
  // the other ranks included; -1 where the host cannot see them: on a GPU). Zero without tensor
  // parallelism.
  virtual int64_t collectives() const { return 0; }
  virtual double collective_ms() const { return 0; }
  // Tensor parallelism on GPUs: device µs of one all_reduce of [rows, cols] (engine_tp.h).
  virtual StatusOr<std::map<std::string, double>> AllReduceUs(int64_t rows, int64_t cols, DType dtype) {
    return Unimplemented("not tensor parallel");
  }
};

// What a compiled graph runs: its nodes' ops and each group's nodes, kind, fusion verdict, variant
// and GEMV rows — equal for two compilations exactly when they launch the same plan.
std::string PrefillPlanSignature(const Graph& compiled);

// A runner's prefill plans (engine.h, PrefillPlanLengths): the plan index of each prompt length.
struct PrefillPlanSet {
  std::vector<int64_t> lengths;        // ascending; {0}: one plan, no size hint
  std::vector<size_t> plan_of_length;  // parallel to lengths
  size_t For(int64_t tokens) const { return plan_of_length[NearestPrefillPlan(lengths, tokens)]; }
};

// Compiles the prefill plans of `lengths` (empty: one, no size hint): `compile(bindings)` compiles a
// copy of the prefill graph scheduled at {T: length} and returns a Plan, `graph_of(plan)` its
// compiled graph; a plan equal to an earlier length's (PrefillPlanSignature) is dropped and that
// length runs the earlier one. The kept plans go to `plans`, in order.
template <class Plan, class Compile, class GraphOf>
StatusOr<PrefillPlanSet> CompilePrefillPlans(const std::vector<int64_t>& lengths, Compile&& compile, GraphOf&& graph_of,
                                             std::vector<Plan>* plans) {
  PrefillPlanSet set;
  set.lengths = lengths.empty() ? std::vector<int64_t>{0} : lengths;
  std::vector<std::string> signatures;
  for (int64_t n : set.lengths) {
    OPFUSE_ASSIGN_OR_RETURN(Plan p, compile(n > 0 ? Bindings{{"T", n}} : Bindings{}));
    const std::string sig = PrefillPlanSignature(graph_of(p));
    size_t i = 0;
    while (i < signatures.size() && signatures[i] != sig) ++i;
    if (i == signatures.size()) {
      signatures.push_back(sig);
      plans->push_back(std::move(p));
    }
    set.plan_of_length.push_back(i);
  }
  return set;
}

StatusOr<std::unique_ptr<Runner>> MakeCpuRunner(RunnerSetup s);
// Tensor parallelism on the CPU (engine_tp.cc): `ranks` (rank r's runner at index r, each built
// from its rank's graphs and shards) run each call on one thread per rank, joined through an
// in-process communicator; rank 0's logits and tokens are the answer.
StatusOr<std::unique_ptr<Runner>> MakeTensorParallelCpuRunner(std::vector<std::unique_ptr<Runner>> ranks);
// Tensor parallelism on CUDA (src/model/cuda): rank r's runner on GPU r, built from setups[r], the
// ranks joined through NCCL (runtime/cuda/nccl_comm.h). Unavailable without the CUDA backend, NCCL,
// or one GPU per rank.
StatusOr<std::unique_ptr<Runner>> MakeTensorParallelCudaRunner(std::vector<RunnerSetup> setups);
// Unavailable when this build has no CUDA backend or the machine no GPU.
StatusOr<std::unique_ptr<Runner>> MakeCudaRunner(RunnerSetup s);
// Free memory of the current CUDA device in bytes: the engine's device probe, run before any weight
// is read. Unavailable when this build has no CUDA backend or the machine no GPU.
StatusOr<double> CudaFreeBytes();

}  // namespace opfuse::llama
