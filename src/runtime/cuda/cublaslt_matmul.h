// Matmul through cuBLASLt for the CUDA backend.
//
// Design:
//  * Row-major C[M,N] = A[M,K] · op(B) (+ bias[N]) (then relu/gelu if asked). B is [K,N], or with
//    transpose_b [N,K] (a Hugging Face Linear weight, C = A·Bᵀ). cuBLASLt is column-major, so we
//    use the usual trick: a row-major X is a column-major Xᵀ with the same leading dimension, and
//    Cᵀ[N,M] = op(B)ᵀ[N,K] · Aᵀ[K,M]. So cuBLAS's first operand is our B (op = N for [K,N] with
//    ld N; op = T for [N,K] with ld K), its second is our A (op = N, ld K), the output is N×M with
//    ld N, and cuBLASLt's BIAS epilogue — a vector over the output's rows — is exactly bias[N].
//  * Types: bf16/f16 in and out with f32 accumulation and f32 scale (CUBLAS_COMPUTE_32F); f32
//    (CUBLAS_COMPUTE_32F, true f32) and tf32 (f32 storage, CUBLAS_COMPUTE_32F_FAST_TF32). The bias
//    has the output's dtype.
//  * Reuse: one MatmulEngine per device holds the cuBLASLt handle and a 32 MiB workspace per
//    stream (allocated on the first matmul on that stream; do one call per stream before CUDA-graph
//    capture, since cudaMalloc cannot be captured). The workspace lives until the stream's owner
//    retires it (ReleaseStream, through cuda::DestroyStream): the engine is process-wide, its
//    streams are not, and a workspace kept for a destroyed stream is device memory lost. Matmul descriptor, the three layouts, the
//    preference and the heuristic's algorithm are cached per key (dtype, M, N, K, transpose_b,
//    epilogue, bias, pointer alignment of A/B/C) so a repeated shape costs one descriptor
//    attribute write (the bias pointer) and the cublasLtMatmul call.
//  * Thread-safe: a mutex is held across lookup and the (asynchronous) cublasLtMatmul enqueue, since
//    the cached descriptor's bias pointer is written per call.
// Built with OPFUSE_CUDA only (src/runtime/cuda/).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "opfuse/status.h"

namespace opfuse::cuda {

enum class MatmulType { kF32, kTF32, kF16, kBF16 };
const char* MatmulTypeName(MatmulType t);
int MatmulTypeSize(MatmulType t);  // bytes per element of A, B, C and bias

enum class MatmulEpilogue { kNone, kRelu, kGelu };  // applied after the bias; kGelu is tanh-approximate

struct MatmulArgs {
  MatmulType type = MatmulType::kBF16;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;     // [M,K] row-major
  const void* b = nullptr;     // [K,N] row-major, or [N,K] with transpose_b
  const void* bias = nullptr;  // [N] or nullptr
  void* c = nullptr;           // [M,N] row-major (must not alias a or b)
  bool transpose_b = false;
  MatmulEpilogue epilogue = MatmulEpilogue::kNone;
};

class MatmulEngine {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  // Engine for the current device.
  static StatusOr<std::unique_ptr<MatmulEngine>> Create();
  // The process-wide engine of the current device (created on first use, never destroyed).
  static StatusOr<MatmulEngine*> ForCurrentDevice();
  ~MatmulEngine();

  Status Matmul(const MatmulArgs& args, cudaStream_t stream);

  size_t cached_plans() const;
  int64_t plan_misses() const;  // heuristic queries so far
  size_t workspaces() const;    // streams holding a workspace

  // Frees `stream`'s workspace after the work queued on it (a no-op for a stream without one).
  Status ReleaseStream(cudaStream_t stream);
  // ReleaseStream on every device's engine created so far.
  static Status ReleaseStreamEverywhere(cudaStream_t stream);

 private:
  struct Plan;
  using Key = std::tuple<int, int64_t, int64_t, int64_t, bool, int, bool, int, int, int>;
  MatmulEngine() = default;
  StatusOr<Plan*> GetPlan(const Key& key, const MatmulArgs& args);
  StatusOr<void*> Workspace(cudaStream_t stream);

  int device_ = 0;
  cublasLtHandle_t handle_ = nullptr;
  mutable std::mutex mu_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::map<cudaStream_t, void*> workspaces_;
  int64_t misses_ = 0;
};

// Matmul on the current device's engine.
Status Matmul(const MatmulArgs& args, cudaStream_t stream);

}  // namespace opfuse::cuda
