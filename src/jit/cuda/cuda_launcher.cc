// CUDA runtime implementation of jit/cuda_launcher.h (built with OPFUSE_CUDA only).
// Grid sizing: row kernels get ceil(rows / rows_per_block) blocks up to 32 per SM (grid-stride beyond);
// pointwise kernels one thread per vector up to 8 blocks per SM of `threads` threads.
#include <algorithm>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "jit/cuda_launcher.h"

namespace opfuse::jit {

#define OPFUSE_CUDA_RETURN(call)                                                                 \
  do {                                                                                           \
    cudaError_t _e = (call);                                                                     \
    if (_e != cudaSuccess) return Internal(fmt::format("{}: {}", #call, cudaGetErrorString(_e))); \
  } while (0)

int CudaDeviceCount(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = fmt::format("no CUDA device ({})", cudaGetErrorString(e));
    cudaGetLastError();
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device";
  return n;
}

StatusOr<std::string> CudaDeviceArch() {
  int dev = 0, major = 0, minor = 0;
  OPFUSE_CUDA_RETURN(cudaGetDevice(&dev));
  OPFUSE_CUDA_RETURN(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  OPFUSE_CUDA_RETURN(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return fmt::format("sm_{}{}", major, minor);
}

StatusOr<std::shared_ptr<LoadedKernel>> LoadedKernel::Load(const JitKernel& k) {
  std::shared_ptr<LoadedKernel> lk(new LoadedKernel());
  lk->jit_ = k;
  cudaLibrary_t lib = nullptr;
  OPFUSE_CUDA_RETURN(cudaLibraryLoadData(&lib, k.binary->binary.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  lk->library_ = lib;
  cudaKernel_t kern = nullptr;
  cudaError_t e = cudaLibraryGetKernel(&kern, lib, k.emitted.function.c_str());
  if (e != cudaSuccess) return Internal(fmt::format("cudaLibraryGetKernel({}): {}", k.emitted.function, cudaGetErrorString(e)));
  lk->kernel_ = kern;
  int dev = 0;
  OPFUSE_CUDA_RETURN(cudaGetDevice(&dev));
  OPFUSE_CUDA_RETURN(cudaDeviceGetAttribute(&lk->sm_count_, cudaDevAttrMultiProcessorCount, dev));
  return lk;
}

LoadedKernel::~LoadedKernel() {
  if (library_) cudaLibraryUnload(static_cast<cudaLibrary_t>(library_));
}

StatusOr<LoadedKernel::Geometry> LoadedKernel::LaunchGeometry(const std::vector<int64_t>& symbol_values) const {
  const auto& k = jit_.kernel;
  if (symbol_values.size() != k.symbols.size())
    return InvalidArgument(fmt::format("{}: expected {} symbol values, got {}", jit_.emitted.function, k.symbols.size(),
                                       symbol_values.size()));
  Bindings b;
  for (size_t i = 0; i < k.symbols.size(); ++i) b[k.symbols[i]] = symbol_values[i];
  OPFUSE_ASSIGN_OR_RETURN(std::vector<int64_t> space, BindShape(k.space, b));
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < space.size(); ++i) rows *= space[i];
  const int64_t cols = space.back();
  Geometry geo;
  geo.threads = jit_.emitted.threads;
  if (rows * cols == 0) return geo;
  if (jit_.emitted.row) {
    const int64_t rpb = std::max(1, jit_.emitted.rows_per_block);
    geo.blocks = std::min<int64_t>((rows + rpb - 1) / rpb, int64_t{32} * sm_count_);
  } else {
    int64_t vecs = rows * cols / jit_.emitted.vec;
    geo.blocks = std::clamp<int64_t>((vecs + geo.threads - 1) / geo.threads, 1, int64_t{8} * sm_count_);
  }
  return geo;
}

Status LoadedKernel::Launch(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                            const std::vector<int64_t>& symbol_values, void* stream) const {
  const auto& k = jit_.kernel;
  if (inputs.size() != k.inputs.size() || outputs.size() != k.outputs.size() || symbol_values.size() != k.symbols.size())
    return InvalidArgument(fmt::format("{}: expected {} inputs, {} outputs, {} symbols", jit_.emitted.function,
                                       k.inputs.size(), k.outputs.size(), k.symbols.size()));
  OPFUSE_ASSIGN_OR_RETURN(Geometry geo, LaunchGeometry(symbol_values));
  if (geo.blocks == 0) return Status::Ok();
  std::vector<void*> args;
  std::vector<const void*> in_copy = inputs;
  std::vector<void*> out_copy = outputs;
  std::vector<long long> syms(symbol_values.begin(), symbol_values.end());
  for (auto& p : in_copy) args.push_back(&p);
  for (auto& p : out_copy) args.push_back(&p);
  for (auto& s : syms) args.push_back(&s);
  OPFUSE_CUDA_RETURN(cudaLaunchKernel(static_cast<const void*>(kernel_), dim3(static_cast<unsigned>(geo.blocks)),
                                      dim3(geo.threads), args.data(), 0, static_cast<cudaStream_t>(stream)));
  return Status::Ok();
}

}  // namespace opfuse::jit
