// Program: one graph compiled for one device and one set of input types, run on numpy arrays
// (CPU reference backend) or DLPack tensors (CPU, or CUDA without copies).
//
// Design note:
//  * CPU: Backend("cpu")->Compile, then Executable::Run on HostTensors. numpy arrays and CPU DLPack
//    tensors are copied into HostTensors (the reference owns its storage); outputs come back as
//    new numpy arrays, or are copied into caller-provided DLPack tensors, or returned as DLPack
//    capsules that own their storage.
//  * CUDA: cuda::CudaExecutable::Create, then Run(inputs, outputs, stream) with the tensors' own
//    device pointers on the caller's stream — no copy, no synchronisation. Outputs are the
//    caller's tensors (their pointers are written), or, when the caller gives none, fresh
//    cudaMalloc buffers handed back as DLPack capsules whose deleter frees them. The Python layer
//    allocates torch outputs itself (torch.empty on the input's device), so the capsule path is
//    only for other DLPack producers.
//  * A DLPack capsule is read in two steps: dlpack_info() peeks (dtype, shape, device, pointer)
//    without consuming it, so the scheduler can derive the cache key; Run consumes it (renamed
//    "used_dltensor", deleter called once the launch is enqueued — the producer keeps its own
//    reference, as DLPack intends). Non-contiguous tensors, a device other than the one the
//    program was compiled for, and an output overlapping an input are ValueErrors: never a
//    silent copy.
//  * The JIT cache: with enable_cache the process-wide KernelCache (memory + disk) serves every
//    program; without it each program gets a private cache with memory and disk off, so every
//    compile is real (what enable_cache=False asks for).
#include <dlpack/dlpack.h>
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <memory>

#include "bindings.h"
#include "jit/kernel_cache.h"
#include "runtime/backend.h"
#ifdef OPFUSE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "cuda/device.h"
#include "runtime/cuda/executor.h"
#endif

namespace opfuse::py_bind {
namespace {

constexpr uint8_t kDLBoolCode = 6;  // kDLBool, DLPack >= 0.8 (Debian's 0.6 header lacks it)

// ------------------------------------------------------------------ DLPack
std::optional<DType> DTypeFromDl(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  if (t.code == kDLFloat && t.bits == 32) return DType::kF32;
  if (t.code == kDLFloat && t.bits == 16) return DType::kF16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::kBF16;
  if (t.code == kDLInt && t.bits == 32) return DType::kI32;
  if (t.code == kDLInt && t.bits == 64) return DType::kI64;
  if (t.code == kDLBoolCode && t.bits == 8) return DType::kBool;
  return std::nullopt;
}
DLDataType DlFromDType(DType t) {
  switch (t) {
    case DType::kF32: return {kDLFloat, 32, 1};
    case DType::kF16: return {kDLFloat, 16, 1};
    case DType::kBF16: return {kDLBfloat, 16, 1};
    case DType::kI32: return {kDLInt, 32, 1};
    case DType::kI64: return {kDLInt, 64, 1};
    case DType::kBool: return {kDLBoolCode, 8, 1};
  }
  return {kDLFloat, 32, 1};
}

const char* DlKindName(uint8_t code) {
  switch (code) {
    case kDLInt: return "int";
    case kDLUInt: return "uint";
    case kDLFloat: return "float";
    case kDLBfloat: return "bfloat";
    case kDLComplex: return "complex";
    case kDLBoolCode: return "bool";
    default: return "type";
  }
}

DLManagedTensor* PeekCapsule(const py::handle& cap, const std::string& what) {
  if (!PyCapsule_IsValid(cap.ptr(), "dltensor"))
    ThrowStatus(InvalidArgument(fmt::format("{}: not an unconsumed DLPack capsule (pass the tensor itself, or x.__dlpack__())", what)));
  return static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
}

// A consumed capsule: the deleter runs when this goes away.
struct DlBorrow {
  DLManagedTensor* mt = nullptr;
  DlBorrow() = default;
  explicit DlBorrow(DLManagedTensor* m) : mt(m) {}
  DlBorrow(DlBorrow&& o) noexcept : mt(o.mt) { o.mt = nullptr; }
  DlBorrow& operator=(DlBorrow&&) = delete;
  ~DlBorrow() {
    if (mt && mt->deleter) mt->deleter(mt);
  }
};
DlBorrow ConsumeCapsule(const py::handle& cap, const std::string& what) {
  DLManagedTensor* mt = PeekCapsule(cap, what);
  PyCapsule_SetName(cap.ptr(), "used_dltensor");
  return DlBorrow(mt);
}

struct DlInfo {
  int device_type = 0, device_id = 0;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  void* data = nullptr;  // data + byte_offset
};
DlInfo ReadDl(const DLTensor& t, const std::string& what) {
  DlInfo out;
  out.device_type = t.device.device_type;
  out.device_id = t.device.device_id;
  auto dt = DTypeFromDl(t.dtype);
  if (!dt)
    ThrowStatus(InvalidArgument(fmt::format("{}: unsupported DLPack dtype {}{} (code {}, lanes {}); opfuse takes "
                                            "f32, f16, bf16, i32, i64 and bool: convert explicitly",
                                            what, DlKindName(t.dtype.code), t.dtype.bits, t.dtype.code, t.dtype.lanes)));
  out.dtype = *dt;
  out.shape.assign(t.shape, t.shape + t.ndim);
  if (t.strides) {
    int64_t expect = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expect)
        ThrowStatus(InvalidArgument(fmt::format("{}: not contiguous (row-major); call .contiguous() first — opfuse "
                                                "never copies a tensor behind your back", what)));
      expect *= t.shape[i];
    }
  }
  out.data = static_cast<char*>(t.data) + t.byte_offset;
  return out;
}

int64_t NumBytes(DType t, const std::vector<int64_t>& shape) {
  int64_t n = DTypeSize(t);
  for (auto d : shape) n *= d;
  return n;
}

// A DLPack tensor we own (an output the caller did not provide).
struct OwnedDl {
  DLManagedTensor mt{};
  std::vector<int64_t> shape;
  std::vector<uint8_t> host;  // CPU storage
  void* device_ptr = nullptr; // CUDA storage (cudaMalloc)
};
void DeleteOwned(DLManagedTensor* self) {
  auto* o = static_cast<OwnedDl*>(self->manager_ctx);
#ifdef OPFUSE_WITH_CUDA
  if (o->device_ptr) cudaFree(o->device_ptr);
#endif
  delete o;
}
py::capsule MakeCapsule(OwnedDl* o, DType dtype, int device_type, int device_id, void* data) {
  o->mt.dl_tensor.data = data;
  o->mt.dl_tensor.device = {static_cast<DLDeviceType>(device_type), device_id};
  o->mt.dl_tensor.ndim = static_cast<int>(o->shape.size());
  o->mt.dl_tensor.dtype = DlFromDType(dtype);
  o->mt.dl_tensor.shape = o->shape.data();
  o->mt.dl_tensor.strides = nullptr;
  o->mt.dl_tensor.byte_offset = 0;
  o->mt.manager_ctx = o;
  o->mt.deleter = DeleteOwned;
  // Unconsumed capsules free their tensor; a consumer renames it and calls the deleter itself.
  return py::capsule(&o->mt, "dltensor", [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (mt && mt->deleter) mt->deleter(mt);
    }
  });
}

// ------------------------------------------------------------------ numpy
// Arrays arrive through the buffer protocol (PEP 3118), never pybind11/numpy.h: that header reads
// numpy's C structs, whose layout changed in numpy 2, and Debian's pybind11 2.10 predates it.
// The dtype was checked in Python (opfuse._dtypes); here only the item size and contiguity.
HostTensor HostFromBuffer(const py::handle& obj, DType dt, const std::string& what) {
  py::buffer_info info = py::reinterpret_borrow<py::buffer>(obj).request();
  if (info.itemsize != DTypeSize(dt))
    ThrowStatus(InvalidArgument(fmt::format("{}: item size {} does not match {}", what, info.itemsize, DTypeName(dt))));
  std::vector<int64_t> shape(info.shape.begin(), info.shape.end());
  int64_t expect = info.itemsize;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    if (shape[i] != 1 && info.strides[i] != expect)
      ThrowStatus(InvalidArgument(fmt::format("{}: not C-contiguous (internal: the scheduler makes it so)", what)));
    expect *= shape[i];
  }
  HostTensor t(dt, shape);
  if (!t.data.empty()) std::memcpy(t.data.data(), info.ptr, t.data.size());
  return t;
}

// ------------------------------------------------------------------ Program
class Program {
 public:
  Program(const py::object& nodes, const py::object& input_names, const py::object& output_names,
          const std::string& name, const std::vector<std::pair<std::string, std::vector<int64_t>>>& types,
          const py::dict& cfg, const std::string& device, const std::string& variant) {
    GraphSpec spec = SpecFromPython(nodes, input_names, output_names, name);
    std::vector<TensorType> tt;
    for (const auto& [dt, shape] : types) {
      TensorType t;
      t.dtype = DTypeFromPython(dt);
      for (int64_t d : shape) t.shape.push_back(Dim(d));
      tt.push_back(std::move(t));
    }
    Graph g = Unwrap(BuildGraph(spec, tt));
    FusionConfig config = ConfigFromPython(cfg);
    device_ = device;
    if (device == "cpu") {
      auto backend = Unwrap(MakeBackend("cpu"));
      // The GIL is released only around the C++ call: a Python exception is built with it held.
      StatusOr<std::unique_ptr<Executable>> compiled = Status(StatusCode::kInternal, "not compiled");
      {
        py::gil_scoped_release release;
        compiled = backend->Compile(g, CompileOptions{config, variant});
      }
      cpu_ = Unwrap(std::move(compiled));
    } else if (device == "cuda") {
#ifdef OPFUSE_WITH_CUDA
      cuda::ExecutorOptions opts;
      opts.config = config;
      opts.variant = Unwrap(cuda::ParseVariant(variant));
      if (!config.enable_cache) {
        private_cache_ = std::make_unique<jit::KernelCache>(jit::CacheOptions{"", false, false, 0});
        opts.cache = private_cache_.get();
      }
      StatusOr<std::unique_ptr<cuda::CudaExecutable>> created = Status(StatusCode::kInternal, "not created");
      {
        py::gil_scoped_release release;
        created = cuda::CudaExecutable::Create(g, opts);
      }
      cuda_ = Unwrap(std::move(created));
#else
      ThrowStatus(Unavailable("no CUDA device: this opfuse module was built without the CUDA backend (OPFUSE_CUDA=OFF)"));
#endif
    } else {
      ThrowStatus(InvalidArgument(fmt::format("unknown device '{}' (expected cpu or cuda)", device)));
    }
  }

  const Graph& graph() const {
#ifdef OPFUSE_WITH_CUDA
    if (cuda_) return cuda_->graph();
#endif
    return cpu_->graph();
  }

  // (name, dtype, shape) of each output; shapes are static (inputs are concrete).
  std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> outputs() const {
    std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> out;
    const Graph& g = graph();
    for (int v : g.outputs) {
      const Value& val = g.values[v];
      out.emplace_back(val.name, DTypeName(val.type.dtype), Unwrap(BindShape(val.type.shape, {})));
    }
    return out;
  }

  // inputs: name -> (dtype name, C-contiguous buffer). Returns name -> (dtype, shape, bytearray).
  py::dict RunNumpy(const py::dict& inputs) {
    if (!cpu_) ThrowStatus(InvalidArgument("run_numpy: this program was compiled for cuda; pass CUDA tensors"));
    std::map<std::string, HostTensor> in;
    for (const auto& [k, v] : inputs) {
      std::string name = k.cast<std::string>();
      auto pair = v.cast<py::tuple>();
      in[name] = HostFromBuffer(pair[1], DTypeFromPython(pair[0].cast<std::string>()), fmt::format("input '{}'", name));
    }
    std::map<std::string, HostTensor> out = RunCpuReference(in);
    py::dict result;
    for (auto& [name, t] : out) {
      py::object bytes = py::reinterpret_steal<py::object>(
          PyByteArray_FromStringAndSize(reinterpret_cast<const char*>(t.data.data()), static_cast<Py_ssize_t>(t.data.size())));
      if (!bytes) throw py::error_already_set();
      result[py::str(name)] = py::make_tuple(std::string(DTypeName(t.dtype)), t.shape, bytes);
    }
    return result;
  }

  // inputs/outputs: name -> DLPack capsule. Outputs not given come back as new capsules.
  // Returns {"outputs": {name: capsule}, "input_ptrs": {...}, "output_ptrs": {...}}.
  py::dict RunDlpack(const py::dict& inputs, const py::dict& outputs, uintptr_t stream) {
    std::map<std::string, DlBorrow> borrowed;
    std::map<std::string, DlInfo> in_info, out_info;
    const int want_device = cpu_ ? kDLCPU : kDLCUDA;
    int device_id = 0;
#ifdef OPFUSE_WITH_CUDA
    if (cuda_) device_id = cuda_->device().ordinal;
#endif
    auto take = [&](const std::string& name, const py::handle& cap, const std::string& what) {
      DlBorrow b = ConsumeCapsule(cap, what);
      DlInfo info = ReadDl(b.mt->dl_tensor, what);
      if (info.device_type != want_device || (want_device == kDLCUDA && info.device_id != device_id))
        ThrowStatus(InvalidArgument(fmt::format("{}: on DLPack device ({}, {}), but this program runs on {} device {}", what,
                                                info.device_type, info.device_id, device_, device_id)));
      borrowed.emplace(what, std::move(b));
      return info;
    };
    for (const auto& [k, v] : inputs) {
      std::string name = k.cast<std::string>();
      in_info[name] = take(name, v, fmt::format("input '{}'", name));
    }
    for (const auto& [k, v] : outputs) {
      std::string name = k.cast<std::string>();
      out_info[name] = take(name, v, fmt::format("output '{}'", name));
    }
    // Outputs the caller did not give: allocate, hand back as capsules.
    py::dict new_caps;
    for (const auto& [name, dt, shape] : this->outputs()) {
      if (out_info.count(name)) continue;
      auto* o = new OwnedDl;
      o->shape = shape;
      DType dtype = DTypeFromPython(dt);
      const int64_t bytes = NumBytes(dtype, shape);
      void* data = nullptr;
      if (cpu_) {
        o->host.resize(static_cast<size_t>(bytes));
        data = o->host.data();
      } else {
#ifdef OPFUSE_WITH_CUDA
        if (bytes > 0) {
          cudaError_t e = cudaMalloc(&o->device_ptr, static_cast<size_t>(bytes));
          if (e != cudaSuccess) {
            delete o;
            ThrowStatus(Internal(fmt::format("output '{}': cudaMalloc of {} bytes failed: {}", name, bytes, cudaGetErrorString(e))));
          }
        }
        data = o->device_ptr;
#endif
      }
      py::capsule cap = MakeCapsule(o, dtype, want_device, device_id, data);
      out_info[name] = DlInfo{want_device, device_id, dtype, shape, data};
      new_caps[py::str(name)] = cap;
    }
    for (const auto& [oname, o] : out_info) {
      const int64_t ob = NumBytes(o.dtype, o.shape);
      for (const auto& [iname, i] : in_info) {
        const int64_t ib = NumBytes(i.dtype, i.shape);
        auto* op = static_cast<char*>(o.data);
        auto* ip = static_cast<char*>(i.data);
        if (ob > 0 && ib > 0 && op < ip + ib && ip < op + ob)
          ThrowStatus(InvalidArgument(fmt::format("output '{}' overlaps input '{}': opfuse does not run in place", oname, iname)));
      }
    }

    py::dict in_ptrs, out_ptrs;
    for (const auto& [n, i] : in_info) in_ptrs[py::str(n)] = reinterpret_cast<uintptr_t>(i.data);
    for (const auto& [n, o] : out_info) out_ptrs[py::str(n)] = reinterpret_cast<uintptr_t>(o.data);

    if (cpu_) {
      RunCpu(in_info, out_info);
    } else {
#ifdef OPFUSE_WITH_CUDA
      std::map<std::string, cuda::DeviceTensor> din, dout;
      for (const auto& [n, i] : in_info) din[n] = cuda::DeviceTensor{i.data, i.dtype, i.shape};
      for (const auto& [n, o] : out_info) dout[n] = cuda::DeviceTensor{o.data, o.dtype, o.shape};
      Status s;
      {
        py::gil_scoped_release release;
        s = cuda_->Run(din, dout, reinterpret_cast<cudaStream_t>(stream));
      }
      Check(s);
#endif
    }
    py::dict result;
    result["outputs"] = new_caps;
    result["input_ptrs"] = in_ptrs;
    result["output_ptrs"] = out_ptrs;
    return result;
  }

  std::string device() const { return device_; }
  int steps_per_run() const {
#ifdef OPFUSE_WITH_CUDA
    if (cuda_) return static_cast<int>(cuda_->steps().size());
#endif
    return cpu_->steps_per_run();
  }
  int kernels_per_run() const {
#ifdef OPFUSE_WITH_CUDA
    if (cuda_) return cuda_->kernels_per_run();
#endif
    return -1;
  }
  std::vector<std::string> fallbacks() const {
#ifdef OPFUSE_WITH_CUDA
    if (cuda_) return cuda_->fallbacks();
#endif
    return {};
  }
  double compile_ms() const {
#ifdef OPFUSE_WITH_CUDA
    if (cuda_) return cuda_->compile_ms();
#endif
    return 0;
  }
  std::vector<py::dict> groups() const {
    std::vector<py::dict> out;
    for (const auto& grp : graph().groups) {
      py::dict d;
      d["kind"] = grp.kind;
      d["fuse"] = grp.decision.fuse;
      d["reason"] = grp.decision.reason;
      d["variant"] = grp.variant == Variant::kAuto ? "" : VariantName(grp.variant);
      d["name"] = grp.name;
      out.push_back(d);
    }
    return out;
  }

 private:
  // The CPU reference on `in`, with the GIL released only around the run: the Python exception for
  // a failure is built with it held.
  std::map<std::string, HostTensor> RunCpuReference(const std::map<std::string, HostTensor>& in) {
    StatusOr<std::map<std::string, HostTensor>> r = Status(StatusCode::kInternal, "not run");
    {
      py::gil_scoped_release release;
      r = cpu_->Run(in);
    }
    if (!r.ok()) ThrowStatus(r.status());
    return std::move(*r);
  }

  // CPU run on DLPack tensors: copy in, run the reference, copy into the output tensors.
  void RunCpu(const std::map<std::string, DlInfo>& in_info, const std::map<std::string, DlInfo>& out_info) {
    std::map<std::string, HostTensor> in;
    for (const auto& [n, i] : in_info) {
      HostTensor t(i.dtype, i.shape);
      if (!t.data.empty()) std::memcpy(t.data.data(), i.data, t.data.size());
      in[n] = std::move(t);
    }
    const std::map<std::string, HostTensor> r = RunCpuReference(in);
    for (const auto& [n, o] : out_info) {
      auto it = r.find(n);
      if (it == r.end()) ThrowStatus(InvalidArgument(fmt::format("output '{}' is not an output of the graph", n)));
      if (it->second.dtype != o.dtype || it->second.shape != o.shape) {
        ThrowStatus(InvalidArgument(fmt::format("output '{}' must be {}[{}], got {}[{}]", n, DTypeName(it->second.dtype),
                                                fmt::join(it->second.shape, ", "), DTypeName(o.dtype), fmt::join(o.shape, ", "))));
      }
      if (!it->second.data.empty()) std::memcpy(o.data, it->second.data.data(), it->second.data.size());
    }
  }

  std::string device_;
  std::unique_ptr<Executable> cpu_;
#ifdef OPFUSE_WITH_CUDA
  std::unique_ptr<jit::KernelCache> private_cache_;  // declared before cuda_: outlives it
  std::unique_ptr<cuda::CudaExecutable> cuda_;
#endif
};

py::dict DlpackInfo(const py::handle& cap) {
  DLManagedTensor* mt = PeekCapsule(cap, "dlpack_info");
  DlInfo i = ReadDl(mt->dl_tensor, "dlpack_info");
  py::dict d;
  d["device_type"] = i.device_type;
  d["device_id"] = i.device_id;
  d["dtype"] = std::string(DTypeName(i.dtype));
  d["shape"] = i.shape;
  d["data_ptr"] = reinterpret_cast<uintptr_t>(i.data);
  return d;
}

py::dict CacheStatsDict(const jit::CacheStats& s) {
  py::dict d;
  d["memory_hits"] = s.memory_hits;
  d["disk_hits"] = s.disk_hits;
  d["misses"] = s.misses;
  d["compiles"] = s.compiles;
  d["compile_ms"] = s.compile_ms;
  d["corrupt_entries"] = s.corrupt_entries;
  d["evictions"] = s.evictions;
  d["disk_write_failures"] = s.disk_write_failures;
  return d;
}

// (available, reason): whether a CUDA device can run programs here.
std::pair<bool, std::string> CudaAvailable() {
#ifdef OPFUSE_WITH_CUDA
  auto d = cuda::QueryDevice();
  if (!d.ok()) return {false, d.status().message()};
  return {true, d->name};
#else
  return {false, "no CUDA device: this opfuse module was built without the CUDA backend (OPFUSE_CUDA=OFF)"};
#endif
}

}  // namespace

void RegisterProgram(py::module_& m) {
  py::class_<Program>(m, "Program", "A graph compiled for one device and one set of input types.")
      .def(py::init<const py::object&, const py::object&, const py::object&, const std::string&,
                    const std::vector<std::pair<std::string, std::vector<int64_t>>>&, const py::dict&, const std::string&,
                    const std::string&>(),
           py::arg("nodes"), py::arg("input_names"), py::arg("output_names"), py::arg("name"), py::arg("types"),
           py::arg("config"), py::arg("device"), py::arg("variant") = "auto")
      .def("run_numpy", &Program::RunNumpy, py::arg("inputs"))
      .def("run_dlpack", &Program::RunDlpack, py::arg("inputs"), py::arg("outputs"), py::arg("stream"))
      .def_property_readonly("outputs", &Program::outputs)
      .def_property_readonly("device", &Program::device)
      .def_property_readonly("steps_per_run", &Program::steps_per_run)
      .def_property_readonly("kernels_per_run", &Program::kernels_per_run)
      .def_property_readonly("fallbacks", &Program::fallbacks)
      .def_property_readonly("compile_ms", &Program::compile_ms)
      .def_property_readonly("groups", &Program::groups)
      .def_property_readonly("graph_text", [](const Program& p) { return PrintGraph(p.graph()); });
  m.def("dlpack_info", &DlpackInfo, py::arg("capsule"), "Peeks at a DLPack capsule without consuming it.");
  m.def("kernel_cache_stats", [] { return CacheStatsDict(jit::KernelCache::Global().Stats()); });
  m.def("clear_kernel_cache_memory", [] { jit::KernelCache::Global().ClearMemory(); });
  m.def("cuda_available", &CudaAvailable);
}

}  // namespace opfuse::py_bind
