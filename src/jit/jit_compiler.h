// The JIT driver: fusion group -> kernel IR -> CUDA C -> (cache | NVRTC) -> CUBIN.
//
// Kernels are specialised on dtypes, static dims and alignment only, so the source — and hence
// the cache key — is the same for every token count: a graph run at 50 sequence lengths compiles
// each kernel once, and a second process finds them on disk. CompileGraph compiles every fused
// group of a graph in parallel threads (NVRTC is thread-safe per program); identical kernels in
// one graph are coalesced by the cache.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codegen/cuda_emitter.h"
#include "codegen/kernel_ir.h"
#include "jit/kernel_cache.h"
#include "opfuse/graph.h"

namespace opfuse::jit {

struct JitOptions {
  std::string arch;   // "" = the device's arch when there is one, else sm_90
  bool aligned = true;
  int threads = 0;    // parallel compiles; 0 = hardware concurrency
};

struct JitKernel {
  codegen::Kernel kernel;
  codegen::EmittedKernel emitted;
  std::shared_ptr<const CachedKernel> binary;
  KernelKey key;
};

struct JitGroupResult {
  int group = -1;
  Status status;                   // not ok: the group runs unfused (reason logged by the caller)
  std::optional<JitKernel> kernel;
};

// The arch compiled for when none is given: OPFUSE_ARCH when set, else sm_90 (the CUDA executor
// passes its device's arch explicitly).
std::string DefaultArch();

class JitCompiler {
 public:
  JitCompiler(KernelCache& cache, JitOptions opts = {});
  const std::string& arch() const { return arch_; }
  StatusOr<JitKernel> CompileKernel(const codegen::Kernel& k, bool aligned) const;
  StatusOr<JitKernel> CompileGroup(const Graph& g, const FusionGroup& group, bool aligned) const;
  // The cache key CompileGroup would use, without compiling (to ask KernelCache::Contains).
  StatusOr<KernelKey> KeyForGroup(const Graph& g, const FusionGroup& group, bool aligned) const;
  // The cache key CompileKernel(k, aligned) would use, without compiling.
  StatusOr<KernelKey> KeyForKernel(const codegen::Kernel& k, bool aligned) const;
  // Every group of `g` whose decision is fuse, in parallel; results in group order.
  std::vector<JitGroupResult> CompileGraph(const Graph& g) const;

 private:
  KernelCache& cache_;
  JitOptions opts_;
  std::string arch_;
};

}  // namespace opfuse::jit
