// KernelLaunch (launch.h): argument storage and the launch itself.
#include "cuda/launch.h"

#include <fmt/format.h>

namespace opfuse::cuda {

KernelLaunch KernelLaunch::Raw(std::string name, const void* func, dim3 grid, dim3 block, size_t smem,
                               const std::vector<std::vector<std::byte>>& args) {
  KernelLaunch l;
  l.name_ = std::move(name);
  l.func_ = func;
  l.grid_ = grid;
  l.block_ = block;
  l.smem_ = smem;
  auto storage = std::make_shared<Storage>();
  std::vector<size_t> offsets;
  for (const auto& a : args) {
    size_t off = (storage->bytes.size() + 7) / 8 * 8;  // keep every argument 8-byte aligned
    storage->bytes.resize(off + a.size());
    std::memcpy(storage->bytes.data() + off, a.data(), a.size());
    offsets.push_back(off);
  }
  for (size_t off : offsets) storage->args.push_back(storage->bytes.data() + off);
  l.storage_ = std::move(storage);
  return l;
}

KernelLaunch KernelLaunch::Custom(std::string name, std::function<Status(cudaStream_t)> fn, int kernels) {
  KernelLaunch l;
  l.name_ = std::move(name);
  l.custom_ = std::move(fn);
  l.kernels_ = kernels;
  return l;
}

Status KernelLaunch::Launch(cudaStream_t stream) const {
  if (custom_) return custom_(stream);
  if (!func_) return Internal(fmt::format("launch '{}': empty launch record", name_));
  if (grid_.x == 0 || grid_.y == 0 || grid_.z == 0) return Status::Ok();  // nothing to do (empty tensor)
  cudaError_t e;
  if (pdl_ || cluster_ > 0) {
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (pdl_) {
      attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster_ > 0) {
      attr[n].id = cudaLaunchAttributeClusterDimension;
      attr[n].val.clusterDim.x = static_cast<unsigned>(cluster_);
      attr[n].val.clusterDim.y = 1;
      attr[n++].val.clusterDim.z = 1;
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid_;
    cfg.blockDim = block_;
    cfg.dynamicSmemBytes = smem_;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = n;
    e = cudaLaunchKernelExC(&cfg, func_, storage_ ? storage_->args.data() : nullptr);
  } else {
    e = cudaLaunchKernel(func_, grid_, block_, storage_ ? storage_->args.data() : nullptr, smem_, stream);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Internal(fmt::format("launch '{}' (grid {}x{}x{}, block {}x{}x{}, smem {}{}{}): {}", name_, grid_.x, grid_.y,
                                grid_.z, block_.x, block_.y, block_.z, smem_, pdl_ ? ", pdl" : "",
                                cluster_ > 0 ? fmt::format(", cluster {}", cluster_) : "", cudaGetErrorString(e)));
  }
  return Status::Ok();
}

}  // namespace opfuse::cuda
