// MakeBackend and the CPU backend (backend.h). The CUDA backend lives in runtime/cuda/cuda_backend.cc.
#include "runtime/backend.h"

#include <fmt/format.h>

#include "passes/pipeline.h"
#include "runtime/cpu/cpu_executor.h"

namespace opfuse {

#ifdef OPFUSE_WITH_CUDA
StatusOr<std::unique_ptr<Backend>> MakeCudaBackend();  // cuda/cuda_backend.cc
#endif

namespace {

// The reference: pipeline, then every group on the CPU with f32 intermediates inside fused groups.
class CpuExecutable final : public Executable {
 public:
  explicit CpuExecutable(Graph g) : graph_(std::move(g)) {}
  using Executable::Run;
  StatusOr<std::map<std::string, HostTensor>> Run(const std::map<std::string, HostTensor>& inputs,
                                                  const Bindings& bindings,
                                                  std::map<std::string, HostTensor>* state) override {
    return RunGraphCpu(graph_, inputs, CpuRunOptions{bindings, true, state});
  }
  const Graph& graph() const override { return graph_; }
  int steps_per_run() const override {
    int n = 0;
    for (const auto& grp : graph_.groups) n += grp.decision.fuse ? 1 : static_cast<int>(grp.nodes.size());
    return n;
  }

 private:
  Graph graph_;
};

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::string device() const override { return "cpu (reference, f32 accumulation)"; }
  StatusOr<std::unique_ptr<Executable>> Compile(const Graph& g, const CompileOptions& opts) override {
    Graph copy = g;
    PassContext ctx;
    ctx.config = opts.config;
    OPFUSE_RETURN_IF_ERROR(RunPipeline(copy, ctx));
    return std::unique_ptr<Executable>(new CpuExecutable(std::move(copy)));
  }
};

}  // namespace

std::vector<std::string> BackendNames() { return {"cpu", "cuda"}; }

StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& name) {
  if (name == "cpu") return std::unique_ptr<Backend>(new CpuBackend());
  if (name == "cuda") {
#ifdef OPFUSE_WITH_CUDA
    return MakeCudaBackend();
#else
    return Unavailable("no CUDA device: this opfuse was built without the CUDA backend (OPFUSE_CUDA=OFF)");
#endif
  }
  return InvalidArgument(fmt::format("unknown backend '{}' (expected cpu or cuda)", name));
}

}  // namespace opfuse
