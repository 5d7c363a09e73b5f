// The tensor-parallel Runner (engine_runner.h, docs/tensor_parallel.md): one Runner per rank, each
// call run on one thread per rank (rank 0 on the caller's), rank 0's logits and tokens the answer.
// What a backend adds is its RankGroup: how a rank's thread joins the group (the CPU installs the
// rank's in-process communicator; CUDA makes the rank's GPU current) and how a failed rank stops
// the others waiting for it. Internal to src/model.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <memory>
#include <vector>

#include "model/llama/engine_runner.h"

namespace opfuse::llama {

class RankGroup {
 public:
  virtual ~RankGroup() = default;
  // Runs `f` as rank `rank` on the calling thread.
  virtual Status RunAsRank(int rank, const std::function<Status()>& f) = 0;
  // Another rank failed: ranks waiting in a collective must return (with an error).
  virtual void Abort() = 0;
  // Every rank has returned; the group may be used again.
  virtual void Reset() {}
  // Whether `s` only says that another rank failed (the failing rank's own error is reported).
  virtual bool IsAbortedError(const Status& s) const { return false; }
  // Wall-clock ms rank 0 spent in collectives since creation, where the host can see it (the CPU's
  // in-process communicator); -1 where it cannot (a GPU transport runs them on the device).
  virtual double collective_ms() const { return -1; }
  // Device microseconds of one all_reduce of [rows, cols] `dtype` elements, by transport ("one_shot",
  // "nccl"; the one the group uses for that size is "used"), every rank at once
  // (NcclGroup::TimeAllReduceUs); and of fuse_collective's group at that shape — the all-reduce with
  // the add_rms_norm after it — as one launch ("fused_add_rms_norm", where the group's transport
  // takes it), as NCCL's all-reduce then the norm kernel ("nccl_then_add_rms_norm") and as the
  // group's all-reduce then the norm kernel ("group_then_add_rms_norm": what the graphs run).
  // Unimplemented where the group has no device transport.
  virtual StatusOr<std::map<std::string, double>> AllReduceUs(int64_t rows, int64_t cols, DType dtype) {
    return Unimplemented("no device transport");
  }
};

StatusOr<std::unique_ptr<Runner>> MakeTensorParallelRunner(std::vector<std::unique_ptr<Runner>> ranks,
                                                           std::unique_ptr<RankGroup> group);

}  // namespace opfuse::llama
