// Shared by the dev/ scratch probes (launch_gap, the row probes), which are built by hand with nvcc
// (the commands are in their headers) and run on the device: the CUDA check, the spin kernels that
// stand before a timed sample, the deep L2 flush, the 16-byte copy the row probes measure against,
// and driver entry points without linking libcuda.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "cuda_ck.h"

// The same-size copy of the row probes (lse_stream, stage_pipeline, grid_split): n 16-byte vectors,
// grid-stride, one a thread a step.
__global__ void Copy16(const uint4* __restrict__ a, uint4* __restrict__ b, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) b[i] = a[i];
}

// opfuse's bench spin (src/bench/cuda/bench_kernels.cu): wait on %globaltimer, polling every 200 ns.
__global__ void SpinSleep(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(200);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// PyTorch's torch.cuda._sleep (at::cuda::sleep's spin_kernel, the peer's spin): clock64 cycles, not %globaltimer.
__global__ void SpinClock(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// A flush that also removes lines other kernels tagged L2::evict_last (Triton's reduction kernels
// load their inputs so): read the buffer with an evict_last policy, so its lines displace older
// evict_last lines as equals, then demote them to evict_normal (applypriority), so L2 is left with
// clean, normal-priority lines of the flush buffer only.
__global__ void DeepFlush(const int4* __restrict__ p, long long n, int* sink) {
  unsigned long long pol;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  int acc = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int4 v;
    asm volatile("ld.global.L2::cache_hint.v4.s32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p + i), "l"(pol));
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345) *sink = acc;
  __syncthreads();
  // Every 128-byte line (8 int4) back to evict_normal.
  for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 8; i < n; i += stride * 8)
    asm volatile("applypriority.global.L2::evict_normal [%0], 128;" ::"l"(p + i));
}

// A driver API function (cuModuleLoadData, cuLaunchKernel, ...) through the runtime's entry point
// lookup, so the probe needs no libcuda link; exits when the driver lacks it.
template <class F>
F Entry(const char* name) {
  void* fp = nullptr;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion(name, &fp, 12000, cudaEnableDefault, &q));
  if (!fp || q != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "no %s entry point\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(fp);
}
