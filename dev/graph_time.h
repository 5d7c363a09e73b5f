// TimeCaptured(stream, enqueue): what the dev/ probes (gemv_sweep, gemv_chain, gemv_ring) time — the
// work `enqueue` puts on `stream`, run once outside a graph (warm-up: plans, workspaces), then captured
// in one CUDA graph and replayed 1 + 5 times; the fastest of the 5 timed replays, in µs. Host-only, so
// plain C++ probes and nvcc-built ones share it.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda_ck.h"

template <class F>
double TimeCaptured(cudaStream_t s, F&& enqueue) {
  enqueue();
  CK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  enqueue();
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  double best = 1e30;
  for (int r = 0; r < 6; ++r) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r > 0) best = std::min(best, 1e3 * double(ms));
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return best;
}

// The floor's denominator: GB/s of a device-to-device copy of `bytes` (read + write counted, as
// `opfuse bench ops` counts them), timed by TimeCaptured on `s`; the buffers are freed after.
inline double CopyGbs(cudaStream_t s, int64_t bytes) {
  void *src = nullptr, *dst = nullptr;
  CK(cudaMalloc(&src, bytes));
  CK(cudaMalloc(&dst, bytes));
  const double us = TimeCaptured(s, [&] { CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s)); });
  CK(cudaFree(src));
  CK(cudaFree(dst));
  return 2.0 * bytes / us / 1e3;
}
