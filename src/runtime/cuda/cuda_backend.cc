// The CUDA implementation of the Backend interface (runtime/backend.h): a thin adapter over
// CudaExecutable for callers that only have host tensors. Device-pointer, stream and CUDA-graph
// callers use CudaExecutable directly.
#include <memory>

#include "runtime/backend.h"
#include "runtime/cuda/executor.h"

namespace opfuse {

namespace {

class CudaHostExecutable final : public Executable {
 public:
  explicit CudaHostExecutable(std::unique_ptr<cuda::CudaExecutable> ex) : ex_(std::move(ex)) {}
  using Executable::Run;
  StatusOr<std::map<std::string, HostTensor>> Run(const std::map<std::string, HostTensor>& inputs,
                                                  const Bindings& bindings,
                                                  std::map<std::string, HostTensor>* state) override {
    return ex_->RunHost(inputs, bindings, state);
  }
  const Graph& graph() const override { return ex_->graph(); }
  int steps_per_run() const override { return ex_->kernels_per_run(); }

 private:
  std::unique_ptr<cuda::CudaExecutable> ex_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(cuda::DeviceInfo dev) : dev_(std::move(dev)) {}
  std::string name() const override { return "cuda"; }
  std::string device() const override { return dev_.ToString(); }
  StatusOr<std::unique_ptr<Executable>> Compile(const Graph& g, const CompileOptions& opts) override {
    cuda::ExecutorOptions eo;
    eo.config = opts.config;
    OPFUSE_ASSIGN_OR_RETURN(eo.variant, cuda::ParseVariant(opts.variant));
    OPFUSE_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaExecutable> ex, cuda::CudaExecutable::Create(g, eo));
    return std::unique_ptr<Executable>(new CudaHostExecutable(std::move(ex)));
  }

 private:
  cuda::DeviceInfo dev_;
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> MakeCudaBackend() {
  OPFUSE_ASSIGN_OR_RETURN(cuda::DeviceInfo dev, cuda::QueryDevice());
  return std::unique_ptr<Backend>(new CudaBackend(std::move(dev)));
}

}  // namespace opfuse
