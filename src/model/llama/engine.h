// The Llama-family engine: a model directory (or a built-in config with deterministic random
// weights) compiled into a prefill and a decode executable under one fusion strategy, a KV cache
// per layer, and a generate loop with greedy or seeded sampling. DESIGN.md "Llama-family engine";
// docs/engine.md.
//
// Design note: the engine owns no forward pass of its own — graph_builder.h emits the model in
// primitives and the compiler decides fusion per strategy:
//   never_fuse      FusionConfig::enable_fusion = false: every primitive its own kernel;
//   always_fuse     every fusible group fused, whatever its size (min_tensor_elements = 0);
//   smart_schedule  the scheduler (scheduler/should_fuse.h) with a measured profile when given,
//                   else its cost model with default constants (the reasons say which).
// The backend-specific part is a Runner (engine_runner.h): on the CPU, the reference executor with
// the caches as state tensors; on CUDA, device buffers for weights and caches and the decode step
// captured once as a CUDA graph that replays with the token ids and positions refreshed by one
// small async copy. Prefill and decode are separate calls with their own timings so that
// `opfuse bench e2e` can measure them apart; Generate() is the loop `opfuse generate` runs.
//
// Sequences: the engine has `batch` cache rows. Prefill(row, ids) fills one row from position 0
// (prompts of different lengths each get their own prefill); Decode() advances every row by one
// token at its own position (cache_pos per sequence lives in device memory on CUDA). A prompt, or
// prompt + new tokens, longer than the context is InvalidArgument naming both numbers.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/llama/config.h"
#include "model/llama/memory.h"
#include "model/llama/sampler.h"
#include "opfuse/config.h"
#include "opfuse/graph.h"

namespace opfuse::llama {

enum class Strategy { kNeverFuse, kAlwaysFuse, kSmartSchedule };
const char* StrategyName(Strategy s);  // "never_fuse" | "always_fuse" | "smart_schedule"
// "never" | "always" | "smart" or the full names; InvalidArgument listing them otherwise.
StatusOr<Strategy> ParseStrategy(std::string_view s);
// The pipeline config of a strategy, starting from `base` (kill switches from OPFUSE_DISABLE).
FusionConfig StrategyConfig(Strategy s, FusionConfig base = {});
// Prefill plans per prompt length (smart_schedule): the schedule pass decides each group at a prompt
// length (the bindings' T), and a choice made at 128 tokens can be the wrong one at 2048 (a group's
// library and JIT kernels, or its fused form and its ops one by one, cross over in between; a short
// chat prompt's groups are a decode batch's). The engine compiles the prefill graph at each length of
// PrefillPlanLengths — kPrefillPlanLengths up to the context, or the context alone where it is
// shorter than the first — keeps one executable per distinct plan (PrefillPlanSignature,
// engine_runner.h), and runs a prompt of T tokens on the plan of the length nearest T in log2
// (NearestPrefillPlan: the profile interpolates in log(rows) too). The decode graph's shapes are
// static (the batch). The other strategies have one plan and no size hint.
inline constexpr int64_t kPrefillPlanLengths[] = {32, 128, 512, 2048, 8192};
std::vector<int64_t> PrefillPlanLengths(int64_t context);
// The index into `lengths` (ascending, non-empty) nearest `tokens` in log2; the shorter one on a tie.
size_t NearestPrefillPlan(std::span<const int64_t> lengths, int64_t tokens);

struct EngineOptions {
  std::string model_dir;        // a Hugging Face model directory; "" = a built-in config
  std::string builtin;          // "" = tinyllama-1.1b on cuda, tiny on cpu
  std::string backend = "cpu";  // cpu | cuda
  Strategy strategy = Strategy::kAlwaysFuse;
  int64_t batch = 1;            // sequences (cache rows) decoded together
  int64_t max_context = 0;      // KV cache positions; 0 = min(max_position_embeddings, kDefaultContextCap) (memory.h)
  std::string dtype;            // f32 | f16 | bf16; "" = the checkpoint's dtype (built-in: bf16 on cuda, f32 on cpu)
  uint64_t weight_seed = 0;     // built-in weights: the init-weights seed
  std::string profile_path;     // smart_schedule: a profile_result.json; "" = cost model
  // cuda: JIT kernels not in the kernel cache compile in the background while their fallback runs
  // (cuda::ExecutorOptions::background_compile); the decode graph is re-captured when one lands.
  bool background_compile = false;
  // Tensor parallelism (docs/tensor_parallel.md): the model split over this many ranks, each
  // running its own graph on its shard, one thread per rank in this process. cpu: an in-process
  // communicator; cuda: rank r on GPU r, NCCL loaded at run time. CheckTensorParallel says which
  // configs split.
  int64_t tensor_parallel = 1;
};

struct GenerateOptions {
  int64_t max_new_tokens = 16;
  SamplingParams sampling;      // temperature 0 = greedy (argmax on the device)
  bool stop_at_eos = false;     // a finished sequence keeps its row but its later tokens are dropped
  bool keep_logits = false;     // record every step's logits (prefill's last token, then each decode step)
};

struct GenerateResult {
  std::vector<std::vector<int32_t>> tokens;               // new tokens per sequence
  std::vector<std::vector<std::vector<float>>> logits;    // [sequence][step][vocab] with keep_logits
  double prefill_ms = 0;      // all prompts, wall clock including the device sync
  double decode_ms = 0;       // all decode steps (sampling included)
  int64_t decode_steps = 0;   // batched steps run
  double ms_per_token() const { return decode_steps ? decode_ms / decode_steps : 0; }  // per step (= per token of each sequence)
};

class Runner;  // engine_runner.h

class Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& opts);
  // The backend can run here: "cpu" always; "cuda" when this build has the CUDA backend and the
  // machine a usable GPU (Unavailable("no CUDA device: ...") otherwise). Create checks it first.
  static Status CheckBackend(const std::string& backend);
  ~Engine();

  const LlamaConfig& config() const { return config_; }
  const EngineOptions& options() const { return opts_; }
  Strategy strategy() const { return opts_.strategy; }
  const char* strategy_name() const { return StrategyName(opts_.strategy); }
  std::string model_name() const { return model_name_; }
  std::string device() const;
  DType dtype() const { return dtype_; }
  int64_t batch() const { return opts_.batch; }
  int64_t tensor_parallel() const { return opts_.tensor_parallel; }
  // Collectives (all_reduce, all_gather) rank 0 ran and the ms it spent in them, since creation.
  int64_t collectives() const;
  double collective_ms() const;  // -1 where the host cannot time them (GPUs)
  // Tensor parallelism on GPUs: device µs of one all_reduce of the decode step's message (batch x
  // hidden elements of the model dtype), timed on every rank at once. Unimplemented otherwise.
  StatusOr<std::map<std::string, double>> DecodeAllReduceUs();
  int64_t context() const { return context_; }
  // True when the context is the default cap (kDefaultContextCap), below max_position_embeddings.
  bool context_capped() const { return context_capped_; }
  // What Create estimated this engine holds (memory.h), for the banner.
  const MemoryEstimate& memory() const { return memory_; }
  double compile_ms() const { return compile_ms_; }   // both graphs: pipeline, JIT (or cache loads), capture excluded
  double load_ms() const { return load_ms_; }         // weights read or generated, and uploaded
  // Kernels one decode step launches (CUDA: counted from the executor's plan / captured graph;
  // CPU: node groups the reference runs), per rank with tensor parallelism. -1 before the first step.
  int kernels_per_decode_step() const;
  int kernels_per_prefill() const;                     // the last prefill's
  // The prefill plan a prompt of `tokens` tokens runs, after the pipeline (rank 0's with tensor
  // parallelism); tokens <= 0: the plan of the shortest length.
  const Graph& prefill_graph(int64_t tokens = 0) const;
  // The prompt length that plan was scheduled at (smart_schedule; 0: no size hint) and the distinct
  // prefill plans the engine holds.
  int64_t prefill_plan_length(int64_t tokens) const;
  int prefill_plans() const;
  const Graph& decode_graph() const;

  // Forgets every sequence (lengths back to 0). Cache slots are always written before they are read.
  void Reset();
  int64_t length(int64_t row) const { return lengths_.at(row); }
  // Fills empty row `row` with `ids` from position 0; returns the last token's logits [vocab].
  StatusOr<std::vector<float>> Prefill(int64_t row, std::span<const int32_t> ids);
  // One decode step of every row: tokens[b] goes to position length(b). `next` (when set) gets the
  // argmax of each row's logits, computed on the device; `logits` (when set) gets [batch * vocab].
  Status Decode(std::span<const int32_t> tokens, std::vector<int32_t>* next, std::vector<float>* logits);
  // Prefill every prompt (prompts.size() == batch), then decode max_new_tokens steps.
  StatusOr<GenerateResult> Generate(const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& g);

 private:
  Engine() = default;
  EngineOptions opts_;
  LlamaConfig config_;
  std::string model_name_;
  DType dtype_ = DType::kF32;
  int64_t context_ = 0;
  bool context_capped_ = false;
  std::vector<int64_t> prefill_lengths_;  // the runner's (RunnerSetup::prefill_lengths): smart_schedule's ladder, else empty
  MemoryEstimate memory_;
  double compile_ms_ = 0, load_ms_ = 0;
  std::vector<int64_t> lengths_;
  std::unique_ptr<Runner> runner_;
};

}  // namespace opfuse::llama
