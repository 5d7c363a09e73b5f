// PYBIND11_MODULE for `opfuse._opfuse`: the exception type and the registration parts
// (graph.cc, program.cc, engine.cc). The public API lives in the Python package (python/opfuse/); see
// bindings.h for the split and docs/python.md for the API.
#include "bindings.h"

PYBIND11_MODULE(_opfuse, m) {
  namespace py = pybind11;
  m.doc() = "opfuse native extension (use the `opfuse` package, not this module directly)";
  // Unavailable (no CUDA device, no CUDA build): a RuntimeError subclass, so `except RuntimeError` catches it.
  static py::handle unavailable =
      PyErr_NewExceptionWithDoc("opfuse.UnavailableError",
                                "A resource opfuse needs is not available (e.g. no CUDA device).", PyExc_RuntimeError,
                                nullptr);
  m.attr("UnavailableError") = unavailable;
#ifdef OPFUSE_WITH_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  opfuse::py_bind::RegisterGraph(m);
  opfuse::py_bind::RegisterProgram(m);
  opfuse::py_bind::RegisterEngine(m);
}
