// Graph side of the extension: Python graph specs → verified opfuse::Graph, and should_fuse.
//
// A SubGraph names values, the seed's way; opfuse graphs are SSA over value ids. BuildGraph adds
// the inputs with the types of the tensors at hand, then each node in order, resolving input names
// to the values defined so far, and runs VerifyAndInfer — the same verifier the text parser and
// the C++ builder use, so a shape or dtype error reads the same everywhere. CheckSpec catches what
// needs no types (unknown op, wrong arity, a name used before it is defined or defined twice) when
// the SubGraph is built, so a malformed graph fails at construction, not at the first dispatch.
// should_fuse runs the real pass pipeline (fusion passes + the schedule pass's ShouldFuse), so its
// verdict is the one dispatch will act on, never a second heuristic.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <map>
#include <set>

#include "bindings.h"
#include "fusion/group_info.h"
#include "passes/pipeline.h"
#include "scheduler/profile_db.h"

namespace opfuse::py_bind {

namespace {

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::vector<std::string> StringList(const py::handle& obj, const char* what) {
  if (py::isinstance<py::str>(obj))
    throw py::type_error(fmt::format("{} must be a sequence of names, not a single string", what));
  std::vector<std::string> out;
  for (const auto& item : py::iter(obj)) {
    if (!py::isinstance<py::str>(item))
      throw py::type_error(fmt::format("{} must hold strings, got {}", what, std::string(py::repr(item))));
    out.push_back(item.cast<std::string>());
  }
  return out;
}

Dim DimFromPython(const py::handle& item, const std::string& key) {
  if (py::isinstance<py::bool_>(item)) throw py::type_error(fmt::format("attribute '{}': a bool is not a dim", key));
  if (py::isinstance<py::int_>(item)) return Dim(item.cast<int64_t>());
  if (py::isinstance<py::str>(item)) return Dim::Sym(item.cast<std::string>());
  throw py::type_error(fmt::format("attribute '{}': list items must be ints or symbol names, got {}", key,
                                   std::string(py::repr(item))));
}

}  // namespace

[[noreturn]] void ThrowStatus(const Status& s) {
  PyObject* type = PyExc_RuntimeError;
  switch (s.code()) {
    case StatusCode::kInvalidArgument: type = PyExc_ValueError; break;
    case StatusCode::kNotFound: type = PyExc_LookupError; break;
    case StatusCode::kUnimplemented: type = PyExc_NotImplementedError; break;
    case StatusCode::kUnavailable: {
      py::object exc = py::module_::import("opfuse._opfuse").attr("UnavailableError");
      PyErr_SetString(exc.ptr(), s.message().c_str());
      throw py::error_already_set();
    }
    default: break;
  }
  PyErr_SetString(type, s.message().c_str());
  throw py::error_already_set();
}

Attrs AttrsFromPython(const py::handle& attrs) {
  Attrs out;
  if (attrs.is_none()) return out;
  if (!py::isinstance<py::dict>(attrs)) throw py::type_error("attrs must be a dict (or None)");
  for (const auto& [k, v] : attrs.cast<py::dict>()) {
    if (!py::isinstance<py::str>(k)) throw py::type_error("attribute names must be strings");
    std::string key = k.cast<std::string>();
    if (py::isinstance<py::bool_>(v)) {
      out[key] = static_cast<int64_t>(v.cast<bool>());
    } else if (py::isinstance<py::int_>(v)) {
      out[key] = v.cast<int64_t>();
    } else if (py::isinstance<py::float_>(v)) {
      out[key] = v.cast<double>();
    } else if (py::isinstance<py::str>(v)) {
      out[key] = v.cast<std::string>();
    } else if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
      DimList dims;
      for (const auto& item : py::iter(v)) dims.push_back(DimFromPython(item, key));
      out[key] = std::move(dims);
    } else {
      throw py::type_error(fmt::format("attribute '{}': unsupported value {} (int, float, str or a list of ints)", key,
                                       std::string(py::repr(v))));
    }
  }
  return out;
}

GraphSpec SpecFromPython(const py::object& nodes, const py::object& input_names, const py::object& output_names,
                         const std::string& name) {
  GraphSpec spec;
  spec.name = name;
  spec.inputs = StringList(input_names, "input_names");
  spec.outputs = StringList(output_names, "output_names");
  for (const auto& n : py::iter(nodes)) {
    NodeSpec ns;
    ns.op = n.attr("op_type").cast<std::string>();
    ns.inputs = StringList(n.attr("inputs"), "OpNode.inputs");
    ns.outputs = StringList(n.attr("outputs"), "OpNode.outputs");
    ns.attrs = AttrsFromPython(n.attr("attrs"));
    spec.nodes.push_back(std::move(ns));
  }
  return spec;
}

DType DTypeFromPython(const std::string& name) {
  auto t = DTypeFromName(name);
  if (!t) ThrowStatus(InvalidArgument(fmt::format("unknown dtype '{}' (expected f32, f16, bf16, i32, i64 or bool)", name)));
  return *t;
}

FusionConfig ConfigFromPython(const py::dict& cfg) {
  FusionConfig c;
  c.enable_fusion = cfg["enable_fusion"].cast<bool>();
  c.enable_cache = cfg["enable_cache"].cast<bool>();
  c.min_tensor_elements = cfg["min_tensor_elements"].cast<int64_t>();
  c.min_nodes_for_fusion = cfg["min_nodes_for_fusion"].cast<int>();
  c.max_group_size = cfg["max_group_size"].cast<int>();
  c.fallback_on_error = cfg["fallback_on_error"].cast<bool>();
  c.debug = cfg["debug_mode"].cast<bool>();
  if (cfg["use_env"].cast<bool>()) Check(c.ApplyEnv());
  std::vector<std::string> disabled = StringList(cfg["disabled"], "FusionConfig.disabled");
  if (!disabled.empty()) Check(c.Disable(Join(disabled, ","), "FusionConfig.disabled"));
  return c;
}

Status CheckSpec(const GraphSpec& spec) {
  if (spec.outputs.empty()) return InvalidArgument(fmt::format("graph '{}': no output_names", spec.name));
  std::set<std::string> defined;
  for (const auto& in : spec.inputs) {
    if (in.empty()) return InvalidArgument(fmt::format("graph '{}': empty input name", spec.name));
    if (!defined.insert(in).second) return InvalidArgument(fmt::format("graph '{}': input '{}' listed twice", spec.name, in));
  }
  for (size_t i = 0; i < spec.nodes.size(); ++i) {
    const NodeSpec& n = spec.nodes[i];
    const std::string where = fmt::format("graph '{}': node {} ({})", spec.name, i, n.op);
    auto op = OpFromName(n.op);
    if (!op) return InvalidArgument(fmt::format("{}: unknown op '{}'", where, n.op));
    const OpInfo& info = GetOpInfo(*op);
    const int nin = static_cast<int>(n.inputs.size());
    if (nin < info.min_inputs || (info.max_inputs >= 0 && nin > info.max_inputs)) {
      std::string want = info.min_inputs == info.max_inputs ? std::to_string(info.min_inputs)
                         : info.max_inputs < 0 ? fmt::format("at least {}", info.min_inputs)
                                               : fmt::format("{} to {}", info.min_inputs, info.max_inputs);
      return InvalidArgument(fmt::format("{}: takes {} inputs, got {}", where, want, nin));
    }
    if (static_cast<int>(n.outputs.size()) != info.num_outputs)
      return InvalidArgument(fmt::format("{}: has {} outputs, got {} output names", where, info.num_outputs, n.outputs.size()));
    for (const auto& in : n.inputs)
      if (!defined.count(in))
        return InvalidArgument(fmt::format("{}: input '{}' is not a graph input or an earlier node's output", where, in));
    for (const auto& out : n.outputs) {
      if (out.empty()) return InvalidArgument(fmt::format("{}: empty output name", where));
      if (!defined.insert(out).second) return InvalidArgument(fmt::format("{}: value '{}' is defined twice", where, out));
    }
  }
  std::set<std::string> seen;
  for (const auto& out : spec.outputs) {
    if (!defined.count(out)) return InvalidArgument(fmt::format("graph '{}': output '{}' is never defined", spec.name, out));
    if (!seen.insert(out).second) return InvalidArgument(fmt::format("graph '{}': output '{}' listed twice", spec.name, out));
  }
  return Status::Ok();
}

StatusOr<Graph> BuildGraph(const GraphSpec& spec, const std::vector<TensorType>& input_types) {
  OPFUSE_RETURN_IF_ERROR(CheckSpec(spec));
  if (input_types.size() != spec.inputs.size())
    return InvalidArgument(fmt::format("graph '{}': {} input types for {} inputs", spec.name, input_types.size(),
                                       spec.inputs.size()));
  Graph g;
  g.name = spec.name;
  std::map<std::string, int> ids;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    ids[spec.inputs[i]] = g.AddValue(spec.inputs[i], input_types[i], ValueKind::kInput);  // also lists it in g.inputs
  }
  for (const auto& n : spec.nodes) {
    std::vector<int> ins;
    for (const auto& in : n.inputs) ins.push_back(ids.at(in));
    int id = g.AddNode(*OpFromName(n.op), std::move(ins), {}, n.attrs, n.outputs);
    for (size_t k = 0; k < n.outputs.size(); ++k) ids[n.outputs[k]] = g.nodes[id].outputs[k];
  }
  for (const auto& out : spec.outputs) g.outputs.push_back(ids.at(out));
  OPFUSE_RETURN_IF_ERROR(VerifyAndInfer(g));
  return g;
}

namespace {

std::vector<TensorType> TypesFromPython(const std::vector<std::pair<std::string, std::vector<int64_t>>>& types) {
  std::vector<TensorType> out;
  for (const auto& [dt, shape] : types) {
    TensorType t;
    t.dtype = DTypeFromPython(dt);
    for (int64_t d : shape) t.shape.push_back(Dim(d));
    out.push_back(std::move(t));
  }
  return out;
}

// The pipeline's verdicts for `spec` at these input types: one dict per group plus the notes, and
// an overall verdict: fuse when at least one group (of two or more ops, or a composite) is fused.
py::dict ShouldFuse(const py::object& nodes, const py::object& input_names, const py::object& output_names,
                    const std::string& name, const std::vector<std::pair<std::string, std::vector<int64_t>>>& types,
                    const py::dict& cfg, const std::string& profile_path) {
  GraphSpec spec = SpecFromPython(nodes, input_names, output_names, name);
  Graph g = Unwrap(BuildGraph(spec, TypesFromPython(types)));
  PassContext ctx;
  ctx.config = ConfigFromPython(cfg);
  std::optional<scheduler::ProfileDb> profile;
  if (!profile_path.empty()) {
    profile = Unwrap(scheduler::ProfileDb::Load(profile_path));
    ctx.profile = &*profile;
  }
  Check(RunPipeline(g, ctx));

  py::list groups;
  std::vector<std::string> fused_reasons, other_reasons;
  for (size_t i = 0; i < g.groups.size(); ++i) {
    const FusionGroup& grp = g.groups[i];
    py::dict d;
    d["kind"] = grp.kind;
    d["ops"] = fusion::GroupOpNames(g, grp.nodes);
    d["values"] = fusion::GroupValueNames(g, grp.nodes);
    d["fuse"] = grp.decision.fuse;
    d["reason"] = grp.decision.reason;
    d["variant"] = grp.variant == Variant::kAuto ? "" : VariantName(grp.variant);
    d["name"] = grp.name;
    if (i < ctx.choices.size()) {
      d["source"] = scheduler::SourceName(ctx.choices[i].source);
      d["expected_us_saved"] = ctx.choices[i].expected_us_saved;
      d["evidence"] = ctx.choices[i].evidence;
    }
    groups.append(d);
    (grp.decision.fuse ? fused_reasons : other_reasons).push_back(fmt::format("{} [{}]: {}", grp.name, grp.kind, grp.decision.reason));
  }
  py::list notes;
  for (const auto& n : ctx.notes) notes.append(n.ToString());
  py::dict out;
  out["fuse"] = !fused_reasons.empty();
  if (!fused_reasons.empty()) {
    out["reason"] = Join(fused_reasons, "; ");
  } else if (!other_reasons.empty()) {
    out["reason"] = Join(other_reasons, "; ");
  } else {
    out["reason"] = std::string("no fusion group was formed");
  }
  out["groups"] = groups;
  out["notes"] = notes;
  out["graph"] = PrintGraph(g);
  return out;
}

}  // namespace

void RegisterGraph(py::module_& m) {
  m.def(
      "check_spec",
      [](const py::object& nodes, const py::object& input_names, const py::object& output_names, const std::string& name) {
        Check(CheckSpec(SpecFromPython(nodes, input_names, output_names, name)));
      },
      "Structure checks of a graph spec (ValueError naming the node).");
  m.def(
      "print_graph",
      [](const py::object& nodes, const py::object& input_names, const py::object& output_names, const std::string& name,
         const std::vector<std::pair<std::string, std::vector<int64_t>>>& types) {
        return PrintGraph(Unwrap(BuildGraph(SpecFromPython(nodes, input_names, output_names, name), TypesFromPython(types))));
      },
      "The verified graph in opfuse's text format (.ofg).");
  m.def("should_fuse", &ShouldFuse, "Runs the pass pipeline and returns every group's verdict.");
  m.def("check_config", [](const py::dict& cfg) { (void)ConfigFromPython(cfg); },
        "Validates a FusionConfig (unknown kill-switch names are a ValueError).");
  m.def("known_disable_names", &FusionConfig::KnownNames, "Names FusionConfig.disabled may hold.");
  m.def("op_names", [] {
    std::vector<std::string> out;
    for (int i = 0; i < kNumOps; ++i) out.push_back(OpName(static_cast<OpKind>(i)));
    return out;
  });
}

}  // namespace opfuse::py_bind
