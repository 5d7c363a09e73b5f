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
};

}  // namespace opfuse::cuda
