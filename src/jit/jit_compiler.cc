// JIT driver (see jit_compiler.h).
#include "jit/jit_compiler.h"

#include <atomic>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

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
// The emitter's options are EmitOptions' defaults here (the tuned rules); tests and dev/ sweeps set
// other values through EmitOptions directly, never through the environment (docs/knobs.md).
// `arch` "sm_XY[a]": thread block clusters from sm_90 on, asynchronous copies (staged rows) from sm_80.
codegen::EmitOptions EmitOptionsFor(bool aligned, const std::string& arch) {
  codegen::EmitOptions o;
  o.aligned = aligned;
  o.max_threads = 256;
  o.clusters = ArchNumber(arch) >= 90;
  o.stage = ArchNumber(arch) >= 80;
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
  OPFUSE_ASSIGN_OR_RETURN(codegen::EmittedKernel e, codegen::EmitCuda(k, EmitOptionsFor(aligned, arch_)));
  return KeyFor(e.source, arch_);
}

StatusOr<JitKernel> JitCompiler::CompileKernel(const codegen::Kernel& k, bool aligned) const {
  JitKernel out;
  out.kernel = k;
  OPFUSE_ASSIGN_OR_RETURN(out.emitted, codegen::EmitCuda(k, EmitOptionsFor(aligned, arch_)));
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
