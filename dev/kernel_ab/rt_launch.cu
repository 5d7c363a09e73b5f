// rt_launch: scratch probe (dev/, session 11, issue 4) for dev/kernel_ab/peer_ab.py --rt-lib. A shared
// library with its own static cudart, as libopfuse_capi.so has, so that peer_ab can launch a cubin
// inside PyTorch's process the way opfuse's executor does (cudaLibraryLoadData + cudaLaunchKernel
// through a second, static cudart) and, from the same library, through the driver's cuLaunchKernel
// (cudaGetDriverEntryPoint, no -lcuda). Question: is the ~0.1-0.2 µs that opfuse's executor adds over a
// ctypes cuLaunchKernel of the same cubin (peer_ab, same kernel duration under CUPTI) the runtime launch?
// Build: nvcc -O2 -std=c++17 -shared -Xcompiler -fPIC -cudart static -gencode arch=compute_90,code=sm_90 \
//          dev/kernel_ab/rt_launch.cu -o build/kab/librt_launch.so
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>

namespace {
using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                              void**, void**);
LaunchFn g_launch = nullptr;
}  // namespace

extern "C" void* rt_load(const void* image, const char* name) {
  cudaLibrary_t lib = nullptr;
  cudaKernel_t k = nullptr;
  if (cudaLibraryLoadData(&lib, image, nullptr, nullptr, 0, nullptr, nullptr, 0) != cudaSuccess ||
      cudaLibraryGetKernel(&k, lib, name) != cudaSuccess) {
    std::fprintf(stderr, "rt_load %s: %s\n", name, cudaGetErrorString(cudaGetLastError()));
    return nullptr;
  }
  if (!g_launch) {
    cudaDriverEntryPointQueryResult q;
    void* fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuLaunchKernel", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      std::fprintf(stderr, "rt_load: no cuLaunchKernel entry point\n");
      return nullptr;
    }
    g_launch = reinterpret_cast<LaunchFn>(fn);
  }
  return reinterpret_cast<void*>(k);
}

// mode 0: cudaLaunchKernel (the runtime, as opfuse's KernelLaunch); 1: the driver's cuLaunchKernel with
// the same handle (a CUkernel is accepted where a CUfunction is).
extern "C" int rt_launch(void* k, unsigned grid, unsigned block, void** args, void* stream, int mode) {
  if (mode == 0) {
    const cudaError_t e = cudaLaunchKernel(k, dim3(grid), dim3(block), args, 0, static_cast<cudaStream_t>(stream));
    return e == cudaSuccess ? 0 : static_cast<int>(e);
  }
  const CUresult r = g_launch(reinterpret_cast<CUfunction>(k), grid, 1, 1, block, 1, 1, 0, static_cast<CUstream>(stream),
                              args, nullptr);
  return static_cast<int>(r);
}
