// NCCL as the GPU transport of tensor parallelism (docs/tensor_parallel.md).
//
// Design note: opfuse is built against the NCCL headers of the CUDA toolkit it is compiled with
// (nccl.h, NCCL 2.28 here) but does not link libnccl: the library (about 340 MB) is loaded at run
// time with dlopen, from the first of
//   1. libnccl.so.2 as the dynamic loader finds it (LD_LIBRARY_PATH, the ld cache);
//   2. for each directory on PATH holding a python3: its virtual environment's
//      lib/python3.*/site-packages/nvidia/nccl/lib/libnccl.so.2 (the nvidia-nccl-cu13 wheel that
//      PyTorch installs);
//   3. the CUDA toolkit's lib64/ and lib/ (CUDA_HOME, then /usr/local/cuda).
// Not found, or a library whose major version differs from the headers', is one line naming what
// was tried (Unavailable: exit 2 at the CLI). The ranks are threads of this process (one per GPU):
// NcclGroup::Create makes rank 0's unique id and joins every rank through ncclCommInitRank on its
// own thread with its device current. NCCL_NVLS_ENABLE=0 is set before any communicator exists:
// NVLink multicast is never used (on shared hosts it can put the GPUs out of service).
// Built with OPFUSE_CUDA only.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cuda/device_comm.h"

namespace opfuse::cuda {

// The loaded library's path and version ("2.28.9"), loading it on first use.
StatusOr<std::string> NcclLibraryInfo();

// Device µs of one call of `enqueue` on `world` ranks at once, as a decode step runs it. On rank r's
// own thread (GPU r current, a stream of its own): `setup(r, stream)` once; then — every rank's setup
// done — one eager `enqueue` (NCCL connects its peers at a communicator's first collective, which
// cannot happen inside a capture); `iters` calls captured in one CUDA graph; the ranks' replays
// released together by a barrier, one untimed, then the fastest of three. The slowest rank's µs per
// call (timed from eager launches instead, the host's launch rate is measured, and a rank that
// starts late). A rank that fails holds the others back from every collective after it.
// `finish(r)` runs last on rank r's thread, whatever happened (free what setup made).
StatusOr<double> TimeOnRanks(int world, int iters, const std::function<Status(int, cudaStream_t)>& setup,
                             const std::function<Status(int, cudaStream_t)>& enqueue,
                             const std::function<void(int)>& finish = {});

// Small all-reduces take the one-shot kernel (kernels/allreduce.h) where every pair of GPUs has
// peer access, up to the largest message at which it measured faster than NCCL when the group was
// made (sizes 4 KiB .. kOneShotMaxBytes, the staging buffer each rank holds, taken as a prefix: every
// smaller size measured faster too); larger messages, all_gather, and machines without peer access
// take NCCL. Rank 0's readings decide for every rank (they must all take the same transport).
inline constexpr int64_t kOneShotMaxBytes = int64_t{1} << 20;

class NcclGroup {
 public:
  // One communicator per device 0 .. world-1. Unavailable when NCCL cannot be loaded or there are
  // fewer GPUs than ranks. `pdl`: the one-shot kernel launches with PDL (false under
  // OPFUSE_DISABLE=pdl).
  static StatusOr<std::unique_ptr<NcclGroup>> Create(int world, bool pdl = true);
  ~NcclGroup();
  int world() const { return static_cast<int>(ranks_.size()); }
  // Rank r's transport: the one-shot kernel up to one_shot_max_bytes(), else NCCL.
  DeviceCommunicator* comm(int rank) { return ranks_.at(rank).get(); }
  // Peer access between every pair: the one-shot kernel exists (it may still lose to NCCL at every size).
  bool one_shot() const { return !one_shot_ranks_.empty(); }
  int64_t one_shot_max_bytes() const { return one_shot_max_bytes_; }
  // fuse_collective's all_reduce + add_rms_norm as one kernel on the comm() transports where the
  // one-shot all-reduce takes the message (on by default: faster than the two launches at decode
  // sizes; bench e2e's timing turns it off to time the two launches).
  void set_fused_add_rms_norm(bool on);
  bool fused_add_rms_norm() const { return fused_add_rms_norm_; }
  // What decided it: (bytes, one-shot µs, NCCL µs) per size measured.
  struct Timing {
    int64_t bytes;
    double one_shot_us, nccl_us;
  };
  const std::vector<Timing>& timings() const { return timings_; }
  enum class Transport { kGroup, kOneShot, kNccl };
  // Rank r's communicator of transport `t` (kOneShot: the one-shot kernel up to kOneShotMaxBytes,
  // nullptr without peer access) — tests and measurements; the executables take comm().
  DeviceCommunicator* transport(int rank, Transport t);
  // Device µs of one all-reduce of `count` elements on `t` (kOneShot: Unimplemented without peer
  // access), every rank at once, as the decode graph runs them: `iters` calls captured in a CUDA graph
  // per rank, the fastest of three launches after a warm-up one, the slowest rank's.
  StatusOr<double> TimeAllReduceUs(int64_t count, DType dtype, Transport t, int iters = 200);
  // ncclCommAbort on every rank: a rank waiting in a collective for a rank that failed returns.
  void Abort();

 private:
  NcclGroup() = default;
  std::vector<std::unique_ptr<DeviceCommunicator>> nccl_, one_shot_ranks_, ranks_;
  std::vector<void*> buffers_;  // per rank: staging buffer then signal block (one allocation on its GPU)
  int64_t one_shot_max_bytes_ = 0;
  bool fused_add_rms_norm_ = true;  // set_fused_add_rms_norm
  std::vector<Timing> timings_;
};

}  // namespace opfuse::cuda
