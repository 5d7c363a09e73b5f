// opfuse.Engine: the Llama-family engine (src/model/llama/engine.h) from Python.
//
// Design note: a thin wrapper — Engine::Create with EngineOptions from keyword arguments, and
// generate() with token ids in and token ids out (text goes through the tokenizer, which is not
// bound yet). The engine is built only when engine.h is in the tree (__has_include), so this file
// compiles while the engine is being written; without it opfuse.Engine raises UnavailableError
// saying so. The GIL is released while the engine runs.
#include <pybind11/stl.h>

#include "bindings.h"

#if __has_include("model/llama/engine.h")
#include "model/llama/engine.h"
#define OPFUSE_PY_HAVE_ENGINE 1
#endif

namespace opfuse::py_bind {

#ifdef OPFUSE_PY_HAVE_ENGINE
namespace {

class PyEngine {
 public:
  PyEngine(const std::string& model_dir, const std::string& backend, const std::string& strategy, int64_t batch,
           int64_t max_context, const std::string& dtype, uint64_t weight_seed, const std::string& builtin,
           const std::string& profile, int64_t tensor_parallel) {
    llama::EngineOptions o;
    o.model_dir = model_dir;
    o.backend = backend;
    o.strategy = Unwrap(llama::ParseStrategy(strategy));
    o.batch = batch;
    o.max_context = max_context;
    o.dtype = dtype;
    o.weight_seed = weight_seed;
    o.builtin = builtin;
    o.profile_path = profile;
    o.tensor_parallel = tensor_parallel;
    StatusOr<std::unique_ptr<llama::Engine>> e = Status(StatusCode::kInternal, "not created");
    {
      py::gil_scoped_release release;
      e = llama::Engine::Create(o);
    }
    engine_ = Unwrap(std::move(e));
  }

  py::dict Generate(const std::vector<std::vector<int32_t>>& prompts, int64_t max_new_tokens, double temperature,
                    int64_t top_k, double top_p, uint64_t seed, bool stop_at_eos) {
    llama::GenerateOptions g;
    g.max_new_tokens = max_new_tokens;
    g.sampling.temperature = temperature;
    g.sampling.top_k = top_k;
    g.sampling.top_p = top_p;
    g.sampling.seed = seed;
    g.stop_at_eos = stop_at_eos;
    StatusOr<llama::GenerateResult> r = Status(StatusCode::kInternal, "not run");
    {
      py::gil_scoped_release release;
      r = engine_->Generate(prompts, g);
    }
    llama::GenerateResult res = Unwrap(std::move(r));
    py::dict d;
    d["tokens"] = res.tokens;
    d["prefill_ms"] = res.prefill_ms;
    d["decode_ms"] = res.decode_ms;
    d["decode_steps"] = res.decode_steps;
    d["ms_per_token"] = res.ms_per_token();
    d["kernels_per_decode_step"] = engine_->kernels_per_decode_step();
    return d;
  }

  llama::Engine& engine() { return *engine_; }

 private:
  std::unique_ptr<llama::Engine> engine_;
};

}  // namespace

void RegisterEngine(py::module_& m) {
  py::class_<PyEngine>(m, "Engine", "The Llama-family engine (token ids in, token ids out).")
      .def(py::init<const std::string&, const std::string&, const std::string&, int64_t, int64_t, const std::string&,
                    uint64_t, const std::string&, const std::string&, int64_t>(),
           py::arg("model_dir") = "", py::arg("backend") = "cpu", py::arg("strategy") = "always_fuse",
           py::arg("batch") = 1, py::arg("max_context") = 0, py::arg("dtype") = "", py::arg("weight_seed") = 0,
           py::arg("builtin") = "", py::arg("profile") = "", py::arg("tensor_parallel") = 1)
      .def("generate", &PyEngine::Generate, py::arg("prompts"), py::arg("max_new_tokens") = 16,
           py::arg("temperature") = 0.0, py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("seed") = 0,
           py::arg("stop_at_eos") = false)
      .def_property_readonly("device", [](PyEngine& e) { return e.engine().device(); })
      .def_property_readonly("strategy", [](PyEngine& e) { return std::string(e.engine().strategy_name()); })
      .def_property_readonly("model_name", [](PyEngine& e) { return e.engine().model_name(); })
      .def_property_readonly("batch", [](PyEngine& e) { return e.engine().batch(); })
      .def_property_readonly("tensor_parallel", [](PyEngine& e) { return e.engine().tensor_parallel(); })
      .def_property_readonly("context", [](PyEngine& e) { return e.engine().context(); })
      .def_property_readonly("compile_ms", [](PyEngine& e) { return e.engine().compile_ms(); })
      .def_property_readonly("kernels_per_decode_step", [](PyEngine& e) { return e.engine().kernels_per_decode_step(); });
  m.attr("has_engine") = true;
}

#else

void RegisterEngine(py::module_& m) { m.attr("has_engine") = false; }

#endif

}  // namespace opfuse::py_bind
