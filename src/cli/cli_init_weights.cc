// `opfuse init-weights --config tinyllama-1.1b|tiny|FILE.json --out DIR [--seed N] [--dtype bf16|f16|f32] [--force]`
//
// Writes a loadable Hugging Face-style model directory (config.json + model.safetensors) with
// deterministic random weights (llama/weights.h: normal std 0.02, norms 1; same seed → same bytes).
// Atomic at the directory level: everything is written into DIR.tmp.<pid>, re-opened and checked
// with the loader and the weights check, and only then renamed to DIR; on any failure DIR.tmp.<pid>
// is removed and DIR is untouched. A non-empty DIR is refused unless --force (then the old DIR is
// moved aside, the new one renamed in, and the old one deleted). A progress bar goes to stderr for
// checkpoints over 64 MB. Exit codes: 0 ok, 2 bad input (unknown config, bad dtype, DIR not empty),
// 1 internal failure (I/O).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "cli/cli.h"
#include "model/llama/config.h"
#include "model/llama/weights.h"
#include "model/safetensors.h"

namespace opfuse::cli {
namespace {

namespace fs = std::filesystem;

struct InitOptions {
  std::string config;
  std::string out;
  uint64_t seed = 0;
  std::string dtype;  // empty: the config's torch_dtype
  bool force = false;
};

StatusOr<StDType> ParseDType(const std::string& s) {
  if (s == "bf16") return StDType::kBF16;
  if (s == "f16") return StDType::kF16;
  if (s == "f32") return StDType::kF32;
  return InvalidArgument(fmt::format("--dtype '{}': expected bf16, f16 or f32", s));
}

class Progress {
 public:
  explicit Progress(bool on) : on_(on), tty_(::isatty(2)) {}
  void operator()(uint64_t done, uint64_t total) {
    if (!on_ || total == 0) return;
    const int pct = static_cast<int>(done * 100 / total);
    if (tty_) {
      const int w = 40, fill = pct * w / 100;
      std::cerr << fmt::format("\rinit-weights [{}{}] {:3d}% {:.0f}/{:.0f} MB", std::string(fill, '#'), std::string(w - fill, ' '),
                               pct, done / 1e6, total / 1e6)
                << std::flush;
      if (done == total) std::cerr << "\n";
    } else if (pct / 10 > last_ / 10 || done == total) {
      std::cerr << fmt::format("init-weights: {}% ({:.0f}/{:.0f} MB)\n", pct, done / 1e6, total / 1e6);
    }
    last_ = pct;
  }

 private:
  bool on_, tty_;
  int last_ = -1;
};

int InitMain(const InitOptions& o) {
  // A built-in name, or a config.json of any supported family (what transformers wrote, say).
  const bool is_file = o.config.ends_with(".json") || o.config.find('/') != std::string::npos;
  auto cfg = is_file ? llama::LoadConfigFile(o.config) : llama::BuiltinConfig(o.config);
  if (!cfg.ok()) return Fail("init-weights", InvalidArgument(cfg.status().message()));
  StDType dtype = llama::ConfigStDType(*cfg);
  if (!o.dtype.empty()) {
    auto d = ParseDType(o.dtype);
    if (!d.ok()) return Fail("init-weights", d.status());
    dtype = *d;
  }
  const fs::path out = fs::path(o.out).lexically_normal();
  if (out.empty() || out == "." || out == "/") return Fail("init-weights", InvalidArgument(fmt::format("--out '{}': not a usable directory", o.out)));
  std::error_code ec;
  const bool exists = fs::exists(out, ec);
  if (exists && !fs::is_directory(out, ec))
    return Fail("init-weights", InvalidArgument(fmt::format("--out {}: exists and is not a directory", out.string())));
  if (exists && !fs::is_empty(out, ec) && !o.force)
    return Fail("init-weights", InvalidArgument(fmt::format("--out {}: directory is not empty (use --force to replace it)", out.string())));
  if (!out.parent_path().empty() && !fs::is_directory(out.parent_path(), ec))
    return Fail("init-weights", NotFound(fmt::format("--out {}: parent directory {} does not exist", out.string(), out.parent_path().string())));

  const fs::path tmp = out.string() + fmt::format(".tmp.{}", ::getpid());
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec))
    return Fail("init-weights", InvalidArgument(fmt::format("cannot create {}: {}", tmp.string(), ec.message())));
  auto cleanup_fail = [&](const Status& s) {
    std::error_code e2;
    fs::remove_all(tmp, e2);
    return Fail("init-weights", s);
  };
  uint64_t bytes = static_cast<uint64_t>(cfg->ParameterCount()) * StDTypeSize(dtype);
  Progress progress(bytes > (64ull << 20));
  Status s = llama::WriteRandomWeights(*cfg, tmp.string(), o.seed, dtype,
                                       [&](uint64_t d, uint64_t t) { progress(d, t); });
  if (!s.ok()) return cleanup_fail(s);
  // Read back what was written: the directory must load and pass the weights check.
  {
    auto cfg2 = llama::LoadConfigFile((tmp / "config.json").string());
    if (!cfg2.ok()) return cleanup_fail(Internal("written config.json does not load: " + cfg2.status().message()));
    auto dir = SafetensorsDir::Open(tmp.string());
    if (!dir.ok()) return cleanup_fail(Internal("written weights do not load: " + dir.status().message()));
    Status chk = llama::CheckWeights(*cfg2, *dir);
    if (!chk.ok()) return cleanup_fail(Internal("written weights fail the check: " + chk.message()));
  }
  if (exists) {
    const fs::path old = out.string() + fmt::format(".old.{}", ::getpid());
    fs::rename(out, old, ec);
    if (ec) return cleanup_fail(Internal(fmt::format("moving {} aside: {}", out.string(), ec.message())));
    fs::rename(tmp, out, ec);
    if (ec) {
      std::error_code e2;
      fs::rename(old, out, e2);
      return cleanup_fail(Internal(fmt::format("renaming {} to {}: {}", tmp.string(), out.string(), ec.message())));
    }
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp, out, ec);
    if (ec) return cleanup_fail(Internal(fmt::format("renaming {} to {}: {}", tmp.string(), out.string(), ec.message())));
  }
  std::cout << fmt::format("wrote {}: config '{}', {} tensors, {} parameters, {} ({:.1f} MB), seed {}\n", out.string(), o.config,
                           llama::ExpectedTensors(*cfg).size(), cfg->ParameterCount(), StDTypeName(dtype), bytes / 1e6, o.seed);
  return 0;
}

}  // namespace

void RegisterInitWeights(CLI::App& app) {
  auto o = std::make_shared<InitOptions>();
  auto* cmd = app.add_subcommand(
      "init-weights",
      "Write a model directory (config.json + model.safetensors) with deterministic random weights.\n"
      "Weights are normal(0, 0.02), norms 1; the same --seed gives the same bytes. The directory is written\n"
      "as OUT.tmp.<pid>, checked by loading it back, then renamed to OUT; a non-empty OUT needs --force.");
  cmd->add_option("--config", o->config,
                  "built-in config: tinyllama-1.1b (TinyLlama-1.1B shapes, ~2.2 GB in bf16) or tiny (~400 KB), or a\n"
                  "config.json file of any supported family (llama, mistral, qwen2, qwen3; docs/model_format.md)")
      ->required();
  cmd->add_option("--out", o->out, "output directory (created; must be empty or absent unless --force)")->required();
  cmd->add_option("--seed", o->seed, "random seed, a non-negative integer (default 0)")->check(NonNegativeInteger);
  cmd->add_option("--dtype", o->dtype, "weight dtype: bf16, f16 or f32 (default: the config's, bf16 for tinyllama-1.1b, f32 for tiny)");
  cmd->add_flag("--force", o->force, "replace a non-empty OUT");
  cmd->callback([o] { SetExitCode(InitMain(*o)); });
}

}  // namespace opfuse::cli
