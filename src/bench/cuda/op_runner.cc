// See op_runner.h for what a case goes through; this file is the plumbing.
#include "bench/cuda/op_runner.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <cctype>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "bench/harness.h"
#include "bench/cuda/bench_kernels.h"
#include "bench/fill_values.h"
#include "runtime/cpu/cpu_executor.h"
#include "cuda/cuda_check.h"
#include "runtime/cuda/executor.h"
#include "runtime/cuda/stream.h"

namespace opfuse::bench {
namespace {

// Errors after which the CUDA context is unusable: the run stops (the report says so).
bool IsSticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

// Synchronises; a sticky error comes back as Internal("sticky: ...") so the run can stop.
Status SyncChecked(cudaStream_t s) {
  const cudaError_t e = cudaStreamSynchronize(s);
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  if (IsSticky(e) || cudaDeviceSynchronize() != cudaSuccess)
    return Internal(fmt::format("sticky CUDA error, the context is lost: {}: {}", cudaGetErrorName(e), cudaGetErrorString(e)));
  return cuda::CudaStatus(e, "cudaStreamSynchronize");
}
// After a failure: is the context still usable? (A sticky error repeats on every call.)
Status CheckContext() {
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  if (cudaDeviceSynchronize() == cudaSuccess) return Status::Ok();
  return Internal(fmt::format("sticky CUDA error, the context is lost: {}: {}", cudaGetErrorName(e), cudaGetErrorString(e)));
}
bool IsStickyStatus(const Status& s) { return !s.ok() && s.message().rfind("sticky CUDA error", 0) == 0; }

std::string DriverString(const cuda::DeviceInfo& d) {
  const std::string api = fmt::format("CUDA {}.{}", d.driver_version / 1000, (d.driver_version % 1000) / 10);
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (f && std::getline(f, line)) {
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ..." or, for the open
    // modules, "... Open Kernel Module for x86_64  580.159.04 ...": the first word after "Kernel
    // Module" that starts with a digit and has a dot.
    const auto k = line.find("Kernel Module");
    if (k != std::string::npos) {
      std::istringstream ss(line.substr(k + 13));
      for (std::string w; ss >> w;)
        if (std::isdigit(static_cast<unsigned char>(w[0])) && w.find('.') != std::string::npos) return w + " (" + api + ")";
    }
  }
  return api;
}

// The timing of one kind of call (a variant, the same-size copy) under the measuring rules of
// timing.h: warm-up (every set at least once: plans built, nothing allocated later; then more
// calls), the host time per call, then the device time by the case's phase — decode, one CUDA-graph
// replay of R calls over the sets / R (events per call when capture fails, the reason in `note`);
// prefill, events per call. Filled as far as it got; on failure `stage` names the step and the
// status is returned as it came (a sticky error stays recognisable).
struct TimedCalls {
  double host_us = kNaN;
  SampleStats stats;
  std::string method, note;
};
// `tensors`: every buffer the calls read or write (all sets), demoted in L2 before each sample (timing.h).
Status TimeCalls(Harness& h, const Harness::RunFn& run, int sets, bool flush, const std::string& phase, const TimingOptions& t,
                 const std::vector<cuda::DeviceBuffer>& tensors, TimedCalls& out, const char*& stage) {
  cudaStream_t s = h.stream();
  Harness::Spans spans;
  for (const auto& b : tensors) spans.emplace_back(b.get(), b.size());
  h.set_demote_spans(std::move(spans));
  struct Clear {
    Harness& h;
    ~Clear() { h.set_demote_spans({}); }
  } clear{h};
  stage = "warm-up";
  for (int i = 0; i < sets * std::max(t.warmup, 1); ++i) OPFUSE_RETURN_IF_ERROR(run(i));
  OPFUSE_RETURN_IF_ERROR(SyncChecked(s));
  stage = "host timing";
  OPFUSE_ASSIGN_OR_RETURN(out.host_us, h.HostUsPerCall(run, t.host_calls));
  StatusOr<SampleStats> stats = Internal("not timed");
  if (phase == "decode") {
    stage = "capture";
    const int runs = sets * ((std::max(t.graph_runs, 1) + sets - 1) / sets);
    auto g = h.Capture(run, runs);
    if (g.ok()) {
      stats = h.TimeGraph(*g, runs, flush, t);
      out.method = fmt::format("graph x{}", runs);  // one CUDA-graph replay of `runs` calls, / runs
    } else {
      if (IsStickyStatus(g.status())) return g.status();
      OPFUSE_RETURN_IF_ERROR(SyncChecked(s));
      out.note = fmt::format("CUDA-graph capture failed ({}); timed with events per call, each with the event floor",
                             g.status().message());
    }
  }
  if (out.method.empty()) {
    stats = h.TimeEvents(run, flush, t);
    out.method = "events";
  }
  stage = "timing";
  if (!stats.ok()) return stats.status();
  OPFUSE_RETURN_IF_ERROR(SyncChecked(s));
  out.stats = *stats;
  return Status::Ok();
}

// The device buffers of one case: K sets of inputs (shared ones once) and outputs.
struct CaseBuffers {
  std::vector<cuda::DeviceBuffer> owned;
  std::vector<std::vector<void*>> in, out;  // [set][case input/output index]
  int sets = 0;
  bool flush = true;  // K sets together stay under 2x L2: flush before each sample
};

// How many sets of `rotated` bytes a timed call rotates over (beside `shared` bytes every set
// uses): K = ceil(2 L2 / rotated) within [1, max_sets] and half of free memory (the rest is for the
// executor's intermediates and workspaces); flush L2 before each sample when the K sets together
// stay under 2 L2. `what` names the data in the error when not even one set fits.
struct SetPlan {
  int sets = 0;
  bool flush = true;
};
StatusOr<SetPlan> PlanSets(const std::string& what, int64_t rotated, int64_t shared, const Harness& h, const TimingOptions& t) {
  rotated = std::max<int64_t>(rotated, 1);
  const int64_t flush_target = kL2Factor * h.device().l2_bytes;
  int64_t k = std::clamp<int64_t>((flush_target + rotated - 1) / rotated, 1, std::max(t.max_sets, 1));
  size_t free_b = 0, total_b = 0;
  OPFUSE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const int64_t budget = static_cast<int64_t>(free_b / 2) - shared;
  k = std::min<int64_t>(k, budget / rotated);
  if (k < 1)
    return Internal(fmt::format("{} needs {:.2f} GiB for one input/output set; {:.2f} GiB of device memory is free", what,
                                static_cast<double>(rotated + shared) / (1ull << 30), static_cast<double>(free_b) / (1ull << 30)));
  return SetPlan{static_cast<int>(k), k * rotated < flush_target};
}

// The seed of input i of set `set` (every value of a case is a function of the run's seed).
uint64_t InputSeed(uint64_t case_seed, int set, size_t i) {
  return SplitMix64(case_seed + static_cast<uint64_t>(set) * 1000 + i);
}
uint64_t CaseSeed(uint64_t seed, const OpCase& c) { return SplitMix64(seed ^ std::hash<std::string>{}(c.id)); }

// Fills the inputs of set `set` in place (a shared input only with set 0) from `case_seed`.
Status FillSet(const OpCase& c, const CaseBuffers& b, int set, uint64_t case_seed, Dist dist, Harness& h) {
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const TensorSpec& x = c.inputs[i];
    if (!x.rotate && set > 0) continue;
    const uint64_t sd = InputSeed(case_seed, set, i);
    if (x.fill == Fill::kIds)
      OPFUSE_RETURN_IF_ERROR(
          LaunchFillIds(static_cast<int32_t*>(b.in[set][i]), x.numel(), x.id_range, sd, h.device().sm_count, h.stream()));
    else
      OPFUSE_RETURN_IF_ERROR(LaunchFill(b.in[set][i], x.dtype, x.numel(), sd, x.fill == Fill::kPositive, dist, FillRowLen(x.shape),
                                        h.device().sm_count, h.stream()));
  }
  return Status::Ok();
}

StatusOr<CaseBuffers> AllocateCase(const OpCase& c, Harness& h, const TimingOptions& t, uint64_t seed,
                                   Dist dist = Dist::kUniform) {
  cudaStream_t s = h.stream();
  int64_t rotated = 0, shared = 0;
  for (const auto& x : c.inputs) (x.rotate ? rotated : shared) += x.nbytes();
  for (const auto& x : c.outputs) rotated += x.nbytes();
  OPFUSE_ASSIGN_OR_RETURN(SetPlan plan, PlanSets(c.id, rotated, shared, h, t));
  CaseBuffers b;
  b.sets = plan.sets;
  b.flush = plan.flush;
  b.in.assign(b.sets, std::vector<void*>(c.inputs.size(), nullptr));
  b.out.assign(b.sets, std::vector<void*>(c.outputs.size(), nullptr));
  for (int set = 0; set < b.sets; ++set) {
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const TensorSpec& x = c.inputs[i];
      if (!x.rotate && set > 0) {
        b.in[set][i] = b.in[0][i];
        continue;
      }
      OPFUSE_ASSIGN_OR_RETURN(auto buf, cuda::DeviceBuffer::Make(h.allocator(), static_cast<size_t>(x.nbytes()), s));
      b.in[set][i] = buf.get();
      b.owned.push_back(std::move(buf));
    }
    for (size_t i = 0; i < c.outputs.size(); ++i) {
      OPFUSE_ASSIGN_OR_RETURN(auto buf, cuda::DeviceBuffer::Make(h.allocator(), static_cast<size_t>(c.outputs[i].nbytes()), s));
      b.out[set][i] = buf.get();
      b.owned.push_back(std::move(buf));
    }
    OPFUSE_RETURN_IF_ERROR(FillSet(c, b, set, CaseSeed(seed, c), dist, h));
  }
  OPFUSE_RETURN_IF_ERROR(SyncChecked(s));
  return b;
}

// Rows `rows` of a device tensor laid out as `full` (dim 0 = rows when `leading`), as a host
// tensor of shape `sub`.
StatusOr<HostTensor> Download(const void* dev, const TensorSpec& full, const TensorSpec& sub, const std::vector<int64_t>& rows,
                              cudaStream_t s) {
  HostTensor t(full.dtype, sub.shape);
  const bool all = !full.rows_leading || static_cast<int64_t>(rows.size()) == full.shape[0];
  if (all) {
    if (t.data.size() != static_cast<size_t>(full.nbytes()))
      return Internal(fmt::format("check: {} reference shape does not match the case", full.name));
    OPFUSE_CUDA_CHECK(cudaMemcpyAsync(t.data.data(), dev, t.data.size(), cudaMemcpyDeviceToHost, s));
  } else {
    const size_t row_bytes = static_cast<size_t>(full.nbytes() / full.shape[0]);
    if (t.data.size() != row_bytes * rows.size())
      return Internal(fmt::format("check: {} reference rows do not match the case", full.name));
    for (size_t j = 0; j < rows.size(); ++j)
      OPFUSE_CUDA_CHECK(cudaMemcpyAsync(t.data.data() + j * row_bytes, static_cast<const uint8_t*>(dev) + rows[j] * row_bytes,
                                        row_bytes, cudaMemcpyDeviceToHost, s));
  }
  OPFUSE_RETURN_IF_ERROR(SyncChecked(s));
  return t;
}

// The CPU reference of a case on the rows of `plan`, from the device inputs `ins` (case order).
struct Reference {
  CheckPlan plan;
  std::map<std::string, HostTensor> inputs;   // by name, the rows the reference saw
  std::map<std::string, HostTensor> outputs;  // by name
  std::string error;                           // the reference could not run: nothing is checked
};

Reference ComputeReference(const OpCase& c, const std::vector<void*>& ins, const StatusOr<CheckPlan>& plan, cudaStream_t s,
                           Status* fatal) {
  Reference ref;
  if (!plan.ok()) {
    ref.error = plan.status().message();
    return ref;
  }
  ref.plan = *plan;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    auto t = Download(ins[i], c.inputs[i], ref.plan.reference.inputs[i], ref.plan.rows, s);
    if (!t.ok()) {
      if (IsStickyStatus(t.status())) *fatal = t.status();
      ref.error = t.status().message();
      return ref;
    }
    ref.inputs[c.inputs[i].name] = std::move(*t);
  }
  auto g = ParseGraph(ref.plan.reference.graph);
  if (!g.ok()) {
    ref.error = "reference graph: " + g.status().message();
    return ref;
  }
  auto out = RunGraphCpu(*g, ref.inputs);
  if (!out.ok()) {
    ref.error = "CPU reference: " + out.status().message();
    return ref;
  }
  ref.outputs = std::move(*out);
  return ref;
}

// A whole device buffer, downloaded.
StatusOr<std::vector<uint8_t>> DownloadAll(const void* dev, size_t bytes, cudaStream_t s) {
  std::vector<uint8_t> h(bytes);
  OPFUSE_CUDA_CHECK(cudaMemcpyAsync(h.data(), dev, bytes, cudaMemcpyDeviceToHost, s));
  OPFUSE_RETURN_IF_ERROR(SyncChecked(s));
  return h;
}

// Every output of a case (device pointers in case order), whole, as host tensors.
StatusOr<std::vector<HostTensor>> DownloadOutputs(const OpCase& c, const std::vector<void*>& outs, cudaStream_t s) {
  std::vector<HostTensor> r;
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    HostTensor t(c.outputs[i].dtype, c.outputs[i].shape);
    OPFUSE_CUDA_CHECK(cudaMemcpyAsync(t.data.data(), outs[i], t.data.size(), cudaMemcpyDeviceToHost, s));
    r.push_back(std::move(t));
  }
  OPFUSE_RETURN_IF_ERROR(SyncChecked(s));
  return r;
}

// A 64-bit checksum of a whole device buffer (8-byte words through SplitMix64, position-dependent).
StatusOr<uint64_t> DeviceChecksum(const void* dev, size_t bytes, cudaStream_t s) {
  OPFUSE_ASSIGN_OR_RETURN(std::vector<uint8_t> h, DownloadAll(dev, bytes, s));
  uint64_t sum = bytes;
  size_t i = 0;
  for (; i + 8 <= h.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, h.data() + i, 8);
    sum = SplitMix64(sum ^ w) + i;
  }
  for (; i < h.size(); ++i) sum = SplitMix64(sum ^ h[i]) + i;
  return sum;
}

// The checksum of every distinct input buffer of `sets` (by device pointer).
using InputSums = std::map<const void*, uint64_t>;
StatusOr<InputSums> ChecksumInputs(const OpCase& c, const std::vector<std::vector<void*>>& sets, cudaStream_t s) {
  InputSums sums;
  for (const auto& ins : sets)
    for (size_t i = 0; i < c.inputs.size(); ++i)
      if (!sums.count(ins[i])) {
        OPFUSE_ASSIGN_OR_RETURN(sums[ins[i]], DeviceChecksum(ins[i], static_cast<size_t>(c.inputs[i].nbytes()), s));
      }
  return sums;
}

// One broken rule (kRule*) and what broke it.
struct Finding {
  std::string rule, text;
};
std::string Describe(const std::vector<Finding>& f) {
  std::vector<std::string> parts;
  for (const auto& x : f) parts.push_back(x.rule + ": " + x.text);
  return fmt::format("{}", fmt::join(parts, "; "));
}

// Inputs whose checksum differs from `before` (names; `tag` says which call).
Status CheckInputsUnchanged(const OpCase& c, const std::vector<std::vector<void*>>& sets, const InputSums& before,
                            const std::string& prefix, const std::string& when, cudaStream_t s, std::vector<Finding>& f) {
  OPFUSE_ASSIGN_OR_RETURN(InputSums now, ChecksumInputs(c, sets, s));
  std::set<std::string> changed;
  for (const auto& ins : sets)
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      auto it = before.find(ins[i]);
      if (it != before.end() && it->second != now.at(ins[i])) changed.insert(c.inputs[i].name);
    }
  for (const auto& name : changed) f.push_back({kRuleInputs, fmt::format("{}input {} was modified {}", prefix, name, when)});
  return Status::Ok();
}

// opfuse's op-by-op path on the case (Variant::kUnfused), the reference of the full-output rule:
// one library kernel or cuBLASLt call per op, checked against the CPU reference before use.
struct OpByOp {
  std::unique_ptr<cuda::CudaExecutable> exe;
  std::vector<int> in_order, out_order;   // the executable's inputs/outputs as case indices
  std::vector<cuda::DeviceBuffer> outs;   // case order
  std::string error;                      // why the full-output rule is not applied
  // The outputs (case order, whole) of one run on `ins` (case order).
  StatusOr<std::vector<HostTensor>> Run(const OpCase& c, const std::vector<void*>& ins, cudaStream_t s) const {
    std::vector<const void*> xi;
    std::vector<void*> xo;
    for (int i : in_order) xi.push_back(ins[i]);
    for (int i : out_order) xo.push_back(outs[i].get());
    const Bindings none;
    OPFUSE_RETURN_IF_ERROR(exe->Run(xi, xo, none, s));
    std::vector<void*> case_outs;
    for (const auto& o : outs) case_outs.push_back(o.get());
    return DownloadOutputs(c, case_outs, s);
  }
};

// The executable's input/output order as indices into the case's; InvalidArgument naming a value
// the case does not have.
Status MatchOrder(const OpCase& c, const cuda::CudaExecutable& x, std::vector<int>& in_order, std::vector<int>& out_order) {
  std::map<std::string, int> in_index, out_index;
  for (size_t i = 0; i < c.inputs.size(); ++i) in_index[c.inputs[i].name] = static_cast<int>(i);
  for (size_t i = 0; i < c.outputs.size(); ++i) out_index[c.outputs[i].name] = static_cast<int>(i);
  for (int vid : x.graph().inputs) {
    auto it = in_index.find(x.graph().values[vid].name);
    if (it == in_index.end())
      return InvalidArgument(fmt::format("executable input '{}' is not an input of the case", x.graph().values[vid].name));
    in_order.push_back(it->second);
  }
  for (int vid : x.graph().outputs) {
    auto it = out_index.find(x.graph().values[vid].name);
    if (it == out_index.end())
      return InvalidArgument(fmt::format("executable output '{}' is not an output of the case", x.graph().values[vid].name));
    out_order.push_back(it->second);
  }
  return Status::Ok();
}

// The sampled rows of whole host outputs, for the CPU reference.
HostTensor Rows(const HostTensor& full, const TensorSpec& spec, const TensorSpec& sub, const std::vector<int64_t>& rows) {
  if (!spec.rows_leading || static_cast<int64_t>(rows.size()) == spec.shape[0]) return full;
  HostTensor t(full.dtype, sub.shape);
  const size_t row_bytes = full.data.size() / static_cast<size_t>(spec.shape[0]);
  for (size_t j = 0; j < rows.size() && (j + 1) * row_bytes <= t.data.size(); ++j)
    std::memcpy(t.data.data() + j * row_bytes, full.data.data() + rows[j] * row_bytes, row_bytes);
  return t;
}

StatusOr<OpByOp> MakeOpByOp(const OpCase& c, const Graph& graph, const FusionConfig& config, Harness& h,
                            const std::vector<void*>& ins, const Reference& ref) {
  OpByOp r;
  auto exe = cuda::CudaExecutable::Create(graph, BenchExecutorOptions(config, cuda::Variant::kUnfused));
  if (!exe.ok()) {
    if (IsStickyStatus(exe.status())) return exe.status();
    r.error = "op-by-op path: " + exe.status().message();
    return r;
  }
  r.exe = std::move(*exe);
  if (Status st = MatchOrder(c, *r.exe, r.in_order, r.out_order); !st.ok()) {
    r.exe.reset();
    r.error = "op-by-op path: " + st.message();
    return r;
  }
  for (const auto& o : c.outputs) {
    OPFUSE_ASSIGN_OR_RETURN(auto buf, cuda::DeviceBuffer::Make(h.allocator(), static_cast<size_t>(o.nbytes()), h.stream()));
    r.outs.push_back(std::move(buf));
  }
  if (!ref.error.empty()) {
    r.exe.reset();
    r.error = "op-by-op path not checked: " + ref.error;
    return r;
  }
  // Trust, but verify: the op-by-op outputs on trial 0 against the CPU reference.
  auto got = r.Run(c, ins, h.stream());
  if (!got.ok()) {
    if (IsStickyStatus(got.status())) return got.status();
    r.exe.reset();
    r.error = "op-by-op path: " + got.status().message();
    return r;
  }
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const HostTensor sub = Rows((*got)[i], c.outputs[i], ref.plan.reference.outputs[i], ref.plan.rows);
    const double e = RelativeError(sub, ref.outputs.at(c.outputs[i].name));
    if (!(e <= ErrorBound(c.outputs[i].dtype, c.op))) {
      r.exe.reset();
      r.error = fmt::format("op-by-op path disagrees with the CPU reference ({}: rel_err {:.2e})", c.outputs[i].name, e);
      return r;
    }
  }
  return r;
}

// What a check compares a call's outputs with: the CPU reference of its inputs on some rows
// (`ref`, may be null) and/or opfuse's op-by-op path on the whole output (`opbyop`, may be null).
struct Against {
  const Reference* ref = nullptr;
  const OpByOp* opbyop = nullptr;
};

// Checks the outputs `outs` of a call on `ins` (case order, already synchronised). `rule` is the
// rule every finding is reported under, or "" for the per-kind rules of a check trial (reference,
// unwritten, all-zero, full-output). `tag` prefixes each finding ("trial 2 (outliers): ").
Status CheckOutputs(const OpCase& c, const std::vector<void*>& ins, const std::vector<void*>& outs, const Against& against,
                    const char* rule, const std::string& tag, bool reject_all_zero, cudaStream_t s, double& worst,
                    std::vector<Finding>& f) {
  auto add = [&](const char* kind, std::string text) { f.push_back({*rule ? rule : kind, tag + std::move(text)}); };
  OPFUSE_ASSIGN_OR_RETURN(std::vector<HostTensor> whole, DownloadOutputs(c, outs, s));
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const TensorSpec& o = c.outputs[i];
    const double bound = ErrorBound(o.dtype, c.op);
    if (against.ref) {
      const Reference& ref = *against.ref;
      auto it = ref.outputs.find(o.name);
      if (it == ref.outputs.end()) return Internal(fmt::format("CPU reference has no output '{}'", o.name));
      const double e = RelativeError(Rows(whole[i], o, ref.plan.reference.outputs[i], ref.plan.rows), it->second);
      if (!(e <= bound)) add(kRuleReference, fmt::format("{}: rel_err {:.2e} > {:.0e} on {}", o.name, e, bound, ref.plan.description));
      worst = std::max(worst, e);
    }
    const OutputScan scan = ScanOutput(whole[i].data.data(), o.dtype, o.numel());
    if (scan.nan) add(kRuleUnwritten, fmt::format("{}: {} of {} elements NaN (unwritten?)", o.name, scan.nan, o.numel()));
    if (reject_all_zero && IsFloat(o.dtype) && scan.zero == o.numel())
      add(kRuleAllZero, fmt::format("{}: all {} elements are zero", o.name, o.numel()));
  }
  if (against.opbyop && against.opbyop->exe) {
    OPFUSE_ASSIGN_OR_RETURN(std::vector<HostTensor> expect, against.opbyop->Run(c, ins, s));
    for (size_t i = 0; i < c.outputs.size(); ++i) {
      const TensorSpec& o = c.outputs[i];
      // Two approximations of the same values, each within the bound of the exact one.
      const double bound = 2 * ErrorBound(o.dtype, c.op);
      const RowError e = RowwiseRelativeError(whole[i], expect[i]);
      if (!(e.worst <= bound))
        add(kRuleFullOutput, fmt::format("{}: row {} differs from opfuse's op-by-op path by {:.2e} > {:.0e}", o.name, e.row,
                                         e.worst, bound));
    }
  }
  return Status::Ok();
}

// One checked call per trial: trial 0 is input set 0 of the timing sets, the others have buffers
// of their own (fresh inputs and outputs, the trial's distribution). `call` enqueues one call on
// given buffers (case order).
using CallFn = std::function<Status(const std::vector<void*>& ins, const std::vector<void*>& outs)>;
struct TrialView {
  const CaseBuffers* buffers;  // set 0 is the trial's
  const Reference* ref;
  std::string tag;             // "trial 2 (row-scaled): " ("" for a single trial)
  const InputSums* sums = nullptr;  // the inputs' checksums before any call (eval_rules)
};
Status CheckVariant(const OpCase& c, const std::vector<TrialView>& trials, const CallFn& call, cudaStream_t s,
                    bool reject_all_zero, const OpByOp* opbyop, VariantResult& v, std::vector<Finding>& f) {
  for (const TrialView& t : trials) {
    const CaseBuffers& b = *t.buffers;
    if (!t.ref->error.empty()) {
      v.check_error = "not checked: " + t.ref->error;
      return Status::Ok();
    }
    for (size_t i = 0; i < c.outputs.size(); ++i)
      OPFUSE_CUDA_CHECK(cudaMemsetAsync(b.out[0][i], 0xFF, static_cast<size_t>(c.outputs[i].nbytes()), s));
    OPFUSE_RETURN_IF_ERROR(call(b.in[0], b.out[0]));
    OPFUSE_RETURN_IF_ERROR(SyncChecked(s));
    // Inputs first: a call that wrote its inputs is named for that, whatever its outputs show.
    if (t.sums) OPFUSE_RETURN_IF_ERROR(CheckInputsUnchanged(c, {b.in[0]}, *t.sums, t.tag, "by a checked call", s, f));
    double worst = Has(v.rel_err) ? v.rel_err : 0;
    OPFUSE_RETURN_IF_ERROR(CheckOutputs(c, b.in[0], b.out[0], {t.ref, opbyop}, "", t.tag, reject_all_zero, s, worst, f));
    v.rel_err = worst;
    if (!t.sums) {
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        const TensorSpec& x = c.inputs[i];
        const Reference& ref = *t.ref;
        OPFUSE_ASSIGN_OR_RETURN(HostTensor now, Download(b.in[0][i], x, ref.plan.reference.inputs[i], ref.plan.rows, s));
        if (now.data != ref.inputs.at(x.name).data) f.push_back({kRuleInputs, t.tag + fmt::format("input {} was modified", x.name)});
      }
    }
    if (!f.empty()) break;  // the first failing trial decides
  }
  return Status::Ok();
}

// opfuse eval's checks after timing (OpBenchOptions::eval_rules), on every timed set `b`:
// the inputs are what they were (checksums), the outputs the last timed calls left are right, and
// after refilling every input in place with fresh values (a distribution per set) one unpoisoned
// call per set gives the right answer again. Then the sets are filled back with their original
// values (deterministic in the seed) for the next variant.
Status CheckAfterTiming(const OpCase& c, const CaseBuffers& b, const InputSums& sums, const std::function<Status(int)>& run,
                        uint64_t case_seed, int check_rows, const OpByOp* opbyop, Harness& h, Status* fatal,
                        std::vector<Finding>& f) {
  cudaStream_t s = h.stream();
  OPFUSE_RETURN_IF_ERROR(CheckInputsUnchanged(c, b.in, sums, "", "during timing", s, f));
  if (!f.empty()) return Status::Ok();
  // Compares set k's outputs with its inputs: the op-by-op path on the whole output when there is
  // one (it was checked against the CPU on trial 0), else the CPU reference on random rows.
  double worst = 0;
  auto check_set = [&](int k, const char* rule, const std::string& tag) -> Status {
    Reference ref;
    Against against{nullptr, opbyop && opbyop->exe ? opbyop : nullptr};
    if (!against.opbyop) {
      ref = ComputeReference(c, b.in[k], PlanCheck(c, check_rows, SplitMix64(case_seed ^ (0x7e57ull + k))), s, fatal);
      if (!ref.error.empty()) return Internal("reference: " + ref.error);
      against.ref = &ref;
    }
    return CheckOutputs(c, b.in[k], b.out[k], against, rule, tag, false, s, worst, f);
  };
  for (int k = 0; k < b.sets && f.empty(); ++k)
    OPFUSE_RETURN_IF_ERROR(check_set(k, kRuleTimedOutputs, fmt::format("set {}: ", k)));
  if (!f.empty()) return Status::Ok();

  const uint64_t fresh = SplitMix64(case_seed ^ 0xaf7e47a11e5ull);
  for (int k = 0; k < b.sets; ++k)
    OPFUSE_RETURN_IF_ERROR(FillSet(c, b, k, fresh, kEvalDists[(k + 1) % std::size(kEvalDists)], h));
  OPFUSE_RETURN_IF_ERROR(SyncChecked(s));
  OPFUSE_ASSIGN_OR_RETURN(InputSums refilled, ChecksumInputs(c, b.in, s));
  for (int k = 0; k < b.sets; ++k) OPFUSE_RETURN_IF_ERROR(run(k));
  OPFUSE_RETURN_IF_ERROR(SyncChecked(s));
  for (int k = 0; k < b.sets && f.empty(); ++k)
    OPFUSE_RETURN_IF_ERROR(check_set(k, kRuleAfterTiming,
                                     fmt::format("set {} refilled ({}): ", k, DistName(kEvalDists[(k + 1) % std::size(kEvalDists)]))));
  if (f.empty()) OPFUSE_RETURN_IF_ERROR(CheckInputsUnchanged(c, b.in, refilled, "", "by a call after timing", s, f));

  for (int k = 0; k < b.sets; ++k) OPFUSE_RETURN_IF_ERROR(FillSet(c, b, k, case_seed, Dist::kUniform, h));
  OPFUSE_ASSIGN_OR_RETURN(InputSums restored, ChecksumInputs(c, b.in, s));
  if (restored != sums) return Internal("the timed input sets could not be restored after the after-timing check");
  return Status::Ok();
}

// What eval_rules adds to a case: the op-by-op reference, the timing sets' input checksums, the
// case's seed (for the refills after timing).
struct EvalCase {
  const OpByOp* opbyop = nullptr;
  const InputSums* sums = nullptr;
  uint64_t case_seed = 0;
};

// Create, check and time one variant. Returns a non-OK status only for a sticky CUDA error.
// `ev`: opfuse eval's rules (null for bench ops).
Status RunVariant(const OpCase& c, const Graph& graph, const CaseBuffers& b, const std::vector<TrialView>& trials,
                  Harness& h, const FusionConfig& config, const OpBenchOptions& o, const EvalCase* ev, VariantResult& v,
                  std::string* signature) {
  cudaStream_t s = h.stream();
  CallFn call;                         // one call on given buffers (case order): the check trials
  std::function<Status(int)> run;      // one call on timing set i mod K
  std::unique_ptr<cuda::CudaExecutable> exe_owner;
  std::vector<std::vector<const void*>> ins(b.sets);
  std::vector<std::vector<void*>> outs(b.sets);
  CandidateKernel cand;
  const Bindings none;
  if (v.name == "candidate") {
    if (!o.candidate) {
      v.error = "variant 'candidate' without a candidate kernel";
      return Status::Ok();
    }
    auto k = o.candidate(c);
    if (!k.ok()) {
      v.error = "create: " + k.status().message();
      return IsStickyStatus(k.status()) ? k.status() : Status::Ok();
    }
    cand = std::move(*k);
    v.compile_ms = cand.compile_ms;
    v.kernels = cand.kernels;
    v.kernels_per_run = static_cast<int>(cand.kernels.size());
    for (const auto& k2 : cand.kernels) *signature += "candidate:" + k2 + ";";
    call = [&](const std::vector<void*>& in, const std::vector<void*>& out) { return cand.launch(in, out, s); };
    run = [&](int i) { return cand.launch(b.in[i % b.sets], b.out[i % b.sets], s); };
  } else {
    // `cublaslt`: a fuse_matmul group with its matmuls on cuBLASLt and its other ops' library kernels
    // around them (the GEMV off), the form smart_schedule runs as gemv_max_rows 0.
    const bool lt_form = v.name == "cublaslt";
    if (lt_form && (!c.unfused_is_library_ops || c.rows > kDecodeGemvMaxRows)) {
      v.error = c.unfused_is_library_ops
                    ? fmt::format("not measured: above {} rows the group's ops one by one are its cuBLASLt form",
                                  kDecodeGemvMaxRows)
                    : "not measured: only a fuse_matmul group has a cuBLASLt form";
      return Status::Ok();
    }
    auto variant = cuda::ParseVariant(lt_form ? "library" : v.name);
    if (!variant.ok()) {
      v.error = variant.status().message();
      return Status::Ok();
    }
    if (c.unfused_is_library_ops && *variant == cuda::Variant::kJit) {
      v.error = "not measured: a fuse_matmul group has no JIT form (its GEMV is a library kernel)";
      return Status::Ok();
    }
    FusionConfig vconfig = config;
    if (c.unfused_is_library_ops && *variant == cuda::Variant::kUnfused) {
      *variant = cuda::Variant::kLibrary;
      vconfig.disabled.insert("fuse_matmul");
    }
    cuda::ExecutorOptions eo = BenchExecutorOptions(vconfig, *variant);
    // the fused group as smart_schedule may run it: one GEMV launch up to the GEMV's capacity
    if (c.unfused_is_library_ops) eo.gemv_group_max_rows = kGemvCapacityRows;
    if (lt_form) eo.gemv = false;
    auto exe = cuda::CudaExecutable::Create(graph, eo);
    if (!exe.ok()) {
      v.error = "create: " + exe.status().message();
      return IsStickyStatus(exe.status()) ? exe.status() : Status::Ok();
    }
    exe_owner = std::move(*exe);
    cuda::CudaExecutable& x = *exe_owner;
    v.compile_ms = x.compile_ms();
    for (const auto& st : x.steps()) {
      v.kernels.push_back(st.name);
      *signature += st.kind + ":" + st.name + ";";
    }
    if (!x.fallbacks().empty()) v.note = fmt::format("{}", fmt::join(x.fallbacks(), "; "));

    std::vector<int> in_order, out_order;
    if (Status st = MatchOrder(c, x, in_order, out_order); !st.ok()) {
      v.error = st.message();
      return Status::Ok();
    }
    for (int set = 0; set < b.sets; ++set) {
      for (int i : in_order) ins[set].push_back(b.in[set][i]);
      for (int i : out_order) outs[set].push_back(b.out[set][i]);
    }
    call = [&x, in_order, out_order, &none, s](const std::vector<void*>& in, const std::vector<void*>& out) {
      std::vector<const void*> xi;
      std::vector<void*> xo;
      for (int i : in_order) xi.push_back(in[i]);
      for (int i : out_order) xo.push_back(out[i]);
      return x.Run(xi, xo, none, s);
    };
    run = [&](int i) { return x.Run(ins[i % b.sets], outs[i % b.sets], none, s); };
  }
  // Any failure below is the variant's error unless the context is gone.
  auto fail = [&](const Status& st, const char* stage) {
    v.error = fmt::format("{}: {}", stage, st.message());
    return IsStickyStatus(st) ? st : Status::Ok();
  };

  std::vector<Finding> findings;
  auto record = [&] {
    v.correct = findings.empty();
    if (!findings.empty()) {
      v.rule = findings.front().rule;
      v.check_error = Describe(findings);
    }
  };
  if (Status st = CheckVariant(c, trials, call, s, o.reject_all_zero, ev ? ev->opbyop : nullptr, v, findings); !st.ok())
    return fail(st, "check run");
  const bool checked = v.check_error.empty() || !findings.empty();  // else "not checked: <why>", still timed
  if (checked) record();
  if (exe_owner) {  // counted from the plan the check run used
    v.kernels_per_run = exe_owner->kernels_per_run();
    v.pdl_launches = std::max(0, exe_owner->pdl_launches_per_run());
  }
  TimedCalls tc;
  const char* stage = "";
  const Status timed = TimeCalls(h, run, b.sets, b.flush, c.phase, o.timing, b.owned, tc, stage);
  v.host_us = tc.host_us;
  v.method = tc.method;
  // said where it matters: a graph replay, where PDL overlaps each launch with the call before
  if (v.pdl_launches > 0 && v.method.rfind("graph", 0) == 0)
    v.method += fmt::format(", PDL {}/{} launches", v.pdl_launches, v.kernels_per_run);
  if (!tc.note.empty()) v.note += fmt::format("{}{}", v.note.empty() ? "" : "; ", tc.note);
  if (!timed.ok()) return fail(timed, stage);
  v.us = tc.stats.median_us;
  v.us_min = tc.stats.min_us;
  v.us_p90 = tc.stats.p90_us;
  v.samples = tc.stats.samples;
  if (ev && ev->sums && checked && findings.empty()) {
    Status fatal;
    const Status st = CheckAfterTiming(c, b, *ev->sums, run, ev->case_seed, o.check_rows, ev->opbyop, h, &fatal, findings);
    if (!fatal.ok()) return fatal;
    if (!st.ok()) return fail(st, "after-timing check");
    record();
  }
  return Status::Ok();
}

// A copy of `c.bytes` bytes (half read, half written: the bytes the case moves) with the ceiling's
// 16-byte copy kernel, timed by the variants' rules (PlanSets with all of it rotated, TimeCalls).
// At 16384 x 2048 the 1 GiB copy ceiling is out of reach for any kernel timed per call (the events'
// fixed cost, docs/BENCHMARKS.md, bench ops); this is the reference at the size.
StatusOr<std::pair<double, std::string>> TimeSameSizeCopy(const OpCase& c, Harness& h, const TimingOptions& t) {
  cudaStream_t s = h.stream();
  const int64_t half = std::max<int64_t>(16, (c.bytes / 2 + 15) / 16 * 16);
  OPFUSE_ASSIGN_OR_RETURN(SetPlan plan, PlanSets("the same-size copy", 2 * half, 0, h, t));
  const int k = plan.sets;
  std::vector<cuda::DeviceBuffer> bufs;  // set i: source 2i, destination 2i + 1
  for (int64_t i = 0; i < k; ++i) {
    OPFUSE_ASSIGN_OR_RETURN(auto a, cuda::DeviceBuffer::Make(h.allocator(), static_cast<size_t>(half), s));
    OPFUSE_ASSIGN_OR_RETURN(auto b, cuda::DeviceBuffer::Make(h.allocator(), static_cast<size_t>(half), s));
    OPFUSE_RETURN_IF_ERROR(LaunchFillUniform(a.get(), DType::kF32, half / 4, 0xc0b1 + static_cast<uint64_t>(i), false,
                                             h.device().sm_count, s));
    bufs.push_back(std::move(a));
    bufs.push_back(std::move(b));
  }
  auto run = [&](int i) {
    return LaunchCopy16(bufs[2 * (i % k)].get(), bufs[2 * (i % k) + 1].get(), static_cast<size_t>(half), s);
  };
  TimedCalls tc;
  const char* stage = "";
  if (Status st = TimeCalls(h, run, k, plan.flush, c.phase, t, bufs, tc, stage); !st.ok())
    return IsStickyStatus(st) ? st : Internal(fmt::format("{}: {}", stage, st.message()));
  return std::make_pair(tc.stats.median_us, fmt::format("16-byte copy kernel, {} B each way, {} over {} set(s){}{}", half, tc.method,
                                                        k, plan.flush ? ", L2 flushed" : "", tc.note.empty() ? "" : "; " + tc.note));
}

}  // namespace

cuda::ExecutorOptions BenchExecutorOptions(const FusionConfig& config, cuda::Variant variant) {
  cuda::ExecutorOptions eo;
  eo.config = config;
  eo.variant = variant;
  if (variant == cuda::Variant::kLibrary || variant == cuda::Variant::kJit) eo.config.min_tensor_elements = 0;
  eo.jit_single_ops = true;
  return eo;
}

StatusOr<BenchReport> RunOpBench(const OpSuite& suite, const OpBenchOptions& o) {
  OPFUSE_ASSIGN_OR_RETURN(cuda::DeviceInfo dev, cuda::QueryDevice());
  OPFUSE_ASSIGN_OR_RETURN(FusionConfig config, FusionConfig::FromEnv());
  for (const auto& v : o.variants)
    if (v == "candidate" ? !o.candidate : v != "cublaslt" && !cuda::ParseVariant(v).ok())
      return InvalidArgument(fmt::format("unknown variant '{}' (auto, unfused, library, jit, cublaslt{})", v,
                                         o.candidate ? ", candidate" : ""));
  OPFUSE_CUDA_CHECK(cudaSetDevice(dev.ordinal));
  cudaStream_t stream = nullptr;
  OPFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { (void)cuda::DestroyStream(s); }
  } guard{stream};
  cuda::CachingAllocator& alloc = cuda::CachingAllocator::ForDevice(dev.ordinal);
  OPFUSE_ASSIGN_OR_RETURN(auto harness, Harness::Create(dev, stream, alloc));

  BenchReport r;
  r.device.name = dev.name;
  r.device.arch = dev.arch;
  r.device.sm_count = dev.sm_count;
  r.device.l2_bytes = dev.l2_bytes;
  r.device.memory_bytes = dev.total_memory_bytes;
  r.device.driver = DriverString(dev);
  r.device.runtime = fmt::format("CUDA runtime {}.{}", dev.runtime_version / 1000, (dev.runtime_version % 1000) / 10);
  r.command = o.command;
  r.date = UtcNow();
  r.dtype = suite.cases.empty() ? "bf16" : DTypeName(suite.cases.front().dtype);
  r.timing = o.timing.ToJson();
  r.timing["variants"] = o.variants;
  r.timing["check_rows"] = o.check_rows;
  r.timing["check_trials"] = o.check_trials;
  r.timing["method"] =
      "CUDA events after warm-up; median of samples; before each sample the case's tensors demoted to normal L2 "
      "priority (undoes evict_last tags), then L2 flushed (2x L2 memset) when the rotated sets "
      "fit in 2x L2; a gate kernel before the start event, opened 5 us after the GPU waits at it with the call "
      "already enqueued; decode sizes: one CUDA-graph replay of R calls / R (launches with programmatic dependent launch, "
      "`PDL k/n` in a variant's method, overlap the call before)";
  r.skipped = suite.skipped;

  // Ceilings first: the copy kernel over 1 GiB, cuBLASLt 8192^3 of the run's dtype.
  if (o.measure_copy) {
    OPFUSE_ASSIGN_OR_RETURN(CopyCeiling copy, MeasureCopyCeiling(*harness));
    r.ceilings.copy_kernel_gbps = copy.kernel_gbps;
    r.ceilings.memcpy_gbps = copy.memcpy_gbps;
    r.ceilings.copy_gbps = std::max(copy.kernel_gbps, copy.memcpy_gbps);
    r.ceilings.copy_bytes = copy.bytes;
    OPFUSE_ASSIGN_OR_RETURN(r.ceilings.event_floor_us, MeasureEventFloorUs(*harness));
  }
  r.ceilings.gemm_m = r.ceilings.gemm_n = r.ceilings.gemm_k = 8192;
  std::vector<std::pair<std::string, cuda::MatmulType>> gemms;
  if (r.dtype == "f32") gemms = {{"f32", cuda::MatmulType::kF32}, {"tf32", cuda::MatmulType::kTF32}};
  else if (r.dtype == "f16") gemms = {{"f16", cuda::MatmulType::kF16}};
  else gemms = {{"bf16", cuda::MatmulType::kBF16}};
  if (o.measure_gemm)
    for (const auto& [name, type] : gemms) {
      OPFUSE_ASSIGN_OR_RETURN(double tf, MeasureGemmTflops(*harness, type, 8192, 8192, 8192));
      r.ceilings.gemm_tflops[name] = tf;
    }
  if (o.measure_launch) {
    OPFUSE_ASSIGN_OR_RETURN(r.ceilings.launch_us, MeasureLaunchUs(*harness));
  }
  OPFUSE_RETURN_IF_ERROR(alloc.EmptyCache());

  const int n = static_cast<int>(suite.cases.size());
  for (int ci = 0; ci < n; ++ci) {
    const OpCase& c = suite.cases[ci];
    if (o.on_case_start) o.on_case_start(ci, n, c.id);
    CaseResult cr = CaseResultFor(c);
    Status fatal;
    auto graph = ParseGraph(c.graph);
    auto buffers = graph.ok() ? AllocateCase(c, *harness, o.timing, o.seed) : StatusOr<CaseBuffers>(graph.status());
    if (!buffers.ok()) {
      for (const auto& name : o.variants) {
        VariantResult v;
        v.name = name;
        v.error = "case setup: " + buffers.status().message();
        cr.variants.push_back(v);
      }
      fatal = IsStickyStatus(buffers.status()) ? buffers.status() : CheckContext();
    } else {
      // eval_rules: random check rows per trial (from the run's seed), a distribution per trial.
      auto plan_for = [&](int t) {
        return o.eval_rules ? PlanCheck(c, o.check_rows, SplitMix64(o.seed ^ (0x5eedull + static_cast<uint64_t>(t))))
                            : PlanCheck(c, o.check_rows);
      };
      auto tag_for = [&](int t) {
        if (o.check_trials <= 1) return std::string();
        return o.eval_rules ? fmt::format("trial {} ({}): ", t + 1, DistName(kEvalDists[t % std::size(kEvalDists)]))
                            : fmt::format("trial {}: ", t + 1);
      };
      Reference ref = ComputeReference(c, buffers->in[0], plan_for(0), stream, &fatal);
      cr.check = ref.error.empty() ? ref.plan.description : "not checked: " + ref.error;
      // Further check trials: their own fresh inputs and outputs, their own reference.
      std::vector<std::pair<CaseBuffers, Reference>> extra;
      std::vector<TrialView> trials = {{&*buffers, &ref, tag_for(0)}};
      TimingOptions one = o.timing;
      one.max_sets = 1;
      extra.reserve(std::max(o.check_trials - 1, 0));
      for (int t = 1; t < o.check_trials && fatal.ok() && ref.error.empty(); ++t) {
        const Dist dist = o.eval_rules ? kEvalDists[t % std::size(kEvalDists)] : Dist::kUniform;
        auto tb = AllocateCase(c, *harness, one, SplitMix64(o.seed + 7919u * static_cast<uint64_t>(t)), dist);
        if (!tb.ok()) {
          fatal = IsStickyStatus(tb.status()) ? tb.status() : Status::Ok();
          ref.error = fmt::format("check trial {}: {}", t + 1, tb.status().message());
          break;
        }
        Reference tr = ComputeReference(c, tb->in[0], plan_for(t), stream, &fatal);
        if (!tr.error.empty()) {
          ref.error = fmt::format("check trial {}: {}", t + 1, tr.error);
          break;
        }
        extra.emplace_back(std::move(*tb), std::move(tr));
      }
      for (size_t t = 0; t < extra.size(); ++t) trials.push_back({&extra[t].first, &extra[t].second, tag_for(static_cast<int>(t) + 1)});
      if (o.check_trials > 1 && ref.error.empty())
        cr.check = o.eval_rules ? fmt::format("{} trials ({}), {} each", o.check_trials, "distribution per trial", ref.plan.description)
                                : fmt::format("{} trials, {} each", o.check_trials, ref.plan.description);
      // eval_rules: checksums of every input before any call, and the op-by-op reference.
      std::vector<InputSums> trial_sums;
      InputSums timing_sums;
      StatusOr<OpByOp> opbyop = OpByOp{};
      EvalCase ev;
      if (o.eval_rules && fatal.ok() && ref.error.empty()) {
        auto sums = ChecksumInputs(c, buffers->in, stream);
        trial_sums.reserve(trials.size());
        for (size_t t = 0; sums.ok() && t < trials.size(); ++t) {
          auto ts = ChecksumInputs(c, {trials[t].buffers->in[0]}, stream);
          if (!ts.ok()) sums = ts.status();
          else trial_sums.push_back(std::move(*ts));
        }
        if (sums.ok()) {
          timing_sums = std::move(*sums);
          for (size_t t = 0; t < trials.size(); ++t) trials[t].sums = &trial_sums[t];
          opbyop = MakeOpByOp(c, *graph, config, *harness, buffers->in[0], ref);
        } else {
          opbyop = sums.status();
        }
        if (!opbyop.ok()) {
          fatal = IsStickyStatus(opbyop.status()) ? opbyop.status() : Status::Ok();
          ref.error = "eval checks: " + opbyop.status().message();
          cr.check = "not checked: " + ref.error;
        } else {
          ev = {&*opbyop, &timing_sums, CaseSeed(o.seed, c)};
          cr.check += opbyop->exe ? "; every row vs the op-by-op path" : "; full-output rule not applied: " + opbyop->error;
          cr.check += "; timed outputs and refilled sets checked after timing";
        }
      }
      std::map<std::string, std::string> signatures;
      for (const auto& name : o.variants) {
        VariantResult v;
        v.name = name;
        if (fatal.ok()) {
          std::string sig;
          fatal = RunVariant(c, *graph, *buffers, trials, *harness, config, o, o.eval_rules ? &ev : nullptr, v, &sig);
          if (fatal.ok() && !v.error.empty()) fatal = CheckContext();
          if (v.error.empty() && !sig.empty()) signatures[name] = sig;
        } else {
          v.error = "not run: " + fatal.message();
        }
        cr.variants.push_back(std::move(v));
      }
      // same_as: library is the reference point, then jit, then unfused.
      const std::vector<std::string> pref = {"library", "jit", "unfused"};
      for (auto& v : cr.variants) {
        auto sv = signatures.find(v.name);
        if (sv == signatures.end()) continue;
        for (const auto& w : pref) {
          if (w == v.name) break;
          auto sw = signatures.find(w);
          if (sw != signatures.end() && sw->second == sv->second) {
            v.same_as = w;
            break;
          }
        }
      }
      opbyop = Internal("released");
      buffers = Internal("released");  // frees the case's device buffers before the next case
      if (o.measure_copy_same && fatal.ok() && c.bytes > 0) {
        auto copy = TimeSameSizeCopy(c, *harness, o.timing);
        if (copy.ok()) {
          cr.copy_same_us = copy->first;
          cr.copy_same_method = copy->second;
        } else if (IsStickyStatus(copy.status())) {
          fatal = copy.status();
        } else {
          cr.copy_same_method = "not measured: " + copy.status().message();
        }
      }
    }
    r.cases.push_back(std::move(cr));
    if (!fatal.ok()) {
      r.complete = false;
      r.aborted = fmt::format("stopped after {} of {} cases: {}", ci + 1, n, fatal.message());
      break;
    }
    if (Status st = alloc.EmptyCache(); !st.ok()) {
      r.complete = false;
      r.aborted = fmt::format("stopped after {} of {} cases: {}", ci + 1, n, st.message());
      break;
    }
    if (o.on_case_done && ci + 1 < n) {
      BenchReport partial = r;
      partial.complete = false;
      partial.aborted = fmt::format("in progress: {} of {} cases done", ci + 1, n);
      o.on_case_done(partial);
    }
  }
  DeriveMetrics(r);
  return r;
}

}  // namespace opfuse::bench
