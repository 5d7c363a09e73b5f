// Engine (see engine.h): load or generate weights, build both graphs, hand them to a Runner, and
// the generate loop. Backend-specific code lives in the runners (engine_runner.h).
#include "model/llama/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "model/llama/engine_runner.h"
#include "model/llama/graph_builder.h"
#include "model/llama/tensor_parallel.h"
#include "model/llama/weights.h"
#include "model/safetensors.h"

namespace opfuse::llama {

namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

DType FromSt(StDType t) {
  return t == StDType::kBF16 ? DType::kBF16 : t == StDType::kF16 ? DType::kF16 : DType::kF32;
}
StDType ToSt(DType t) { return t == DType::kBF16 ? StDType::kBF16 : t == DType::kF16 ? StDType::kF16 : StDType::kF32; }

// A checkpoint tensor (f32/f16/bf16 bytes) as a HostTensor of dtype `dt`: a copy, converted when
// the dtypes differ (through f32, round-to-nearest-even).
HostTensor FromBytes(StDType st, std::span<const uint8_t> bytes, const std::vector<int64_t>& shape, DType dt) {
  HostTensor t(dt, shape);
  if (FromSt(st) == dt && (st == StDType::kF32 || st == StDType::kF16 || st == StDType::kBF16)) {
    std::memcpy(t.data.data(), bytes.data(), t.data.size());
    return t;
  }
  HostTensor src(FromSt(st), shape);
  std::memcpy(src.data.data(), bytes.data(), src.data.size());
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, src.get(i));
  return t;
}

// Every tensor of the config, from a directory or generated (init-weights' values), in parallel.
Status LoadParams(const LlamaConfig& c, const SafetensorsDir* dir, uint64_t seed, DType dt,
                  std::map<std::string, HostTensor>* params) {
  const auto expected = ExpectedTensors(c);
  std::vector<HostTensor> out(expected.size());
  std::vector<Status> errors(expected.size());
  const unsigned workers = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 16));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < expected.size();) {
      const auto& e = expected[i];
      if (dir) {
        const auto* entry = dir->Find(e.name);
        if (!entry) {  // CheckWeights ran first; only a tied lm_head may be absent, and it is never asked for
          errors[i] = NotFound(fmt::format("tensor '{}' missing from the model directory", e.name));
          continue;
        }
        out[i] = FromBytes(entry->info->dtype, entry->file->Data(*entry->info), e.shape, dt);
      } else {
        HostTensor t(dt, e.shape);
        FillRandomTensor(e, seed, ToSt(dt), std::span<uint8_t>(t.data.data(), t.data.size()));
        out[i] = std::move(t);
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  for (size_t i = 0; i < expected.size(); ++i) {
    OPFUSE_RETURN_IF_ERROR(errors[i]);
    (*params)[expected[i].name] = std::move(out[i]);
  }
  return Status::Ok();
}

StatusOr<DType> ParseModelDType(const std::string& s) {
  if (s == "f32" || s == "float32") return DType::kF32;
  if (s == "f16" || s == "float16") return DType::kF16;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  return InvalidArgument(fmt::format("unknown model dtype '{}' (expected f32, f16 or bf16)", s));
}

}  // namespace

const char* StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kNeverFuse: return "never_fuse";
    case Strategy::kAlwaysFuse: return "always_fuse";
    case Strategy::kSmartSchedule: return "smart_schedule";
  }
  return "?";
}

StatusOr<Strategy> ParseStrategy(std::string_view s) {
  if (s == "never" || s == "never_fuse") return Strategy::kNeverFuse;
  if (s == "always" || s == "always_fuse") return Strategy::kAlwaysFuse;
  if (s == "smart" || s == "smart_schedule") return Strategy::kSmartSchedule;
  return InvalidArgument(fmt::format("unknown strategy '{}' (expected never, always or smart)", s));
}

std::vector<int64_t> PrefillPlanLengths(int64_t context) {
  std::vector<int64_t> v;
  for (int64_t n : kPrefillPlanLengths)
    if (n <= context) v.push_back(n);
  if (v.empty()) v.push_back(std::max<int64_t>(context, 1));
  return v;
}

size_t NearestPrefillPlan(std::span<const int64_t> lengths, int64_t tokens) {
  const double t = std::log2(static_cast<double>(std::max<int64_t>(tokens, 1)));
  size_t best = 0;
  for (size_t i = 1; i < lengths.size(); ++i)
    if (std::abs(std::log2(static_cast<double>(lengths[i])) - t) < std::abs(std::log2(static_cast<double>(lengths[best])) - t)) best = i;
  return best;
}

std::string PrefillPlanSignature(const Graph& compiled) {
  std::string s;
  for (const Node& n : compiled.nodes) s += fmt::format("{},", OpName(n.op));
  for (const FusionGroup& grp : compiled.groups) {
    s += fmt::format("|{}:{}:{}:{}:", grp.kind, grp.decision.fuse, VariantName(grp.variant),
                     grp.matmul ? grp.matmul->gemv_max_rows : 0);
    for (int n : grp.nodes) s += fmt::format("{},", n);
  }
  return s;
}

FusionConfig StrategyConfig(Strategy s, FusionConfig base) {
  switch (s) {
    case Strategy::kNeverFuse:
      base.enable_fusion = false;
      break;
    case Strategy::kAlwaysFuse:
      base.enable_fusion = true;
      base.min_tensor_elements = 0;  // fuse every fusible group, however small (decode rows are)
      break;
    case Strategy::kSmartSchedule:
      base.enable_fusion = true;  // the scheduler decides per group
      break;
  }
  return base;
}

Engine::~Engine() = default;

Status Engine::CheckBackend(const std::string& backend) {
  if (backend == "cpu") return Status::Ok();
  if (backend != "cuda") return InvalidArgument(fmt::format("unknown backend '{}' (expected cpu or cuda)", backend));
  return CudaFreeBytes().status();
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Engine> e(new Engine());
  e->opts_ = opts;
  if (opts.backend != "cpu" && opts.backend != "cuda")
    return InvalidArgument(fmt::format("unknown backend '{}' (expected cpu or cuda)", opts.backend));
  if (opts.batch < 1) return InvalidArgument(fmt::format("batch must be >= 1, got {}", opts.batch));
  if (opts.batch > kMaxBatch)
    return InvalidArgument(fmt::format("batch {} exceeds the engine's maximum of {} sequences", opts.batch, kMaxBatch));
  if (opts.tensor_parallel < 1)
    return InvalidArgument(fmt::format("--tensor-parallel must be >= 1, got {}", opts.tensor_parallel));
  // The device first (fail fast): no weight is read for a run that cannot start.
  double device_free = 0;
  if (opts.backend == "cuda") {
    OPFUSE_ASSIGN_OR_RETURN(device_free, CudaFreeBytes());
  }

  std::optional<SafetensorsDir> dir;
  DType dt;
  if (!opts.model_dir.empty()) {
    OPFUSE_ASSIGN_OR_RETURN(e->config_, LoadConfigFile(opts.model_dir + "/config.json"));
    OPFUSE_ASSIGN_OR_RETURN(SafetensorsDir d, SafetensorsDir::Open(opts.model_dir));
    dir.emplace(std::move(d));
    OPFUSE_RETURN_IF_ERROR(CheckWeights(e->config_, *dir));
    e->model_name_ = opts.model_dir;
    dt = FromSt(ConfigStDType(e->config_, &*dir));
  } else {
    const std::string name = !opts.builtin.empty() ? opts.builtin : opts.backend == "cuda" ? "tinyllama-1.1b" : "tiny";
    OPFUSE_ASSIGN_OR_RETURN(e->config_, BuiltinConfig(name));
    e->model_name_ = "builtin:" + name;
    dt = opts.backend == "cuda" ? DType::kBF16 : DType::kF32;
  }
  if (!opts.dtype.empty()) {
    OPFUSE_ASSIGN_OR_RETURN(dt, ParseModelDType(opts.dtype));
  }
  e->dtype_ = dt;
  const LlamaConfig& c = e->config_;
  const int64_t world = opts.tensor_parallel;
  OPFUSE_RETURN_IF_ERROR(CheckTensorParallel(c, world));  // before any weight is read
  if (opts.max_context < 0) return InvalidArgument(fmt::format("max context must be >= 0, got {}", opts.max_context));
  e->context_ = ContextFor(c, opts.max_context);
  e->context_capped_ = opts.max_context == 0 && c.max_position_embeddings > kDefaultContextCap;
  OPFUSE_RETURN_IF_ERROR(CheckContext(c, e->context_));  // at most max_position_embeddings; before any weight is read
  // What this run will hold, against what the host (and the GPU) has: refused before any allocation.
  e->memory_ = EstimateMemory(c, dt, opts.batch, e->context_);
  const MemoryEstimate& m = e->memory_;
  if (opts.backend == "cuda") {
    // Under tensor parallelism each GPU holds about its share (the replicated embedding aside).
    OPFUSE_RETURN_IF_ERROR(CheckFits(m, m.total() / static_cast<double>(world), device_free, "the GPU", e->context_, opts.batch));
    OPFUSE_RETURN_IF_ERROR(CheckFits(m, m.weights + m.rope, HostAvailableBytes(), "the host", e->context_, opts.batch));
  } else {
    OPFUSE_RETURN_IF_ERROR(CheckFits(m, m.total(), HostAvailableBytes(), "the host", e->context_, opts.batch));
  }
  e->lengths_.assign(opts.batch, 0);

  RunnerSetup s;
  s.config = c;
  s.dtype = dt;
  s.batch = opts.batch;
  s.context = e->context_;
  OPFUSE_RETURN_IF_ERROR(LoadParams(c, dir ? &*dir : nullptr, opts.weight_seed, dt, &s.params));
  const RopeTables rope = ComputeRopeTables(c, e->context_);
  for (auto [name, src] : {std::pair{kRopeCos, &rope.cos}, std::pair{kRopeSin, &rope.sin}}) {
    HostTensor t(dt, {e->context_, c.head_dim});
    for (size_t i = 0; i < src->size(); ++i) t.set(static_cast<int64_t>(i), (*src)[i]);
    s.params[name] = std::move(t);
  }

  // A rank's graphs (rank 0 of 1 without tensor parallelism).
  auto build_graphs = [&](RunnerSetup& rs, const TensorParallel& tp) -> Status {
    GraphOptions go;
    go.cache_len = e->context_;
    go.dtype = dt;
    go.tp = tp;
    rs.kv_heads = LocalKvHeads(c, tp.world);
    go.batch = 1;
    OPFUSE_ASSIGN_OR_RETURN(rs.prefill, BuildPrefillGraph(c, go));
    go.batch = opts.batch;
    go.with_argmax = true;
    OPFUSE_ASSIGN_OR_RETURN(rs.decode, BuildDecodeGraph(c, go));
    return Status::Ok();
  };

  OPFUSE_ASSIGN_OR_RETURN(FusionConfig base, FusionConfig::FromEnv());
  s.fusion = StrategyConfig(opts.strategy, base);
  scheduler::ProfileDb profile;  // empty: should_fuse's cost model with default constants
  if (opts.strategy == Strategy::kSmartSchedule) {
    if (!opts.profile_path.empty()) {
      OPFUSE_ASSIGN_OR_RETURN(profile, scheduler::ProfileDb::Load(opts.profile_path));
    }
    s.profile = &profile;
    s.prefill_lengths = e->prefill_lengths_ = PrefillPlanLengths(e->context_);
  } else if (!opts.profile_path.empty()) {
    return InvalidArgument(fmt::format("a profile only applies to the smart strategy, not {}", StrategyName(opts.strategy)));
  }
  s.background_compile = opts.background_compile;
  e->load_ms_ = MsSince(t0);
  if (world > 1) {  // one runner per rank: a copy of the setup with its own graphs and shards
    std::map<std::string, HostTensor> full = std::move(s.params);
    s.params.clear();
    std::vector<RunnerSetup> setups;
    for (int64_t r = 0; r < world; ++r) {
      RunnerSetup rs = s;
      OPFUSE_RETURN_IF_ERROR(build_graphs(rs, TensorParallel{r, world}));
      rs.params = ShardParams(c, full, TensorParallel{r, world});
      setups.push_back(std::move(rs));
    }
    full.clear();  // the shards are copies
    if (opts.backend == "cuda") {
      OPFUSE_ASSIGN_OR_RETURN(e->runner_, MakeTensorParallelCudaRunner(std::move(setups)));
    } else {
      std::vector<std::unique_ptr<Runner>> ranks;
      for (RunnerSetup& rs : setups) {
        OPFUSE_ASSIGN_OR_RETURN(std::unique_ptr<Runner> runner, MakeCpuRunner(std::move(rs)));
        ranks.push_back(std::move(runner));
      }
      OPFUSE_ASSIGN_OR_RETURN(e->runner_, MakeTensorParallelCpuRunner(std::move(ranks)));
    }
  } else {
    OPFUSE_RETURN_IF_ERROR(build_graphs(s, TensorParallel{0, 1}));
    if (opts.backend == "cuda") {
      OPFUSE_ASSIGN_OR_RETURN(e->runner_, MakeCudaRunner(std::move(s)));
    } else {
      OPFUSE_ASSIGN_OR_RETURN(e->runner_, MakeCpuRunner(std::move(s)));
    }
  }
  e->compile_ms_ = e->runner_->compile_ms();
  e->load_ms_ = MsSince(t0) - e->compile_ms_;
  return e;
}

std::string Engine::device() const { return runner_->device(); }
int Engine::kernels_per_decode_step() const { return runner_->kernels_per_decode_step(); }
int Engine::kernels_per_prefill() const { return runner_->kernels_per_prefill(); }
int64_t Engine::collectives() const { return runner_->collectives(); }
double Engine::collective_ms() const { return runner_->collective_ms(); }
StatusOr<std::map<std::string, double>> Engine::DecodeAllReduceUs() {
  return runner_->AllReduceUs(batch(), config_.hidden_size, dtype_);
}
const Graph& Engine::prefill_graph(int64_t tokens) const { return runner_->prefill_graph(tokens); }
int64_t Engine::prefill_plan_length(int64_t tokens) const {
  return prefill_lengths_.empty() ? 0 : prefill_lengths_[NearestPrefillPlan(prefill_lengths_, tokens)];
}
int Engine::prefill_plans() const { return runner_->prefill_plans(); }
const Graph& Engine::decode_graph() const { return runner_->decode_graph(); }
void Engine::Reset() { std::fill(lengths_.begin(), lengths_.end(), 0); }

StatusOr<std::vector<float>> Engine::Prefill(int64_t row, std::span<const int32_t> ids) {
  if (row < 0 || row >= batch()) return InvalidArgument(fmt::format("row {} out of range [0, {})", row, batch()));
  if (lengths_[row] != 0) return InvalidArgument(fmt::format("row {} already holds {} tokens (Reset first)", row, lengths_[row]));
  if (ids.empty()) return InvalidArgument("empty prompt: prefill needs at least one token");
  if (static_cast<int64_t>(ids.size()) > context_)
    return InvalidArgument(fmt::format("prompt of {} tokens is longer than the context of {} tokens", ids.size(), context_));
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= config_.vocab_size)
      return InvalidArgument(fmt::format("token id {} at position {} is out of range [0, {})", ids[i], i, config_.vocab_size));
  std::vector<float> logits;
  OPFUSE_RETURN_IF_ERROR(runner_->Prefill(row, ids, &logits));
  lengths_[row] = static_cast<int64_t>(ids.size());
  return logits;
}

Status Engine::Decode(std::span<const int32_t> tokens, std::vector<int32_t>* next, std::vector<float>* logits) {
  if (static_cast<int64_t>(tokens.size()) != batch())
    return InvalidArgument(fmt::format("decode needs {} tokens (one per row), got {}", batch(), tokens.size()));
  std::vector<int32_t> pos(batch());
  for (int64_t b = 0; b < batch(); ++b) {
    if (lengths_[b] >= context_)
      return InvalidArgument(fmt::format("row {} is full: {} tokens fill the context of {}", b, lengths_[b], context_));
    if (tokens[b] < 0 || tokens[b] >= config_.vocab_size)
      return InvalidArgument(fmt::format("token id {} of row {} is out of range [0, {})", tokens[b], b, config_.vocab_size));
    pos[b] = static_cast<int32_t>(lengths_[b]);
  }
  OPFUSE_RETURN_IF_ERROR(runner_->Decode(tokens, pos, next, logits));
  for (auto& l : lengths_) ++l;
  return Status::Ok();
}

StatusOr<GenerateResult> Engine::Generate(const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& g) {
  OPFUSE_RETURN_IF_ERROR(ValidateSamplingParams(g.sampling));
  if (static_cast<int64_t>(prompts.size()) != batch())
    return InvalidArgument(fmt::format("{} prompts for an engine of batch {}", prompts.size(), batch()));
  if (g.max_new_tokens < 0) return InvalidArgument(fmt::format("max new tokens must be >= 0, got {}", g.max_new_tokens));
  for (size_t b = 0; b < prompts.size(); ++b) {
    const int64_t n = static_cast<int64_t>(prompts[b].size());
    if (n > context_)
      return InvalidArgument(fmt::format("prompt {} has {} tokens, longer than the context of {} tokens", b, n, context_));
    // The last new token is sampled, never fed back: n + max_new_tokens - 1 positions are cached
    // (compared as max_new_tokens - 1 > context - n: no overflow for any int64 count).
    if (g.max_new_tokens > 0 && g.max_new_tokens - 1 > context_ - n)
      return InvalidArgument(fmt::format("prompt {} ({} tokens) + {} new tokens exceeds the context of {} tokens", b, n,
                                         g.max_new_tokens, context_));
  }
  Reset();
  GenerateResult r;
  r.tokens.assign(batch(), {});
  if (g.keep_logits) r.logits.assign(batch(), {});
  const int64_t V = config_.vocab_size;
  std::vector<Sampler> samplers;
  for (int64_t b = 0; b < batch(); ++b) samplers.emplace_back(g.sampling, static_cast<uint64_t>(b));
  std::vector<int32_t> cur(batch());
  std::vector<char> done(batch(), 0);
  auto is_eos = [&](int32_t t) {
    return std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(), t) != config_.eos_token_ids.end();
  };
  auto take = [&](int64_t b, int32_t tok) {
    if (done[b]) return;
    r.tokens[b].push_back(tok);
    if (g.stop_at_eos && is_eos(tok)) done[b] = 1;
  };

  auto t0 = std::chrono::steady_clock::now();
  for (int64_t b = 0; b < batch(); ++b) {
    OPFUSE_ASSIGN_OR_RETURN(std::vector<float> logits, Prefill(b, prompts[b]));
    if (g.max_new_tokens == 0) continue;
    cur[b] = static_cast<int32_t>(samplers[b].Sample(logits));
    if (g.keep_logits) r.logits[b].push_back(std::move(logits));
    take(b, cur[b]);
  }
  r.prefill_ms = MsSince(t0);

  t0 = std::chrono::steady_clock::now();
  const bool want_logits = g.keep_logits || !g.sampling.greedy();
  std::vector<int32_t> next;
  std::vector<float> logits;
  for (int64_t step = 1; step < g.max_new_tokens; ++step) {
    if (g.stop_at_eos && std::all_of(done.begin(), done.end(), [](char d) { return d != 0; })) break;
    OPFUSE_RETURN_IF_ERROR(Decode(cur, g.sampling.greedy() ? &next : nullptr, want_logits ? &logits : nullptr));
    ++r.decode_steps;
    for (int64_t b = 0; b < batch(); ++b) {
      std::span<const float> row;
      if (want_logits) row = std::span<const float>(logits.data() + b * V, V);
      cur[b] = g.sampling.greedy() ? next[b] : static_cast<int32_t>(samplers[b].Sample(row));
      if (g.keep_logits) r.logits[b].emplace_back(row.begin(), row.end());
      take(b, cur[b]);
    }
  }
  r.decode_ms = MsSince(t0);
  return r;
}

}  // namespace opfuse::llama
