// launch_gap: scratch probe (dev/, not part of the build) of the device time CUDA events see around
// one short kernel, by how the kernel is launched. Question it answers (session 8, issue 4): in a
// CUPTI trace of `opfuse bench ops` and tools/bench_peer.py, kernels launched through the runtime
// (opfuse's, and PyTorch's own) started a median ~2.9 µs after the spin kernel before them ended,
// Triton's (driver API cuLaunchKernel) ~2.4 µs. Is it the launch API?
//
// Each sample: spin kernel (50 µs) -> start event -> one launch -> end event; median of 300 samples
// for: an empty 1x32 kernel and a 512x256 kernel, each launched with cudaLaunchKernel, with
// cudaLaunchKernelExC (no attributes; with the PDL attribute), and with cuLaunchKernel (entry point
// from cudaGetDriverEntryPointByVersion, no libcuda link), on a non-blocking stream and on the legacy default stream.
//
// Second table: an empty kernel and 1024 dependent FMAs as straight-line code or as a loop, with
// and without a 2x-L2 memset before each sample (does a kernel's code size cost after an L2 flush?).
//
// Build: nvcc -O2 -std=c++20 -gencode arch=compute_90,code=sm_90 -cudart static dev/launch_gap/launch_gap.cu -o build/launch_gap
// Run:   build/launch_gap            (prints one table)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

__global__ void Spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

__global__ void Empty(float* p, int n) {
  if (p && threadIdx.x + blockIdx.x * blockDim.x == n) p[0] = 1.f;  // never: n is out of range
}

// The same 1024 dependent FMAs as 16 KiB of straight-line code, or as a loop of 8 (small code):
// after an L2 flush the straight version's instructions come from HBM, the loop's mostly from the
// instruction cache after the first iteration.
template <int kUnroll>
__global__ void Fmas(float* p, int n) {
  float x = threadIdx.x * 1e-3f;
#pragma unroll 1
  for (int i = 0; i < 1024 / kUnroll; ++i) {
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) x = x * 1.0001f + 0.5f;
  }
  if (p && threadIdx.x + blockIdx.x * blockDim.x == n) p[0] = x;  // never: n is out of range
}

using LaunchFn = std::function<void(cudaStream_t)>;
void* g_flush = nullptr;  // when set: a 2x-L2 memset before each sample's spin (bench ops' flush)
size_t g_flush_bytes = 0;

double MedianUs(cudaStream_t s, const LaunchFn& launch) {
  std::vector<cudaEvent_t> ev(2 * 300);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < 10; ++i) launch(s);
  CK(cudaStreamSynchronize(s));
  for (int i = 0; i < 300; ++i) {
    if (g_flush) CK(cudaMemsetAsync(g_flush, i & 0x7f, g_flush_bytes, s));
    Spin<<<1, 1, 0, s>>>(50000);
    CK(cudaEventRecord(ev[2 * i], s));
    launch(s);
    CK(cudaEventRecord(ev[2 * i + 1], s));
  }
  CK(cudaStreamSynchronize(s));
  std::vector<float> ms;
  for (int i = 0; i < 300; ++i) {
    float t;
    CK(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
    ms.push_back(t);
  }
  for (auto& e : ev) CK(cudaEventDestroy(e));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e3;
}

int main() {
  CK(cudaFree(nullptr));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  void* fp = nullptr;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &fp, 12000, cudaEnableDefault, &q));
  if (!fp || q != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "no cuLaunchKernel entry point\n");
    return 1;
  }
  auto cuLaunch = reinterpret_cast<decltype(&cuLaunchKernel)>(fp);
  CUfunction fn = nullptr;
  CK(cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t*>(&fn), reinterpret_cast<const void*>(&Empty)));
  float* p = nullptr;
  int n = -1;
  void* args[] = {&p, &n};
  cudaStream_t nb;
  CK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
  std::printf("device: %s\n", prop.name);
  std::printf("| launch | grid | stream | events median us |\n|---|---|---|---:|\n");
  for (auto [gx, bx] : {std::pair<unsigned, unsigned>{1, 32}, {512, 256}}) {
    for (cudaStream_t s : {nb, static_cast<cudaStream_t>(nullptr)}) {
      const char* sn = s ? "non-blocking" : "legacy default";
      auto row = [&](const char* name, const LaunchFn& l) {
        std::printf("| %s | %ux%u | %s | %.2f |\n", name, gx, bx, sn, MedianUs(s, l));
      };
      row("<<<>>>", [&](cudaStream_t st) { Empty<<<gx, bx, 0, st>>>(p, n); });
      row("cudaLaunchKernel", [&](cudaStream_t st) {
        CK(cudaLaunchKernel(reinterpret_cast<const void*>(&Empty), dim3(gx), dim3(bx), args, 0, st));
      });
      row("cudaLaunchKernelExC", [&](cudaStream_t st) {
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(gx);
        cfg.blockDim = dim3(bx);
        cfg.stream = st;
        CK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(&Empty), args));
      });
      row("cudaLaunchKernelExC + PDL", [&](cudaStream_t st) {
        cudaLaunchAttribute a[1];
        a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        a[0].val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(gx);
        cfg.blockDim = dim3(bx);
        cfg.stream = st;
        cfg.attrs = a;
        cfg.numAttrs = 1;
        CK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(&Empty), args));
      });
      row("cuLaunchKernel", [&](cudaStream_t st) {
        if (cuLaunch(fn, gx, 1, 1, bx, 1, 1, 0, reinterpret_cast<CUstream>(st), args, nullptr) != CUDA_SUCCESS) {
          std::fprintf(stderr, "cuLaunchKernel failed\n");
          std::exit(1);
        }
      });
    }
  }
  // L2 flush or not, small or large code.
  g_flush_bytes = 2 * static_cast<size_t>(prop.l2CacheSize);
  CK(cudaMalloc(&g_flush, g_flush_bytes));
  std::printf("\n| kernel (512x256) | no flush us | after 2x-L2 memset us | difference |\n|---|---:|---:|---:|\n");
  auto pair = [&](const char* name, const LaunchFn& l) {
    void* keep = g_flush;
    g_flush = nullptr;
    const double a = MedianUs(nb, l);
    g_flush = keep;
    const double b = MedianUs(nb, l);
    std::printf("| %s | %.2f | %.2f | %+.2f |\n", name, a, b, b - a);
  };
  pair("empty", [&](cudaStream_t st) { Empty<<<512, 256, 0, st>>>(p, n); });
  pair("1024 FMAs straight (16 KiB code)", [&](cudaStream_t st) { Fmas<1024><<<512, 256, 0, st>>>(p, n); });
  pair("1024 FMAs, loop of 8", [&](cudaStream_t st) { Fmas<8><<<512, 256, 0, st>>>(p, n); });
  return 0;
}
