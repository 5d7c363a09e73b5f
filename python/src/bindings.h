// Shared pieces of the `opfuse._opfuse` extension module (pybind11).
//
// Design note: the Python package (python/opfuse/) keeps the seed's API — OpNode, SubGraph,
// FusionConfig, FusionScheduler — as small Python classes, and this extension does everything that
// touches the compiler: it turns a graph spec (a list of (op, inputs, outputs, attrs) plus input
// names and types) into a verified opfuse::Graph, runs the pass pipeline for should_fuse, compiles
// executables (CPU reference backend or CudaExecutable) and runs them on numpy arrays or DLPack
// tensors. Errors never cross as C++ exceptions of our own: every Status becomes a Python
// exception carrying the C++ message (ThrowStatus), so bad input reads the same in Python as in
// the CLI. The mapping: InvalidArgument → ValueError, NotFound → LookupError, Unimplemented →
// NotImplementedError, Unavailable → opfuse.UnavailableError (a RuntimeError), Internal →
// RuntimeError.
#pragma once
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "opfuse/config.h"
#include "opfuse/graph.h"
#include "opfuse/status.h"

namespace opfuse::py_bind {

namespace py = pybind11;

// One node of a graph spec, as the Python SubGraph hands it over.
struct NodeSpec {
  std::string op;
  std::vector<std::string> inputs, outputs;
  Attrs attrs;
};
struct GraphSpec {
  std::string name = "subgraph";
  std::vector<NodeSpec> nodes;
  std::vector<std::string> inputs, outputs;
};

// Raises the Python exception for `s` (which must not be ok).
[[noreturn]] void ThrowStatus(const Status& s);
template <typename T>
T Unwrap(StatusOr<T> v) {
  if (!v.ok()) ThrowStatus(v.status());
  return std::move(v).value();
}
inline void Check(const Status& s) {
  if (!s.ok()) ThrowStatus(s);
}

// Python → C++ conversions (TypeError/ValueError on anything else).
GraphSpec SpecFromPython(const py::object& nodes, const py::object& input_names, const py::object& output_names,
                         const std::string& name);
Attrs AttrsFromPython(const py::handle& attrs);
FusionConfig ConfigFromPython(const py::dict& cfg);   // the dict FusionConfig._to_native() builds
DType DTypeFromPython(const std::string& name);       // "f32" ... (ValueError listing the valid names)

// Structure-only checks (no types needed): op names known, arity, every input defined before use,
// every value defined once, outputs defined. InvalidArgument naming the node.
Status CheckSpec(const GraphSpec& spec);
// The verified, type-inferred graph for `spec` with these input types.
StatusOr<Graph> BuildGraph(const GraphSpec& spec, const std::vector<TensorType>& input_types);

void RegisterGraph(py::module_& m);     // graph.cc: check_spec, build/print graph, should_fuse
void RegisterProgram(py::module_& m);   // program.cc: compile + run (numpy, DLPack), cache stats
void RegisterEngine(py::module_& m);    // engine.cc: the Llama engine (when src/model/llama/engine.h exists)

}  // namespace opfuse::py_bind
