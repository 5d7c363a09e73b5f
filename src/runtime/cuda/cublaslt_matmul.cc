// See cublaslt_matmul.h for the design (row-major via Cᵀ = op(B)ᵀ·Aᵀ in column-major).
#include "runtime/cuda/cublaslt_matmul.h"

#include <vector>

#include <fmt/format.h>

#include "cuda/cuda_check.h"

namespace opfuse::cuda {

const char* MatmulTypeName(MatmulType t) {
  switch (t) {
    case MatmulType::kF32: return "f32";
    case MatmulType::kTF32: return "tf32";
    case MatmulType::kF16: return "f16";
    case MatmulType::kBF16: return "bf16";
  }
  return "?";
}

int MatmulTypeSize(MatmulType t) { return (t == MatmulType::kF16 || t == MatmulType::kBF16) ? 2 : 4; }

namespace {

cudaDataType_t DataType(MatmulType t) {
  switch (t) {
    case MatmulType::kF32:
    case MatmulType::kTF32: return CUDA_R_32F;
    case MatmulType::kF16: return CUDA_R_16F;
    case MatmulType::kBF16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

cublasComputeType_t ComputeType(MatmulType t) {
  return t == MatmulType::kTF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

cublasLtEpilogue_t Epilogue(MatmulEpilogue e, bool bias) {
  switch (e) {
    case MatmulEpilogue::kNone: return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case MatmulEpilogue::kRelu: return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case MatmulEpilogue::kGelu: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// Largest power of two (≤ 16) dividing the address: what cuBLASLt's alignment preferences mean.
int Alignment(const void* p) {
  auto u = reinterpret_cast<uintptr_t>(p);
  int a = 16;
  while (a > 1 && (u % static_cast<uintptr_t>(a)) != 0) a /= 2;
  return a;
}

}  // namespace

struct MatmulEngine::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lt_a = nullptr;  // cuBLAS's A = our B
  cublasLtMatrixLayout_t lt_b = nullptr;  // cuBLAS's B = our A
  cublasLtMatrixLayout_t lt_c = nullptr;  // C and D: our C
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  ~Plan() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lt_c) cublasLtMatrixLayoutDestroy(lt_c);
    if (lt_b) cublasLtMatrixLayoutDestroy(lt_b);
    if (lt_a) cublasLtMatrixLayoutDestroy(lt_a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

StatusOr<std::unique_ptr<MatmulEngine>> MatmulEngine::Create() {
  std::unique_ptr<MatmulEngine> e(new MatmulEngine());
  OPFUSE_CUDA_CHECK(cudaGetDevice(&e->device_));
  OPFUSE_CUBLAS_CHECK(cublasLtCreate(&e->handle_));
  return e;
}

namespace {
std::mutex engines_mu;
std::map<int, MatmulEngine*>& Engines() {
  static auto* engines = new std::map<int, MatmulEngine*>();  // leaked on purpose: no teardown at process exit
  return *engines;
}
}  // namespace

StatusOr<MatmulEngine*> MatmulEngine::ForCurrentDevice() {
  int dev = 0;
  OPFUSE_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(engines_mu);
  auto& e = Engines()[dev];
  if (!e) {
    OPFUSE_ASSIGN_OR_RETURN(std::unique_ptr<MatmulEngine> created, Create());
    e = created.release();
  }
  return e;
}

MatmulEngine::~MatmulEngine() {
  plans_.clear();
  for (auto& [s, p] : workspaces_) cudaFree(p);
  if (handle_) cublasLtDestroy(handle_);
}

size_t MatmulEngine::workspaces() const {
  std::lock_guard<std::mutex> lock(mu_);
  return workspaces_.size();
}

Status MatmulEngine::ReleaseStream(cudaStream_t stream) {
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workspaces_.find(stream);
    if (it == workspaces_.end()) return Status::Ok();
    p = it->second;
    workspaces_.erase(it);
  }
  // cudaFree waits for the device, so queued matmuls still reading the workspace finish first.
  OPFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  OPFUSE_CUDA_CHECK(cudaFree(p));
  return Status::Ok();
}

Status MatmulEngine::ReleaseStreamEverywhere(cudaStream_t stream) {
  std::vector<MatmulEngine*> all;
  {
    std::lock_guard<std::mutex> lock(engines_mu);
    for (auto& [dev, e] : Engines())
      if (e) all.push_back(e);
  }
  Status first;
  for (MatmulEngine* e : all) {
    Status s = e->ReleaseStream(stream);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

size_t MatmulEngine::cached_plans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plans_.size();
}

int64_t MatmulEngine::plan_misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

StatusOr<void*> MatmulEngine::Workspace(cudaStream_t stream) {
  auto it = workspaces_.find(stream);
  if (it != workspaces_.end()) return it->second;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  OPFUSE_CUDA_CHECK(cudaStreamIsCapturing(stream, &cap));
  if (cap != cudaStreamCaptureStatusNone)
    return Internal("cuBLASLt matmul: first matmul on a stream during CUDA-graph capture; run one matmul on the "
                    "stream before capturing so its workspace exists");
  void* p = nullptr;
  OPFUSE_CUDA_CHECK(cudaMalloc(&p, kWorkspaceBytes));
  workspaces_[stream] = p;
  return p;
}

StatusOr<MatmulEngine::Plan*> MatmulEngine::GetPlan(const Key& key, const MatmulArgs& args) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  ++misses_;
  auto plan = std::make_unique<Plan>();
  const cudaDataType_t dt = DataType(args.type);
  const bool has_bias = args.bias != nullptr;
  const uint64_t m = static_cast<uint64_t>(args.m), n = static_cast<uint64_t>(args.n), k = static_cast<uint64_t>(args.k);

  OPFUSE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, ComputeType(args.type), CUDA_R_32F));
  const cublasOperation_t op_a = args.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = CUBLAS_OP_N;
  OPFUSE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  OPFUSE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  const cublasLtEpilogue_t epi = Epilogue(args.epilogue, has_bias);
  OPFUSE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (has_bias) {
    OPFUSE_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dt, sizeof(dt)));
    // The pointer is set per call; set one now so the heuristic sees a bias epilogue fully described.
    OPFUSE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &args.bias,
                                                       sizeof(args.bias)));
  }
  // cuBLAS's A = our B: [N,K]ᵀ stored as col-major N×K (ld N), or our [N,K] stored as col-major K×N (ld K).
  if (args.transpose_b) {
    OPFUSE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->lt_a, dt, k, n, static_cast<int64_t>(k)));
  } else {
    OPFUSE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->lt_a, dt, n, k, static_cast<int64_t>(n)));
  }
  // cuBLAS's B = our A: row-major [M,K] is col-major K×M with ld K.
  OPFUSE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->lt_b, dt, k, m, static_cast<int64_t>(k)));
  // Output: row-major [M,N] is col-major N×M with ld N.
  OPFUSE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->lt_c, dt, n, m, static_cast<int64_t>(n)));

  OPFUSE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&plan->pref));
  const uint64_t ws = kWorkspaceBytes;
  OPFUSE_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(plan->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_a = static_cast<uint32_t>(std::get<8>(key));  // our B
  const uint32_t al_b = static_cast<uint32_t>(std::get<7>(key));  // our A
  const uint32_t al_c = static_cast<uint32_t>(std::get<9>(key));
  OPFUSE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(plan->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                           &al_a, sizeof(al_a)));
  OPFUSE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(plan->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                           &al_b, sizeof(al_b)));
  OPFUSE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(plan->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                           &al_c, sizeof(al_c)));
  OPFUSE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(plan->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                           &al_c, sizeof(al_c)));

  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  OPFUSE_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->lt_a, plan->lt_b, plan->lt_c,
                                                     plan->lt_c, plan->pref, 1, &result, &returned));
  if (returned == 0 || result.state != CUBLAS_STATUS_SUCCESS)
    return Unimplemented(fmt::format("cuBLASLt has no algorithm for {} matmul M={} N={} K={} transpose_b={} bias={}",
                                     MatmulTypeName(args.type), args.m, args.n, args.k, args.transpose_b, has_bias));
  plan->algo = result.algo;
  plan->workspace = result.workspaceSize;
  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  return raw;
}

Status MatmulEngine::Matmul(const MatmulArgs& args, cudaStream_t stream) {
  if (args.m < 0 || args.n < 0 || args.k < 0)
    return InvalidArgument(fmt::format("matmul: negative size M={} N={} K={}", args.m, args.n, args.k));
  if (args.m == 0 || args.n == 0) return Status::Ok();
  if (args.k == 0) return Unimplemented("matmul: K=0 is not supported by the cuBLASLt path");
  if (!args.a || !args.b || !args.c) return InvalidArgument("matmul: null A, B or C pointer");
  const bool has_bias = args.bias != nullptr;
  const Key key{static_cast<int>(args.type), args.m, args.n, args.k, args.transpose_b,
                static_cast<int>(args.epilogue), has_bias, Alignment(args.a), Alignment(args.b), Alignment(args.c)};
  std::lock_guard<std::mutex> lock(mu_);
  OPFUSE_ASSIGN_OR_RETURN(void* ws, Workspace(stream));
  OPFUSE_ASSIGN_OR_RETURN(Plan * plan, GetPlan(key, args));
  if (has_bias)
    OPFUSE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &args.bias,
                                                       sizeof(args.bias)));
  const float alpha = 1.0f, beta = 0.0f;
  OPFUSE_CUBLAS_CHECK(cublasLtMatmul(handle_, plan->desc, &alpha, args.b, plan->lt_a, args.a, plan->lt_b, &beta, args.c,
                                     plan->lt_c, args.c, plan->lt_c, &plan->algo, ws, kWorkspaceBytes, stream));
  return Status::Ok();
}

Status Matmul(const MatmulArgs& args, cudaStream_t stream) {
  OPFUSE_ASSIGN_OR_RETURN(MatmulEngine * e, MatmulEngine::ForCurrentDevice());
  return e->Matmul(args, stream);
}

}  // namespace opfuse::cuda
