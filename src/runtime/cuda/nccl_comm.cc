// NCCL, loaded at run time (see nccl_comm.h).
#include "runtime/cuda/nccl_comm.h"

#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "cuda/cuda_check.h"
#include "cuda/device.h"
#include "kernels/allreduce.h"
#include "runtime/cuda/stream.h"

namespace opfuse::cuda {
namespace {

namespace fs = std::filesystem;

// The entry points opfuse calls, resolved from the loaded library.
struct Nccl {
  std::string path;
  int version = 0;
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRank) CommInitRank = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
};

std::vector<std::string> Candidates() {
  std::vector<std::string> out = {"libnccl.so.2"};
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    for (size_t b = 0; b <= p.size();) {
      size_t e = p.find(':', b);
      if (e == std::string::npos) e = p.size();
      const fs::path dir = p.substr(b, e - b);
      b = e + 1;
      std::error_code ec;
      if (dir.empty() || !fs::exists(dir / "python3", ec)) continue;
      const fs::path lib = dir.parent_path() / "lib";
      for (const auto& entry : fs::directory_iterator(lib, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("python3", 0) != 0) continue;
        const fs::path so = entry.path() / "site-packages" / "nvidia" / "nccl" / "lib" / "libnccl.so.2";
        if (fs::exists(so, ec)) out.push_back(so.string());
      }
    }
  }
  std::vector<std::string> homes;
  if (const char* h = std::getenv("CUDA_HOME"); h && *h) homes.push_back(h);
  homes.push_back("/usr/local/cuda");
  for (const auto& h : homes)
    for (const char* sub : {"lib64", "lib"}) out.push_back(fmt::format("{}/{}/libnccl.so.2", h, sub));
  return out;
}

StatusOr<const Nccl*> Load() {
  static std::once_flag once;
  static Nccl lib;
  static Status status = Status::Ok();
  std::call_once(once, [] {
    std::string tried;
    void* h = nullptr;
    for (const std::string& c : Candidates()) {
      h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h) {
        lib.path = c;
        break;
      }
      tried += (tried.empty() ? "" : ", ") + c;
    }
    if (!h) {
      status = Unavailable(fmt::format("NCCL not found (tensor parallelism on cuda loads libnccl.so.2 at run time; "
                                       "tried {}): install the nvidia-nccl-cu13 wheel or put its lib/ on LD_LIBRARY_PATH",
                                       tried));
      return;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn && status.ok()) status = Unavailable(fmt::format("{}: no symbol {}", lib.path, name));
    };
    sym(lib.GetVersion, "ncclGetVersion");
    sym(lib.GetUniqueId, "ncclGetUniqueId");
    sym(lib.CommInitRank, "ncclCommInitRank");
    sym(lib.CommDestroy, "ncclCommDestroy");
    sym(lib.CommAbort, "ncclCommAbort");
    sym(lib.AllReduce, "ncclAllReduce");
    sym(lib.AllGather, "ncclAllGather");
    sym(lib.GetErrorString, "ncclGetErrorString");
    if (!status.ok()) return;
    lib.GetVersion(&lib.version);
    // NCCL_VERSION_CODE is major * 10000 + minor * 100 + patch since 2.9.
    if (lib.version / 10000 != NCCL_MAJOR)
      status = Unavailable(fmt::format("{} is NCCL {}, built against NCCL {}.{} headers: the major versions differ",
                                       lib.path, lib.version, NCCL_MAJOR, NCCL_MINOR));
  });
  if (!status.ok()) return status;
  return &lib;
}

Status NcclStatus(const Nccl& n, ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::Ok();
  return Internal(fmt::format("{} failed: {}", what, n.GetErrorString ? n.GetErrorString(r) : "?"));
}

StatusOr<ncclDataType_t> NcclType(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kBool: return ncclUint8;
  }
  return InvalidArgument("nccl: unknown dtype");
}

class NcclRank final : public DeviceCommunicator {
 public:
  NcclRank(const Nccl* n, ncclComm_t c, int rank, int world) : n_(n), c_(c), rank_(rank), world_(world) {}
  ~NcclRank() override {
    if (c_) n_->CommDestroy(c_);
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  Status AllReduceSum(const void* in, void* out, int64_t count, DType dtype, cudaStream_t stream) override {
    if (dtype == DType::kBool) return InvalidArgument("all_reduce: bool tensors cannot be summed");
    OPFUSE_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    return NcclStatus(*n_, n_->AllReduce(in, out, static_cast<size_t>(count), t, ncclSum, c_, stream), "ncclAllReduce");
  }
  Status AllGather(const void* in, void* out, int64_t count, DType dtype, cudaStream_t stream) override {
    OPFUSE_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    return NcclStatus(*n_, n_->AllGather(in, out, static_cast<size_t>(count), t, c_, stream), "ncclAllGather");
  }
  void Abort() {
    if (c_) n_->CommAbort(c_);
    c_ = nullptr;
  }

 private:
  const Nccl* n_;
  ncclComm_t c_;
  int rank_, world_;
};

// The one-shot kernel for all-reduces it takes (kernels::OneShotSupported, at most
// kOneShotMaxBytes), NCCL for the rest.
class HybridRank final : public DeviceCommunicator {
 public:
  HybridRank(DeviceCommunicator* nccl, const kernels::OneShotArgs& base, int64_t max_bytes)
      : nccl_(nccl), base_(base), max_bytes_(max_bytes) {}
  int rank() const override { return nccl_->rank(); }
  int world() const override { return nccl_->world(); }
  Status AllReduceSum(const void* in, void* out, int64_t count, DType dtype, cudaStream_t stream) override {
    kernels::OneShotArgs a = base_;
    a.in = in;
    a.out = out;
    a.count = count;
    a.dtype = dtype;
    if (count * DTypeSize(dtype) <= max_bytes_ && kernels::OneShotSupported(a)) return kernels::LaunchOneShotAllReduce(a, stream);
    return nccl_->AllReduceSum(in, out, count, dtype, stream);
  }
  Status AllGather(const void* in, void* out, int64_t count, DType dtype, cudaStream_t stream) override {
    return nccl_->AllGather(in, out, count, dtype, stream);
  }
  // Where the all-reduce alone would take the one-shot kernel (the measured limit), the norm can ride
  // in it: one launch instead of two, the sum never written as its own tensor. On unless
  // NcclGroup::set_fused_add_rms_norm turned it off: at decode's message (one row, 16-byte vectors)
  // it measured faster than the one-shot all-reduce then the norm kernel, and than NCCL then the norm
  // (docs/BENCHMARKS.md, Tensor parallelism).
  void set_fused_norm(bool on) { fused_norm_ = on; }
  bool FusedAddRmsNormSupported(int64_t rows, int64_t cols, DType dtype) const override {
    kernels::OneShotArgs a = base_;
    a.dtype = dtype;
    return fused_norm_ && rows * cols * DTypeSize(dtype) <= max_bytes_ && kernels::OneShotAddRmsNormSupported(a, rows, cols);
  }
  Status AllReduceAddRmsNorm(const void* in, const void* residual, const void* weight, void* sum, void* y, int64_t rows,
                             int64_t cols, double eps, DType dtype, cudaStream_t stream) override {
    if (!FusedAddRmsNormSupported(rows, cols, dtype))
      return Unimplemented(fmt::format("fused all-reduce + add_rms_norm: [{}, {}] {} not taken", rows, cols, DTypeName(dtype)));
    kernels::OneShotArgs a = base_;
    a.in = in;
    a.count = rows * cols;
    a.dtype = dtype;
    kernels::OneShotNormArgs n;
    n.residual = residual;
    n.weight = weight;
    n.sum = sum;
    n.y = y;
    n.rows = rows;
    n.cols = cols;
    n.eps = static_cast<float>(eps);
    return kernels::LaunchOneShotAddRmsNorm(a, n, stream);
  }

 private:
  DeviceCommunicator* nccl_;
  kernels::OneShotArgs base_;
  int64_t max_bytes_;
  bool fused_norm_ = true;
};

// `iters` all-reduces of `count` elements on every rank's `comms[r]` at once (TimeOnRanks).
StatusOr<double> TimeOn(const std::vector<std::unique_ptr<DeviceCommunicator>>& comms, int64_t count, DType dtype,
                        int iters) {
  const int world = static_cast<int>(comms.size());
  const size_t bytes = static_cast<size_t>(count * DTypeSize(dtype));
  std::vector<void*> buf(world, nullptr);
  return TimeOnRanks(
      world, iters,
      [&](int r, cudaStream_t s) {
        OPFUSE_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&buf[r], bytes), "cudaMalloc"));
        return CudaStatus(cudaMemsetAsync(buf[r], 0, bytes, s), "cudaMemset");
      },
      [&](int r, cudaStream_t s) { return comms[r]->AllReduceSum(buf[r], buf[r], count, dtype, s); },
      [&](int r) {
        if (buf[r]) cudaFree(buf[r]);
      });
}

}  // namespace

StatusOr<double> TimeOnRanks(int world, int iters, const std::function<Status(int, cudaStream_t)>& setup,
                             const std::function<Status(int, cudaStream_t)>& enqueue, const std::function<void(int)>& finish) {
  constexpr int kTimedLaunches = 3;
  std::vector<double> us(world, 0);
  std::vector<Status> st(world, Status::Ok());
  std::barrier sync(world);
  std::atomic<bool> failed = false;
  // No rank goes on unless every rank got there: a lone collective would wait for peers that never
  // come. Every rank passes every barrier, failed or not.
  auto all_ok = [&](Status& out) {
    if (!out.ok()) failed = true;
    sync.arrive_and_wait();
    if (out.ok() && failed) out = Internal("a peer rank failed");
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      cudaStream_t s = nullptr;
      cudaEvent_t e0 = nullptr, e1 = nullptr;
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      Status out = CudaStatus(cudaSetDevice(r), "cudaSetDevice");
      if (out.ok()) out = CudaStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
      if (out.ok()) out = CudaStatus(cudaEventCreate(&e0), "cudaEventCreate");
      if (out.ok()) out = CudaStatus(cudaEventCreate(&e1), "cudaEventCreate");
      if (out.ok()) out = setup(r, s);
      all_ok(out);
      // One eager call first, every rank at once: NCCL connects its peers at a communicator's first
      // collective, which cannot happen inside a capture.
      if (out.ok()) out = enqueue(r, s);
      if (out.ok()) out = CudaStatus(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      if (out.ok()) out = CudaStatus(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
      if (out.ok()) {
        for (int i = 0; out.ok() && i < iters; ++i) out = enqueue(r, s);
        const Status end = CudaStatus(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
        if (out.ok()) out = end;
      }
      if (out.ok()) out = CudaStatus(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
      all_ok(out);
      double best = 1e300;
      for (int launch = 0; launch <= kTimedLaunches; ++launch) {  // every rank at every barrier
        sync.arrive_and_wait();
        if (!out.ok()) continue;
        out = CudaStatus(cudaEventRecord(e0, s), "cudaEventRecord");
        if (out.ok()) out = CudaStatus(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
        if (out.ok()) out = CudaStatus(cudaEventRecord(e1, s), "cudaEventRecord");
        if (out.ok()) out = CudaStatus(cudaEventSynchronize(e1), "cudaEventSynchronize");
        float ms = 0;
        if (out.ok()) out = CudaStatus(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
        if (out.ok() && launch > 0) best = std::min(best, 1000.0 * ms / iters);
      }
      us[r] = best;
      if (exec) cudaGraphExecDestroy(exec);
      if (graph) cudaGraphDestroy(graph);
      if (e0) cudaEventDestroy(e0);
      if (e1) cudaEventDestroy(e1);
      if (finish) finish(r);
      (void)DestroyStream(s);
      st[r] = out;
    });
  for (auto& t : threads) t.join();
  for (const Status& x : st) OPFUSE_RETURN_IF_ERROR(x);
  return *std::max_element(us.begin(), us.end());
}

StatusOr<std::string> NcclLibraryInfo() {
  OPFUSE_ASSIGN_OR_RETURN(const Nccl* n, Load());
  return fmt::format("{} (NCCL {}.{}.{})", n->path, n->version / 10000, n->version / 100 % 100, n->version % 100);
}

StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Create(int world, bool pdl) {
  OPFUSE_ASSIGN_OR_RETURN(const int devices, DeviceCount());
  if (world < 1) return InvalidArgument(fmt::format("tensor parallel: {} ranks", world));
  if (devices < world)
    return Unavailable(fmt::format("--tensor-parallel {} needs {} GPUs (one per rank); this machine has {}", world, world, devices));
  // Before any communicator exists: NVLink multicast off, whatever the caller's environment says.
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  OPFUSE_ASSIGN_OR_RETURN(const Nccl* n, Load());
  ncclUniqueId id;
  OPFUSE_RETURN_IF_ERROR(NcclStatus(*n, n->GetUniqueId(&id), "ncclGetUniqueId"));
  std::vector<ncclComm_t> comms(world, nullptr);
  std::vector<Status> st(world, Status::Ok());
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      st[r] = CudaStatus(cudaSetDevice(r), "cudaSetDevice");
      if (st[r].ok()) st[r] = NcclStatus(*n, n->CommInitRank(&comms[r], world, id, r), "ncclCommInitRank");
    });
  for (auto& t : threads) t.join();
  std::unique_ptr<NcclGroup> g(new NcclGroup());
  for (int r = 0; r < world; ++r) g->nccl_.push_back(std::make_unique<NcclRank>(n, comms[r], r, world));
  for (const Status& s : st) OPFUSE_RETURN_IF_ERROR(s);  // g destroys the communicators that were made

  // The one-shot kernel's buffers, where every pair of GPUs has peer access (one process: a
  // peer's device pointer is directly usable once access is enabled).
  bool peers = world <= kernels::kOneShotMaxRanks;
  for (int r = 0; peers && r < world; ++r)
    for (int p = 0; peers && p < world; ++p) {
      int can = 0;
      if (p != r && (cudaDeviceCanAccessPeer(&can, r, p) != cudaSuccess || !can)) peers = false;
    }
  kernels::OneShotArgs base;
  base.world = world;
  base.staging_bytes = 2 * kOneShotMaxBytes;  // two halves (allreduce.h): every message up to kOneShotMaxBytes
  base.pdl = pdl;
  const size_t signal_bytes = (sizeof(kernels::OneShotSignal) + 255) / 256 * 256;
  for (int r = 0; peers && r < world; ++r) {
    OPFUSE_CUDA_CHECK(cudaSetDevice(r));
    for (int p = 0; p < world; ++p) {
      if (p == r) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();
      } else {
        OPFUSE_CUDA_CHECK(e);
      }
    }
    void* buf = nullptr;
    OPFUSE_CUDA_CHECK(cudaMalloc(&buf, base.staging_bytes + signal_bytes));
    g->buffers_.push_back(buf);
    OPFUSE_CUDA_CHECK(cudaMemset(buf, 0, base.staging_bytes + signal_bytes));
    base.staging[r] = buf;
    base.signal[r] = reinterpret_cast<kernels::OneShotSignal*>(static_cast<char*>(buf) + base.staging_bytes);
  }
  for (int r = 0; peers && r < world; ++r) {  // the zeroed signal blocks, before any kernel reads them
    OPFUSE_CUDA_CHECK(cudaSetDevice(r));
    OPFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  for (int r = 0; peers && r < world; ++r) {
    kernels::OneShotArgs a = base;
    a.rank = r;
    g->one_shot_ranks_.push_back(std::make_unique<HybridRank>(g->nccl_[r].get(), a, kOneShotMaxBytes));
  }
  // The one-shot kernel up to the largest size at which it is faster, every smaller one too. Sizes
  // double from 4 KiB, so a decode message (hidden x 2 bytes x batch: 8 KiB for a 4096-wide model)
  // is measured itself, not judged by the next ladder step's verdict.
  if (peers) {
    bool faster = true;
    for (int64_t bytes = 4096; bytes <= kOneShotMaxBytes; bytes *= 2) {
      const int64_t count = bytes / 2;  // bf16: the decode messages' dtype
      OPFUSE_ASSIGN_OR_RETURN(double os, TimeOn(g->one_shot_ranks_, count, DType::kBF16, 50));
      OPFUSE_ASSIGN_OR_RETURN(double nc, TimeOn(g->nccl_, count, DType::kBF16, 50));
      g->timings_.push_back({bytes, os, nc});
      faster = faster && os < nc;
      if (faster) g->one_shot_max_bytes_ = bytes;
    }
  }
  for (int r = 0; r < world; ++r) {
    kernels::OneShotArgs a = peers ? base : kernels::OneShotArgs{};  // world 1 in the default: never one-shot
    a.rank = r;
    g->ranks_.push_back(std::make_unique<HybridRank>(g->nccl_[r].get(), a, g->one_shot_max_bytes_));
  }
  return g;
}

void NcclGroup::set_fused_add_rms_norm(bool on) {
  fused_add_rms_norm_ = on;
  for (auto& r : ranks_) static_cast<HybridRank*>(r.get())->set_fused_norm(on);
}

DeviceCommunicator* NcclGroup::transport(int rank, Transport t) {
  switch (t) {
    case Transport::kGroup: return ranks_.at(rank).get();
    case Transport::kNccl: return nccl_.at(rank).get();
    case Transport::kOneShot: return one_shot_ranks_.empty() ? nullptr : one_shot_ranks_.at(rank).get();
  }
  return nullptr;
}

StatusOr<double> NcclGroup::TimeAllReduceUs(int64_t count, DType dtype, Transport t, int iters) {
  switch (t) {
    case Transport::kGroup: return TimeOn(ranks_, count, dtype, iters);
    case Transport::kNccl: return TimeOn(nccl_, count, dtype, iters);
    case Transport::kOneShot:
      if (one_shot_ranks_.empty()) return Unimplemented("no one-shot all-reduce: the GPUs have no peer access");
      return TimeOn(one_shot_ranks_, count, dtype, iters);
  }
  return Internal("unknown transport");
}

NcclGroup::~NcclGroup() {
  ranks_.clear();
  one_shot_ranks_.clear();
  for (size_t r = 0; r < buffers_.size(); ++r) {
    cudaSetDevice(static_cast<int>(r));
    cudaFree(buffers_[r]);
  }
}

void NcclGroup::Abort() {
  for (auto& r : nccl_) static_cast<NcclRank*>(r.get())->Abort();
}

}  // namespace opfuse::cuda
