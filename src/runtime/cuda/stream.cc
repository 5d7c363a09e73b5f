// See stream.h.
#include "runtime/cuda/stream.h"

#include "cuda/cuda_check.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/cublaslt_matmul.h"

namespace opfuse::cuda {

Status DestroyStream(cudaStream_t stream) {
  if (stream == nullptr) return Status::Ok();
  Status first = MatmulEngine::ReleaseStreamEverywhere(stream);
  Status s = CachingAllocator::ReleaseStreamEverywhere(stream);
  if (!s.ok() && first.ok()) first = s;
  cudaError_t e = cudaStreamDestroy(stream);
  if (e != cudaSuccess && first.ok()) first = CudaStatus(e, "cudaStreamDestroy");
  return first;
}

}  // namespace opfuse::cuda
