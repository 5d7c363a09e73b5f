// Loading and launching JIT kernels on a CUDA device, through the CUDA runtime's library API
// (cudaLibraryLoadData / cudaLibraryGetKernel: no driver-API context juggling, works with the
// statically linked cudart). Built only with the CUDA backend (src/jit/cuda/); without it every
// call returns Unavailable, so callers and tests can say "no CUDA" cleanly.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jit/jit_compiler.h"

namespace opfuse::jit {

// The pointwise decode function runs tensors of at most this many of its blocks per SM. In bench ops
// (the jit variant at 1 / 8 / 32 rows, docs/BENCHMARKS.md) every tensor that took the decode function
// ran faster with it, none slower: at 1 block per SM only rows = 1 ran it (swiglu, geglu); 4 and 16
// per SM also took geglu 8 x 5632 and 32 x 4096 and swiglu 32 x 4096, and 16 swiglu / geglu 32 x 5632
// (5.3 blocks per SM); 8 covers every measured case.
inline constexpr int kPointwiseDecodeBlocksPerSm = 8;

// Number of CUDA devices usable by this process (0 when built without CUDA, with no driver, or
// with no GPU); `why` gets the reason when 0.
int CudaDeviceCount(std::string* why = nullptr);
// "sm_90" for the current device.
StatusOr<std::string> CudaDeviceArch();

class LoadedKernel {
 public:
  static StatusOr<std::shared_ptr<LoadedKernel>> Load(const JitKernel& k);
  ~LoadedKernel();
  // Device pointers in kernel order; symbol values in Kernel::symbols order. `stream` is a
  // cudaStream_t (nullptr = default stream).
  Status Launch(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                const std::vector<int64_t>& symbol_values, void* stream = nullptr) const;
  const JitKernel& jit() const { return jit_; }

  // Grid and block for `symbol_values` (Kernel::symbols order); blocks == 0 for an empty tensor.
  // With handle() this is everything a pre-resolved launch needs (runtime/cuda/executor.cc).
  struct Geometry {
    int64_t blocks = 0;
    int threads = 0;
    const void* kernel = nullptr;  // the cudaKernel_t to launch (row kernels: prefill, decode or split function)
    const std::string* function = nullptr;  // its name
    int cluster = 0;  // blocks per cluster (the split function: a launch attribute); 0: none
    int64_t smem = 0;  // dynamic shared memory (the stage function's windows)
  };
  StatusOr<Geometry> LaunchGeometry(const std::vector<int64_t>& symbol_values) const;
  // The cudaKernel_t of the main (prefill) function, usable as cudaLaunchKernel's function argument;
  // Geometry::kernel says which function a given launch uses.
  const void* handle() const { return kernel_; }

 private:
  LoadedKernel() = default;
  JitKernel jit_;
  void* library_ = nullptr;  // cudaLibrary_t
  void* kernel_ = nullptr;   // cudaKernel_t
  void* decode_kernel_ = nullptr;  // cudaKernel_t of emitted.decode_function (== kernel_ when the same)
  void* split_kernel_ = nullptr;   // cudaKernel_t of emitted.split_function (null when none)
  void* stage_kernel_ = nullptr;   // cudaKernel_t of emitted.stage_function (null when none or too big here)
  void* stage_split_kernel_ = nullptr;  // cudaKernel_t of emitted.stage_split_function (null when none or pre-sm_90)
  int64_t smem_optin_ = 0;         // shared memory a block may opt in to, and an SM's
  int64_t smem_per_sm_ = 0;
  int sm_threads_ = 0;             // resident threads an SM holds
  int sm_regs_ = 0;                // 32-bit registers of an SM
  int stage_regs_ = 0;             // registers per thread of the stage function (0: unknown)
  int stage_split_regs_ = 0;       // registers per thread of the staged split function (0: unknown)
  int sm_count_ = 0;
  int cc_major_ = 0;
};

}  // namespace opfuse::jit
