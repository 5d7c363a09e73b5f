// KernelLaunch: one pre-resolved kernel launch of the CUDA backend.
//
// Design: the executor resolves every launch of a graph once per (symbol bindings, I/O pointers) —
// kernel function, grid, block, shared memory and the argument bytes — so running the graph is a
// loop of cudaLaunchKernel calls with nothing left to compute (DESIGN.md "Backends and
// execution"). The same record serves the three kinds of kernels we launch:
//   * library kernels (src/kernels/*.cu): a __global__ function taking one params struct by value;
//     KernelLaunch::Make copies the struct into the record;
//   * JIT kernels (cudaKernel_t from cudaLibraryGetKernel, launched through cudaLaunchKernel too):
//     KernelLaunch::Raw with the argument bytes one by one;
//   * anything that is not a single kernel (a cuBLASLt matmul, a memcpy): KernelLaunch::Custom.
// Records are cheap to copy (argument storage is shared) and Launch() is const and thread-safe.
// Built with OPFUSE_CUDA only.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "opfuse/status.h"
#include "cuda/cuda_check.h"

namespace opfuse::cuda {

class KernelLaunch {
 public:
  KernelLaunch() = default;

  // A library kernel `void kernel(P params)`; `params` is copied.
  template <class P>
  static KernelLaunch Make(std::string name, void (*kernel)(P), dim3 grid, dim3 block, size_t smem, const P& params) {
    KernelLaunch l;
    l.name_ = std::move(name);
    l.func_ = reinterpret_cast<const void*>(kernel);
    l.grid_ = grid;
    l.block_ = block;
    l.smem_ = smem;
    auto storage = std::make_shared<Storage>();
    storage->bytes.resize(sizeof(P));
    std::memcpy(storage->bytes.data(), &params, sizeof(P));
    storage->args.push_back(storage->bytes.data());
    l.storage_ = std::move(storage);
    return l;
  }

  // A kernel handle (cudaKernel_t or __global__ function) with its arguments as raw bytes, in order.
  static KernelLaunch Raw(std::string name, const void* func, dim3 grid, dim3 block, size_t smem,
                          const std::vector<std::vector<std::byte>>& args);

  // Work that is not one kernel launch (cuBLASLt, copies). Must be stream-ordered and capturable.
  static KernelLaunch Custom(std::string name, std::function<Status(cudaStream_t)> fn, int kernels = 1);

  Status Launch(cudaStream_t stream) const;

  // Programmatic dependent launch (Hopper): launched with cudaLaunchAttributeProgrammaticStream-
  // Serialization, so it may start while the kernel before it on the stream is still running. Only
  // for kernels that call kernels/pdl.cuh's PdlWait() before touching memory an earlier kernel
  // writes or reads (the library kernels of the decode step: GEMV, norms, RoPE, attention decode,
  // KV-cache write, embedding). The executor clears it under OPFUSE_DISABLE=pdl.
  KernelLaunch& Pdl(bool on = true) {
    pdl_ = on && func_ != nullptr;
    return *this;
  }
  bool pdl() const { return pdl_; }
  // Thread block clusters (sm_90+) of `blocks` blocks along x, as a launch attribute (kernels whose
  // cluster size is chosen per launch: the split row kernels, target::RowSplitFor); the grid's x must
  // be a multiple of it. 0: no cluster attribute.
  KernelLaunch& Cluster(int blocks) {
    cluster_ = blocks;
    return *this;
  }
  int cluster() const { return cluster_; }

  const std::string& name() const { return name_; }
  // Device kernels this record launches (Custom may launch several or none).
  int kernels() const { return kernels_; }
  bool empty() const { return func_ == nullptr && !custom_; }
  dim3 grid() const { return grid_; }
  dim3 block() const { return block_; }

 private:
  struct Storage {
    std::vector<std::byte> bytes;
    std::vector<void*> args;
  };
  std::string name_;
  const void* func_ = nullptr;
  dim3 grid_{1, 1, 1}, block_{1, 1, 1};
  size_t smem_ = 0;
  std::shared_ptr<Storage> storage_;
  std::function<Status(cudaStream_t)> custom_;
  int kernels_ = 1;
  bool pdl_ = false;
  int cluster_ = 0;
};

// Argument bytes of one value, for KernelLaunch::Raw.
template <class T>
std::vector<std::byte> ArgBytes(const T& v) {
  std::vector<std::byte> b(sizeof(T));
  std::memcpy(b.data(), &v, sizeof(T));
  return b;
}

}  // namespace opfuse::cuda
