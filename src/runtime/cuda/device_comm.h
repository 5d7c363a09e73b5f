// DeviceCommunicator: the collective ops' transport on the GPU (all_reduce, all_gather; ops.def),
// handed to a rank's executable through ExecutorOptions::comm. Stream-ordered and capturable: a
// call enqueues the collective on `stream` and returns; a decode step captured as a CUDA graph
// records it like any kernel. Every rank of the group must issue the same collectives in the same
// order (each runs the same graph). Implementations: NCCL (nccl_comm.h). Built with OPFUSE_CUDA only.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "opfuse/graph.h"

namespace opfuse::cuda {

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // `out` (count elements) = the sum over the ranks of their `in` (may be the same buffer).
  virtual Status AllReduceSum(const void* in, void* out, int64_t count, DType dtype, cudaStream_t stream) = 0;
  // `out` (world x count elements) = every rank's `in` (count elements), in rank order.
  virtual Status AllGather(const void* in, void* out, int64_t count, DType dtype, cudaStream_t stream) = 0;

  // The all-reduce of `in` ([rows, cols]) fused with the add_rms_norm that consumes it (a
  // "collective:all_reduce_add_rms_norm" group): `sum` = the all-reduce + `residual` (may alias it),
  // `y` = rms_norm(sum) x `weight` — kernels::LaunchOneShotAddRmsNorm's semantics. Only where
  // FusedAddRmsNormSupported says so; the executor otherwise runs the all-reduce, then the norm kernel.
  virtual bool FusedAddRmsNormSupported(int64_t rows, int64_t cols, DType dtype) const {
    (void)rows, (void)cols, (void)dtype;
    return false;
  }
  virtual Status AllReduceAddRmsNorm(const void* in, const void* residual, const void* weight, void* sum, void* y,
                                     int64_t rows, int64_t cols, double eps, DType dtype, cudaStream_t stream) {
    (void)in, (void)residual, (void)weight, (void)sum, (void)y, (void)rows, (void)cols, (void)eps, (void)dtype, (void)stream;
    return Unimplemented("this communicator has no fused all-reduce + add_rms_norm");
  }
};

}  // namespace opfuse::cuda
