// jit/cuda_launcher.h without the CUDA backend: every call says so (no silent no-op).
#ifndef OPFUSE_WITH_CUDA
#include "jit/cuda_launcher.h"

namespace opfuse::jit {

int CudaDeviceCount(std::string* why) {
  if (why) *why = "no CUDA device: opfuse was built without the CUDA backend (-DOPFUSE_CUDA=OFF)";
  return 0;
}
StatusOr<std::string> CudaDeviceArch() { return Unavailable("built without the CUDA backend"); }
StatusOr<std::shared_ptr<LoadedKernel>> LoadedKernel::Load(const JitKernel&) {
  return Unavailable("built without the CUDA backend");
}
LoadedKernel::~LoadedKernel() = default;
Status LoadedKernel::Launch(const std::vector<const void*>&, const std::vector<void*>&, const std::vector<int64_t>&,
                            void*) const {
  return Unavailable("built without the CUDA backend");
}
StatusOr<LoadedKernel::Geometry> LoadedKernel::LaunchGeometry(const std::vector<int64_t>&) const {
  return Unavailable("built without the CUDA backend");
}

}  // namespace opfuse::jit
#endif
