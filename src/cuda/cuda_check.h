// Check macros for CUDA runtime and cuBLAS / cuBLASLt calls, returning opfuse::Status.
//
// Design: every CUDA-facing function (src/cuda/, src/runtime/cuda/, the planners) returns Status / StatusOr and uses
// exactly these macros, so an error message always has the same shape:
//   "<call text>: <error name>: <error string>"   (code Internal)
// The sticky-free runtime error is cleared with cudaGetLastError() so one failed call does not
// poison the next unrelated check. No macro aborts or throws. Built with OPFUSE_CUDA only.
//
//   OPFUSE_CUDA_CHECK(cudaMemsetAsync(p, 0, n, s));       // in a function returning Status(Or)
//   OPFUSE_CUBLAS_CHECK(cublasLtMatmul(...));
//   Status st = ::opfuse::cuda::CudaStatus(e, "what");     // turn a cudaError_t into a Status
#pragma once
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <string>

#include "opfuse/status.h"

namespace opfuse::cuda {

inline Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();  // clear the (non-sticky) error so later checks see their own
  return Internal(std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

inline Status CublasStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Internal(std::string(what) + ": " + cublasLtGetStatusName(s) + ": " + cublasLtGetStatusString(s));
}

}  // namespace opfuse::cuda

#define OPFUSE_CUDA_CHECK(call)                                                  \
  do {                                                                           \
    ::opfuse::Status _opfuse_cs = ::opfuse::cuda::CudaStatus((call), #call);     \
    if (!_opfuse_cs.ok()) return _opfuse_cs;                                     \
  } while (0)

#define OPFUSE_CUBLAS_CHECK(call)                                                \
  do {                                                                           \
    ::opfuse::Status _opfuse_bs = ::opfuse::cuda::CublasStatus((call), #call);   \
    if (!_opfuse_bs.ok()) return _opfuse_bs;                                     \
  } while (0)
