// See opfuse_capi.h. Nothing here throws across the C boundary: every failure becomes a message.
#include "opfuse_capi.h"

#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "opfuse/graph.h"
#include "bench/cuda/op_runner.h"
#include "runtime/cuda/executor.h"

struct opfuse_capi_program {
  std::unique_ptr<opfuse::cuda::CudaExecutable> exe;
  std::vector<std::string> inputs, outputs;
};

namespace {

void SetError(char* err, size_t len, const std::string& m) {
  if (!err || len == 0) return;
  const size_t n = std::min(len - 1, m.size());
  std::memcpy(err, m.data(), n);
  err[n] = '\0';
}

}  // namespace

extern "C" opfuse_capi_program* opfuse_capi_create(const char* graph_text, const char* variant, char* err,
                                                   size_t err_len) {
  using namespace opfuse;
  try {
    if (!graph_text || !variant) {
      SetError(err, err_len, "graph_text and variant must not be NULL");
      return nullptr;
    }
    auto graph = ParseGraph(graph_text);
    if (!graph.ok()) {
      SetError(err, err_len, "graph: " + graph.status().message());
      return nullptr;
    }
    auto config = FusionConfig::FromEnv();
    if (!config.ok()) {
      SetError(err, err_len, config.status().message());
      return nullptr;
    }
    auto v = cuda::ParseVariant(variant);
    if (!v.ok()) {
      SetError(err, err_len, v.status().message());
      return nullptr;
    }
    auto exe = cuda::CudaExecutable::Create(*graph, bench::BenchExecutorOptions(*config, *v));
    if (!exe.ok()) {
      SetError(err, err_len, "create: " + exe.status().message());
      return nullptr;
    }
    auto p = std::make_unique<opfuse_capi_program>();
    p->exe = std::move(*exe);
    const Graph& g = p->exe->graph();
    for (int id : g.inputs) p->inputs.push_back(g.values[id].name);
    for (int id : g.outputs) p->outputs.push_back(g.values[id].name);
    return p.release();
  } catch (const std::exception& e) {
    SetError(err, err_len, std::string("internal error: ") + e.what());
  } catch (...) {
    SetError(err, err_len, "internal error");
  }
  return nullptr;
}

extern "C" int opfuse_capi_num_inputs(const opfuse_capi_program* p) { return p ? static_cast<int>(p->inputs.size()) : -1; }
extern "C" int opfuse_capi_num_outputs(const opfuse_capi_program* p) { return p ? static_cast<int>(p->outputs.size()) : -1; }
extern "C" const char* opfuse_capi_input_name(const opfuse_capi_program* p, int i) {
  return p && i >= 0 && i < static_cast<int>(p->inputs.size()) ? p->inputs[i].c_str() : nullptr;
}
extern "C" const char* opfuse_capi_output_name(const opfuse_capi_program* p, int i) {
  return p && i >= 0 && i < static_cast<int>(p->outputs.size()) ? p->outputs[i].c_str() : nullptr;
}
extern "C" int opfuse_capi_kernels_per_run(const opfuse_capi_program* p) { return p ? p->exe->kernels_per_run() : -1; }

extern "C" int opfuse_capi_run(opfuse_capi_program* p, const void* const* inputs, void* const* outputs, void* stream,
                               char* err, size_t err_len) {
  try {
    if (!p || (!inputs && !p->inputs.empty()) || (!outputs && !p->outputs.empty())) {
      SetError(err, err_len, "program, inputs and outputs must not be NULL");
      return 1;
    }
    std::vector<const void*> in(inputs, inputs + p->inputs.size());
    std::vector<void*> out(outputs, outputs + p->outputs.size());
    const opfuse::Status st = p->exe->Run(in, out, opfuse::Bindings{}, static_cast<cudaStream_t>(stream));
    if (!st.ok()) {
      SetError(err, err_len, st.message());
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    SetError(err, err_len, std::string("internal error: ") + e.what());
  } catch (...) {
    SetError(err, err_len, "internal error");
  }
  return 1;
}

extern "C" void opfuse_capi_destroy(opfuse_capi_program* p) { delete p; }
