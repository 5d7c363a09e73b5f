// See eval_candidate.h: NVRTC compile, cudaLibraryLoadData, the launch array read back, launches.
#include "bench/cuda/eval_candidate.h"

#include <cuda_runtime_api.h>

#include <memory>

#include <fmt/format.h>

#include "jit/cuda_launcher.h"
#include "jit/nvrtc_compiler.h"

namespace opfuse::bench {
namespace {

struct Library {
  cudaLibrary_t lib = nullptr;
  ~Library() {
    if (lib) cudaLibraryUnload(lib);
  }
};

Status CudaOk(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Internal(fmt::format("{}: {}: {}", what, cudaGetErrorName(e), cudaGetErrorString(e)));
}

}  // namespace

StatusOr<CandidateKernel> LoadCandidate(const std::string& source, const std::string& label, const OpCase& c) {
  OPFUSE_ASSIGN_OR_RETURN(std::string arch, jit::CudaDeviceArch());
  auto out = jit::CompileCuda(source, label, arch);
  if (!out.ok()) return InvalidArgument(fmt::format("{}: NVRTC: {}", label, out.status().message()));
  auto lib = std::make_shared<Library>();
  OPFUSE_RETURN_IF_ERROR(CudaOk(cudaLibraryLoadData(&lib->lib, out->cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
                                "cudaLibraryLoadData"));
  cudaKernel_t kernel = nullptr;
  if (cudaLibraryGetKernel(&kernel, lib->lib, kEvalKernelName) != cudaSuccess) {
    cudaGetLastError();
    return InvalidArgument(fmt::format("{}: no `extern \"C\" __global__ void {}(...)` (docs/eval.md)", label, kEvalKernelName));
  }
  void* launch_dev = nullptr;
  size_t launch_bytes = 0;
  if (cudaLibraryGetGlobal(&launch_dev, &launch_bytes, lib->lib, kEvalLaunchName) != cudaSuccess) {
    cudaGetLastError();
    return InvalidArgument(fmt::format("{}: no `extern \"C\" __constant__ unsigned int {}[7]` (docs/eval.md)", label, kEvalLaunchName));
  }
  if (launch_bytes != 7 * sizeof(unsigned))
    return InvalidArgument(fmt::format("{}: {} has {} bytes; expected unsigned int[7] (grid xyz, block xyz, shared bytes)", label,
                                       kEvalLaunchName, launch_bytes));
  unsigned cfg[7];
  OPFUSE_RETURN_IF_ERROR(CudaOk(cudaMemcpy(cfg, launch_dev, sizeof(cfg), cudaMemcpyDeviceToHost), "reading the launch array"));
  for (int i = 0; i < 6; ++i)
    if (cfg[i] == 0) return InvalidArgument(fmt::format("{}: {}[{}] is 0", label, kEvalLaunchName, i));
  if (static_cast<uint64_t>(cfg[3]) * cfg[4] * cfg[5] > 1024)
    return InvalidArgument(fmt::format("{}: block {}x{}x{} has more than 1024 threads", label, cfg[3], cfg[4], cfg[5]));
  if (cfg[6] > 48 * 1024)
    OPFUSE_RETURN_IF_ERROR(CudaOk(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(cfg[6])),
                                  "dynamic shared memory"));
  CandidateKernel k;
  k.compile_ms = out->compile_ms;
  k.kernels = {fmt::format("{}:{} grid {}x{}x{} block {}x{}x{}", label, kEvalKernelName, cfg[0], cfg[1], cfg[2], cfg[3], cfg[4], cfg[5])};
  const size_t n_args = c.inputs.size() + c.outputs.size();
  const dim3 grid(cfg[0], cfg[1], cfg[2]), block(cfg[3], cfg[4], cfg[5]);
  const size_t smem = cfg[6];
  k.launch = [lib, kernel, grid, block, smem, n_args](const std::vector<void*>& in, const std::vector<void*>& outs,
                                                     void* stream) -> Status {
    if (in.size() + outs.size() != n_args) return Internal("candidate launch: wrong number of buffers");
    std::vector<void*> ptrs(in);
    ptrs.insert(ptrs.end(), outs.begin(), outs.end());
    std::vector<void*> args;
    for (auto& p : ptrs) args.push_back(&p);
    return CudaOk(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, args.data(), smem,
                                   static_cast<cudaStream_t>(stream)),
                  "candidate launch");
  };
  return k;
}

}  // namespace opfuse::bench
