// `opfuse generate`: run a Llama-family model (a Hugging Face directory, or a built-in config with
// deterministic random weights) through the engine (src/model/llama/engine.h) and print the new
// tokens and a timing line.
//
//   opfuse generate [--model DIR | --config NAME] [--prompt TEXT | --ids 1,2,3]... [--max-new-tokens N]
//                   [--backend cpu|cuda] [--strategy never|always|smart] [--seed N] [--temperature F]
//                   [--top-k N] [--top-p F] [--batch N] [--max-context N] [--dtype f32|f16|bf16]
//                   [--profile FILE] [--stop-at-eos] [--dump-logits FILE] [--tensor-parallel N]
//
// Each --prompt / --ids is one sequence; --batch N repeats them (cyclically) to N sequences, which
// are prefilled one by one and decoded together. --dump-logits writes every step's logits as JSON
// (tools/hf_compare.py reads it); the file is written to FILE.tmp and renamed, so it is never
// half-written. Exit codes: 0 ok, 2 bad input (unknown strategy, bad ids, prompt longer than the
// context, --prompt without a tokenizer, no CUDA device), 1 internal failure.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "model/llama/engine.h"
#include "model/tokenizer.h"
#include "util/files.h"

namespace opfuse::cli {
namespace {

struct GenOptions {
  std::string model, config, backend = "cpu", strategy = "always", dtype, profile, dump_logits;
  std::vector<std::string> prompts, ids;
  int64_t max_new_tokens = 16, batch = 0, max_context = 0, top_k = 0, tensor_parallel = 1;
  uint64_t seed = 0, weight_seed = 0;
  double temperature = 0, top_p = 1.0;
  bool stop_at_eos = false;
};

constexpr const char* kCmd = "generate";

Status WriteLogits(const std::string& path, const llama::Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                   const llama::GenerateResult& r) {
  nlohmann::json j;
  j["model"] = e.model_name();
  j["backend"] = e.options().backend;
  j["device"] = e.device();
  j["dtype"] = DTypeName(e.dtype());
  j["strategy"] = e.strategy_name();
  j["prompts"] = prompts;
  j["tokens"] = r.tokens;
  j["logits"] = r.logits;  // [sequence][step][vocab]; step 0 = the prompt's last token
  if (Status s = WriteFileAtomic(path, j.dump() + "\n"); !s.ok())
    return InvalidArgument(fmt::format("--dump-logits {}", s.message()));
  return Status::Ok();
}

int GenerateMain(const GenOptions& o) {
  if (!o.model.empty() && !o.config.empty())
    return Fail(kCmd, InvalidArgument("--model and --config are exclusive (--config picks a built-in model)"));
  auto strategy = llama::ParseStrategy(o.strategy);
  if (!strategy.ok()) return Fail(kCmd, strategy.status());
  llama::GenerateOptions g;
  g.max_new_tokens = o.max_new_tokens;
  g.sampling = {o.temperature, o.top_k, o.top_p, o.seed};
  g.stop_at_eos = o.stop_at_eos;
  g.keep_logits = !o.dump_logits.empty();
  if (Status s = llama::ValidateSamplingParams(g.sampling); !s.ok()) return Fail(kCmd, s);
  if (o.max_new_tokens < 0) return Fail(kCmd, InvalidArgument("--max-new-tokens must be >= 0"));
  if (o.batch < 0) return Fail(kCmd, InvalidArgument("--batch must be >= 1"));
  if (o.batch > llama::kMaxBatch)
    return Fail(kCmd, InvalidArgument(fmt::format("--batch {} exceeds the engine's maximum of {} sequences", o.batch,
                                                  llama::kMaxBatch)));
  // Every output path is checked before any weight is read.
  if (!o.dump_logits.empty())
    if (Status s = CheckOutputFile("--dump-logits", o.dump_logits); !s.ok()) return Fail(kCmd, s);

  llama::EngineOptions eo;
  eo.model_dir = o.model;
  eo.builtin = o.config;
  eo.backend = o.backend;
  eo.strategy = *strategy;
  eo.max_context = o.max_context;
  eo.dtype = o.dtype;
  eo.profile_path = o.profile;
  eo.weight_seed = o.weight_seed;
  eo.tensor_parallel = o.tensor_parallel;
  // The config first (for vocab and the tokenizer), then the prompts, then the engine (compiles).
  llama::LlamaConfig cfg;
  if (!o.model.empty()) {
    auto c = llama::LoadConfigFile(o.model + "/config.json");
    if (!c.ok()) return Fail(kCmd, c.status());
    cfg = *c;
  } else {
    auto c = llama::BuiltinConfig(!o.config.empty() ? o.config : o.backend == "cuda" ? "tinyllama-1.1b" : "tiny");
    if (!c.ok()) return Fail(kCmd, InvalidArgument(c.status().message()));
    cfg = *c;
  }
  std::unique_ptr<Tokenizer> tok;
  if (!o.model.empty()) {
    auto t = Tokenizer::ForModelDir(o.model, cfg.vocab_size);
    if (!t.ok()) return Fail(kCmd, t.status());
    tok = std::move(*t);
  } else {
    tok = Tokenizer::IdsOnly(cfg.vocab_size, "built-in model: no tokenizer");
  }
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& text : o.prompts) {
    if (!tok->has_text())
      return Fail(kCmd, InvalidArgument(fmt::format("--prompt needs a tokenizer ({}); pass token ids with --ids", tok->reason())));
    auto ids = tok->Encode(text);
    if (!ids.ok()) return Fail(kCmd, ids.status());
    std::vector<int32_t> p;
    // A tokenizer.json decides its BOS itself (Llama-3: yes, Qwen2: no); with SentencePiece the
    // config's bos_token_id, as HF's Llama tokenizer does.
    const std::optional<int64_t> bos = tok->kind() == Tokenizer::Kind::kJson ? tok->prepend_bos() : cfg.bos_token_id;
    if (bos) p.push_back(static_cast<int32_t>(*bos));
    for (int64_t id : *ids) p.push_back(static_cast<int32_t>(id));
    prompts.push_back(std::move(p));
  }
  for (const auto& text : o.ids) {
    auto ids = Tokenizer::ParseIds(text, cfg.vocab_size);
    if (!ids.ok()) return Fail(kCmd, InvalidArgument("--ids: " + ids.status().message()));
    if (ids->empty()) return Fail(kCmd, InvalidArgument("--ids: empty list"));
    prompts.emplace_back(ids->begin(), ids->end());
  }
  if (prompts.empty()) prompts.push_back({static_cast<int32_t>(cfg.bos_token_id.value_or(0))});  // just BOS
  const int64_t given = static_cast<int64_t>(prompts.size());
  if (o.batch > 0 && o.batch < given)
    return Fail(kCmd, InvalidArgument(fmt::format("--batch {} is smaller than the {} prompts given", o.batch, given)));
  for (int64_t b = given; b < o.batch; ++b) prompts.push_back(prompts[b % given]);
  eo.batch = static_cast<int64_t>(prompts.size());

  auto engine = llama::Engine::Create(eo);
  if (!engine.ok()) return Fail(kCmd, engine.status());
  llama::Engine& e = **engine;
  auto r = e.Generate(prompts, g);
  if (!r.ok()) return Fail(kCmd, r.status());

  std::cout << fmt::format("model {} on {} ({}), {}, batch {}, context {}{}, memory ~{}\n", e.model_name(),
                           e.options().backend, e.device(), DTypeName(e.dtype()), e.batch(), e.context(),
                           e.context_capped() ? fmt::format(" (default cap; the model allows {}: --max-context)",
                                                            e.config().max_position_embeddings)
                                              : "",
                           llama::Bytes(e.memory().total()));
  if (e.tensor_parallel() > 1)
    std::cout << fmt::format("tensor parallel {}: {} collectives (all_reduce, all_gather) on rank 0{}\n", e.tensor_parallel(),
                             e.collectives(),
                             e.collective_ms() >= 0 ? fmt::format(", {:.3f} ms in them", e.collective_ms())
                                                    : std::string(" (on the GPUs: `opfuse bench e2e` times the all_reduce)"));
  for (size_t b = 0; b < prompts.size(); ++b) {
    std::vector<int64_t> ids(r->tokens[b].begin(), r->tokens[b].end());
    std::cout << fmt::format("[{}] prompt {} tokens -> {}\n", b, prompts[b].size(), Tokenizer::FormatIds(ids));
    if (tok->has_text()) {
      auto text = tok->Decode(ids);
      if (text.ok()) std::cout << fmt::format("[{}] text: {}\n", b, *text);
      else std::cerr << fmt::format("opfuse generate: decoding sequence {} to text failed: {}\n", b, text.status().message());
    }
  }
  int64_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
  std::cout << fmt::format(
      "strategy {}: prefill {:.3f} ms ({} tokens, {} kernels/prompt), decode {:.3f} ms/token ({} steps x batch {}), "
      "{} kernels/step, compile {:.1f} ms, load {:.1f} ms\n",
      e.strategy_name(), r->prefill_ms, prompt_tokens, e.kernels_per_prefill(), r->ms_per_token(), r->decode_steps, e.batch(),
      e.kernels_per_decode_step(), e.compile_ms(), e.load_ms());
  if (!o.dump_logits.empty()) {
    if (Status s = WriteLogits(o.dump_logits, e, prompts, *r); !s.ok()) return Fail(kCmd, s);
  }
  return 0;
}

}  // namespace

void RegisterGenerate(CLI::App& app) {
  auto o = std::make_shared<GenOptions>();
  auto* cmd = app.add_subcommand(
      "generate",
      "Generate tokens with a Llama-family model compiled by opfuse.\n"
      "The model is built as an opfuse graph (prefill + decode) and compiled under a fusion strategy:\n"
      "never (every primitive its own kernel), always (every fusible group fused) or smart (the scheduler:\n"
      "a measured --profile, else its cost model). Without --model a built-in config runs with deterministic\n"
      "random weights (tinyllama-1.1b on cuda, tiny on cpu), so the tokens are meaningless but reproducible.\n"
      "Greedy by default; --temperature > 0 samples (seeded by --seed, with --top-k / --top-p).\n"
      "Prints the new tokens (text when the model directory has a tokenizer.json or tokenizer.model) and a timing line:\n"
      "prefill ms, decode ms/token, kernels per decode step, compile ms.");
  cmd->add_option("--model", o->model, "Hugging Face model directory (config.json, *.safetensors, optional tokenizer.json or tokenizer.model)");
  cmd->add_option("--config", o->config, "built-in config instead of --model: tinyllama-1.1b or tiny (default: tinyllama-1.1b on cuda, tiny on cpu)");
  cmd->add_option("--prompt", o->prompts, "prompt text (needs the model's tokenizer; BOS prepended as the tokenizer does, see `opfuse tokenize`); repeat for a batch");
  cmd->add_option("--ids", o->ids, "prompt as token ids, e.g. 1,450,4996; repeat for a batch (default: the BOS token)");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate per sequence (default 16)");
  cmd->add_option("--backend", o->backend, "cpu or cuda (default cpu)");
  cmd->add_option("--strategy", o->strategy, "fusion strategy: never, always or smart (default always)");
  cmd->add_option("--seed", o->seed, "sampling seed (default 0)")->check(NonNegativeInteger);
  cmd->add_option("--temperature", o->temperature, "0 = greedy (default); > 0 samples from softmax(logits / T)");
  cmd->add_option("--top-k", o->top_k, "keep the k most likely tokens when sampling (0 = off)");
  cmd->add_option("--top-p", o->top_p, "keep the smallest set of tokens with this much probability (1 = off)");
  cmd->add_option("--batch", o->batch, "number of sequences: the prompts repeated cyclically (default: one per prompt)");
  cmd->add_option("--max-context", o->max_context, "KV cache length in tokens (default: the model's max_position_embeddings, at most 8192)");
  cmd->add_option("--dtype", o->dtype, "compute/weight dtype f32, f16 or bf16 (default: the checkpoint's; built-in: bf16 on cuda, f32 on cpu)");
  cmd->add_option("--weight-seed", o->weight_seed, "seed of the built-in random weights (as init-weights --seed; default 0)")->check(NonNegativeInteger);
  cmd->add_option("--profile", o->profile, "profile_result.json for --strategy smart (default: the cost model)");
  cmd->add_flag("--stop-at-eos", o->stop_at_eos, "stop a sequence at its end-of-sequence token");
  cmd->add_option("--tensor-parallel", o->tensor_parallel,
                  "split the model over N ranks, Megatron-style, one thread per rank (docs/tensor_parallel.md; cuda: rank r on GPU r, NCCL; default 1)");
  cmd->add_option("--dump-logits", o->dump_logits, "write every step's logits and tokens as JSON to this file");
  cmd->callback([o] { SetExitCode(GenerateMain(*o)); });
}

}  // namespace opfuse::cli
