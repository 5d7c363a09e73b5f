// JIT driver (see jit_compiler.h).
#include "jit/jit_compiler.h"

#include <atomic>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "jit/jit_env.h"
#include "jit/nvrtc_compiler.h"

namespace opfuse::jit {

std::string DefaultArch() {
  if (const char* env = std::getenv("OPFUSE_ARCH"); env && *env) return env;
  return "sm_90";
}

JitCompiler::JitCompiler(KernelCache& cache, JitOptions opts) : cache_(cache), opts_(std::move(opts)) {
  arch_ = opts_.arch.empty() ? DefaultArch() : opts_.arch;
}

namespace {
// The emitter's knobs (jit_env.h: read once, reported when set, rejected with the reason):
//   OPFUSE_JIT_DECODE_ROW_THREADS  the decode row shape's widest row group, a power of two in [1, 1024]
//   OPFUSE_JIT_PREFILL_ROW_WORDS   the prefill row shape's registers of row data per thread, 1..64
//   OPFUSE_JIT_EARLY_STORE=0       row kernels store every output in the epilogue
//   OPFUSE_JIT_EVICT_FIRST=0       decode row functions load rows without evict-first hints
//   OPFUSE_JIT_HALF_PACKS=0        decode row functions keep one 16-byte pack per thread
//   OPFUSE_JIT_POINTWISE_DECODE=0  pointwise kernels have no decode function
//   OPFUSE_JIT_PDL=0               kernels have no PDL prologue (and launch without PDL)
//   OPFUSE_JIT_CHANNEL_LAUNDER=0   prefill row functions let the compiler hoist the per-column values
//   OPFUSE_JIT_CACHE_PASS_VALUES=0 row functions recompute a pass's exponentials in the epilogue
// (codegen::EmitOptions; all for tuning sweeps and A/B timing).
int DecodeRowThreads() {
  static const int v = EnvKnob("OPFUSE_JIT_DECODE_ROW_THREADS", codegen::kDefaultDecodeRowThreads, "a power of two in [1, 1024]",
                               [](long n) { return n >= 1 && n <= 1024 && !(n & (n - 1)); },
                               [](long n) { return fmt::format("decode row kernels use row groups of up to {} threads", n); });
  return v;
}
int PrefillRowWords() {
  static const int v = EnvKnob("OPFUSE_JIT_PREFILL_ROW_WORDS", 0, "an integer in [1, 64]", [](long n) { return n >= 1 && n <= 64; },
                               [](long n) { return fmt::format("prefill row kernels hold ~{} registers of row data per thread", n); });
  return v;
}
bool EarlyStore() {
  static const bool v = EnvSwitch("OPFUSE_JIT_EARLY_STORE", "outputs that need no reduction are stored in the epilogue");
  return v;
}
bool DecodeEvictFirst() {
  static const bool v = EnvSwitch("OPFUSE_JIT_EVICT_FIRST", "decode row kernels load rows without evict-first hints");
  return v;
}
bool DecodeHalfPacks() {
  static const bool v = EnvSwitch("OPFUSE_JIT_HALF_PACKS", "decode row kernels keep 16-byte packs");
  return v;
}
bool PointwiseDecode() {
  static const bool v = EnvSwitch("OPFUSE_JIT_POINTWISE_DECODE", "pointwise kernels have no decode function");
  return v;
}

bool ChannelLaunder() {
  static const bool v = EnvSwitch("OPFUSE_JIT_CHANNEL_LAUNDER", "prefill row kernels let the compiler hoist per-column values");
  return v;
}

bool CachePassValues() {
  static const bool v = EnvSwitch("OPFUSE_JIT_CACHE_PASS_VALUES", "row kernels recompute a pass's exponentials in later passes");
  return v;
}

bool JitPdl() {
  static const bool v = EnvSwitch("OPFUSE_JIT_PDL", "JIT kernels have no PDL prologue and launch without PDL");
  return v;
}

codegen::EmitOptions EmitOptionsFor(bool aligned) {
  codegen::EmitOptions o;
  o.aligned = aligned;
  o.max_threads = 256;
  o.decode_row_threads = DecodeRowThreads();
  o.prefill_row_words = PrefillRowWords();
  o.early_store = EarlyStore();
  o.decode_evict_first = DecodeEvictFirst();
  o.decode_half_packs = DecodeHalfPacks();
  o.pointwise_decode = PointwiseDecode();
  o.pdl = JitPdl();
  o.channel_launder = ChannelLaunder();
  o.cache_pass_values = CachePassValues();
  return o;
}

KernelKey KeyFor(const std::string& source, const std::string& arch) {
  std::string options;
  for (const auto& o : NvrtcOptions(arch)) options += o + " ";
  return KernelKey{source, arch, NvrtcVersion(), options};
}
}  // namespace

StatusOr<KernelKey> JitCompiler::KeyForGroup(const Graph& g, const FusionGroup& group, bool aligned) const {
  OPFUSE_ASSIGN_OR_RETURN(codegen::Kernel k, codegen::BuildKernel(g, group));
  return KeyForKernel(k, aligned);
}

StatusOr<KernelKey> JitCompiler::KeyForKernel(const codegen::Kernel& k, bool aligned) const {
  OPFUSE_ASSIGN_OR_RETURN(codegen::EmittedKernel e, codegen::EmitCuda(k, EmitOptionsFor(aligned)));
  return KeyFor(e.source, arch_);
}

StatusOr<JitKernel> JitCompiler::CompileKernel(const codegen::Kernel& k, bool aligned) const {
  JitKernel out;
  out.kernel = k;
  OPFUSE_ASSIGN_OR_RETURN(out.emitted, codegen::EmitCuda(k, EmitOptionsFor(aligned)));
  out.key = KeyFor(out.emitted.source, arch_);
  const std::string& src = out.emitted.source;
  const std::string& fn = out.emitted.function;
  const std::string arch = arch_;
  auto bin = cache_.GetOrCompile(out.key, [&src, &fn, &arch]() -> StatusOr<CachedKernel> {
    OPFUSE_ASSIGN_OR_RETURN(NvrtcOutput o, CompileCuda(src, fn, arch));
    CachedKernel ck;
    ck.binary = std::move(o.cubin);
    ck.log = std::move(o.log);
    ck.compile_ms = o.compile_ms;
    return ck;
  });
  if (!bin.ok()) return bin.status();
  out.binary = *bin;
  return out;
}

StatusOr<JitKernel> JitCompiler::CompileGroup(const Graph& g, const FusionGroup& group, bool aligned) const {
  OPFUSE_ASSIGN_OR_RETURN(codegen::Kernel k, codegen::BuildKernel(g, group));
  return CompileKernel(k, aligned);
}

std::vector<JitGroupResult> JitCompiler::CompileGraph(const Graph& g) const {
  std::vector<int> todo;
  for (size_t i = 0; i < g.groups.size(); ++i)
    if (g.groups[i].decision.fuse) todo.push_back(static_cast<int>(i));
  std::vector<JitGroupResult> results(todo.size());
  int nthreads = opts_.threads > 0 ? opts_.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  nthreads = std::min<int>(nthreads, static_cast<int>(todo.size()));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < todo.size(); i = next++) {
      results[i].group = todo[i];
      auto k = CompileGroup(g, g.groups[todo[i]], opts_.aligned);
      if (k.ok()) results[i].kernel = std::move(k).value();
      else results[i].status = k.status();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < nthreads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return results;
}

}  // namespace opfuse::jit
