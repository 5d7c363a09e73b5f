// The Backend interface: one way to compile and run a Graph, with a CPU and a CUDA implementation.
//
// Design (DESIGN.md "Backends and execution"): callers that only need "run this graph on these
// host tensors" — the CLI, tests, the engine's CPU path — go through Backend/Executable, so the
// same code runs on either device. The CPU backend is the reference (f32 accumulation; fused
// groups run with f32 intermediates exactly as a fused kernel would). The CUDA backend wraps
// cuda::CudaExecutable; code that needs device pointers, streams or CUDA graphs uses that class
// directly. MakeBackend("cuda") on a machine without a GPU is Unavailable("no CUDA device: ...").
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "opfuse/config.h"
#include "opfuse/graph.h"
#include "ir/host_tensor.h"

namespace opfuse {

struct CompileOptions {
  FusionConfig config;
  std::string variant = "auto";  // CUDA: auto | unfused | library | jit (ignored by the CPU backend)
};

class Executable {
 public:
  virtual ~Executable() = default;
  // Graph inputs and params by name; symbols bound from their shapes (plus `bindings`).
  // `state`: state inputs (graph inputs an op writes in place — StateInputs(graph()), e.g.
  // kv_attention's k_cache/v_cache) by name; each one found there is read from and updated in that
  // tensor, so a KV cache lives on across runs. A state input passed in `inputs` instead is used
  // by copy and its update discarded: `inputs` is never modified. See CpuRunOptions::state for
  // the error rules (a name that is not a state input, or given twice).
  virtual StatusOr<std::map<std::string, HostTensor>> Run(const std::map<std::string, HostTensor>& inputs,
                                                          const Bindings& bindings,
                                                          std::map<std::string, HostTensor>* state) = 0;
  StatusOr<std::map<std::string, HostTensor>> Run(const std::map<std::string, HostTensor>& inputs,
                                                  const Bindings& bindings = {}) {
    return Run(inputs, bindings, nullptr);
  }
  virtual const Graph& graph() const = 0;  // after the pipeline
  // Kernels (CUDA) or node groups (CPU) one run executes.
  virtual int steps_per_run() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::string device() const = 0;  // "cpu" / "NVIDIA H200 (sm_90, ...)"
  virtual StatusOr<std::unique_ptr<Executable>> Compile(const Graph& g, const CompileOptions& opts) = 0;
};

// "cpu" or "cuda"; InvalidArgument for another name, Unavailable for cuda without a GPU or build.
StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& name);
std::vector<std::string> BackendNames();  // the names this build knows

}  // namespace opfuse
