// gemv_ring: scratch probe (dev/, not part of the build) of a one-row decode GEMV y = W a (bf16, W[n, k]
// row-major) whose weights stream through a per-warp ring of shared memory filled by cp.async, so the
// bytes in flight a SM are set by the ring's depth, not by registers. Question it answers (issue 32,
// batch 1): with more bytes in flight, how close does a chain of a decode step's GEMVs get to the
// weight-read floor? The library's CUDA-core GEMV keeps 4 KB a warp in registers and runs the same
// chain at 1.58x the floor (dev/gemv_chain, run it in the same call for the comparison).
//
// Kernel: 4 warps a block, persistent; warp g takes columns g, g + 4 * grid, ...; its stream is the
// concatenation of those columns' k-packs in chunks of 32 lanes x P packs of 16 bytes; a chunk is
// issued STAGES - 1 chunks ahead (one cp.async group per chunk) and each lane reads back only the packs
// it copied itself, so cp.async.wait_group is the only synchronisation. Launched with PDL: the first
// STAGES - 1 chunks are issued before griddepcontrol.wait (the weights are never written).
//
// Method as dev/gemv_chain: TinyLlama's q/k/v, o, gate+up, down (2560x2048, 2048x2048, 11264x2048,
// 2048x5632), 22 layers of their own weights, one CUDA graph, best of 5 replays / 22; floor = the
// layer's bytes over a same-size device-to-device copy timed the same way. Check: every output
// against a CPU dot product of the same bf16 inputs (f64), relative max error <= 1e-2.
//
// Answer (H200, docs/BENCHMARKS.md "Where a decode step's time goes"): no. The chain runs at 1.93x
// the floor with 4 KB a warp in flight and gets slower as the ring deepens (2.39-2.53x at 16 KB a
// warp: shared memory then caps the blocks a SM), against 1.58x for the library's register-fed GEMV in
// the same call. Bytes in flight are not what a one-row GEMV chain lacks; each launch's fixed
// latency (one round trip to DRAM for a few MB) is.
//
// Build: nvcc -O2 -std=c++20 -gencode arch=compute_90,code=sm_90 dev/gemv_ring/gemv_ring.cu -o build/gemv_ring
// Run:   build/gemv_ring
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "../cuda_ck.h"
#include "../graph_time.h"

namespace {

__device__ __forceinline__ float Dot8(const uint4& w, const uint4& a, float acc) {
  const uint32_t ww[4] = {w.x, w.y, w.z, w.w}, aa[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(ww[i] << 16), __uint_as_float(aa[i] << 16), acc);
    acc = fmaf(__uint_as_float(ww[i] & 0xffff0000u), __uint_as_float(aa[i] & 0xffff0000u), acc);
  }
  return acc;
}

template <int STAGES, int P>
__global__ void __launch_bounds__(128) RingGemv(const uint4* __restrict__ w, const uint4* __restrict__ a,
                                                __nv_bfloat16* __restrict__ y, int n, int kv) {
  extern __shared__ uint4 ring[];  // [warp][stage][P][32]
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
  uint4* my = ring + static_cast<size_t>(wib) * STAGES * P * 32;
  const int cpc = (kv + 32 * P - 1) / (32 * P);  // chunks per column
  const int g = blockIdx.x * 4 + wib, stride = gridDim.x * 4;
  const int ncols = g < n ? (n - 1 - g) / stride + 1 : 0;
  const int total = ncols * cpc;
  auto issue = [&](int q) {
    if (q < total) {
      const int col = g + (q / cpc) * stride, j = q % cpc;
      uint4* dst = my + static_cast<size_t>(q % STAGES) * P * 32;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int pk = j * 32 * P + p * 32 + lane;
        const uint4* src = w + static_cast<size_t>(col) * kv + min(pk, kv - 1);
        const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(dst + p * 32 + lane));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sa), "l"(src), "r"(pk < kv ? 16 : 0));
      }
    }
    asm volatile("cp.async.commit_group;");
  };
  asm volatile("griddepcontrol.launch_dependents;");
  for (int q = 0; q < STAGES - 1; ++q) issue(q);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  float acc = 0.f;
  for (int q = 0; q < total; ++q) {
    issue(q + STAGES - 1);
    asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 1));
    const int j = q % cpc;
    const uint4* src = my + static_cast<size_t>(q % STAGES) * P * 32;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int pk = j * 32 * P + p * 32 + lane;
      if (pk < kv) acc = Dot8(src[p * 32 + lane], __ldg(a + pk), acc);
    }
    if (j == cpc - 1) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (lane == 0) y[g + (q / cpc) * stride] = __float2bfloat16_rn(acc);
      acc = 0.f;
    }
  }
  asm volatile("cp.async.wait_all;");
}

template <int STAGES, int P>
struct Ring {
  static constexpr size_t kSmem = size_t{4} * STAGES * P * 32 * 16;
  int grid = 0;
  explicit Ring(int sms) {
    CK(cudaFuncSetAttribute(RingGemv<STAGES, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, RingGemv<STAGES, P>, 128, kSmem));
    grid = sms * std::max(occ, 1);
  }
  void Launch(cudaStream_t s, const void* w, const void* a, void* y, int n, int k) const {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(std::min(grid, (n + 3) / 4)));
    cfg.blockDim = dim3(128);
    cfg.dynamicSmemBytes = kSmem;
    cfg.stream = s;
    cudaLaunchAttribute at{};
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, RingGemv<STAGES, P>, static_cast<const uint4*>(w), static_cast<const uint4*>(a),
                          static_cast<__nv_bfloat16*>(y), n, k / 8));
  }
};

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  struct Mat {
    const char* what;
    int n, k;
  };
  const Mat mats[] = {{"qkv", 2560, 2048}, {"o", 2048, 2048}, {"gate+up", 11264, 2048}, {"down", 2048, 5632}};
  constexpr int kLayers = 22;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  int64_t layer_bytes = 0;
  for (const Mat& m : mats) layer_bytes += int64_t{m.n} * m.k * 2;
  std::vector<void*> w(kLayers * 4), act(4), out(4);
  std::vector<std::vector<__nv_bfloat16>> hw(4), ha(4);
  for (int j = 0; j < 4; ++j) {
    hw[j].resize(static_cast<size_t>(mats[j].n) * mats[j].k);
    for (auto& v : hw[j]) v = __float2bfloat16(nd(rng) / std::sqrt(float(mats[j].k)));
    ha[j].resize(static_cast<size_t>(mats[j].k));
    for (auto& v : ha[j]) v = __float2bfloat16(nd(rng));
    CK(cudaMalloc(&act[j], ha[j].size() * 2));
    CK(cudaMemcpy(act[j], ha[j].data(), ha[j].size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&out[j], size_t{2} * mats[j].n));
  }
  for (int l = 0; l < kLayers; ++l)
    for (int j = 0; j < 4; ++j) {
      CK(cudaMalloc(&w[l * 4 + j], hw[j].size() * 2));
      CK(cudaMemcpy(w[l * 4 + j], hw[j].data(), hw[j].size() * 2, cudaMemcpyHostToDevice));
    }
  const double gbs = CopyGbs(s, layer_bytes * kLayers / 2), floor_us = layer_bytes / gbs / 1e3;
  std::printf("device %s, %d SMs; copy %.0f GB/s; per layer %lld MB, floor %.2f us\n", prop.name, prop.multiProcessorCount,
              gbs, (long long)(layer_bytes >> 20), floor_us);
  std::printf("| ring (stages x packs a lane) | KB in flight a warp | blocks | us / layer | x floor | GB/s | max rel err |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  bool failed = false;
  auto run = [&](auto ring, int stages, int packs) {
    const double us = TimeCaptured(s, [&] {
      for (int l = 0; l < kLayers; ++l)
        for (int j = 0; j < 4; ++j) ring.Launch(s, w[l * 4 + j], act[j], out[j], mats[j].n, mats[j].k);
    }) / kLayers;
    double worst = 0;
    for (int j = 0; j < 4; ++j) {
      std::vector<__nv_bfloat16> got(static_cast<size_t>(mats[j].n));
      CK(cudaMemcpy(got.data(), out[j], got.size() * 2, cudaMemcpyDeviceToHost));
      double num = 0, den = 0;
      for (int c = 0; c < mats[j].n; ++c) {
        double r = 0;
        for (int i = 0; i < mats[j].k; ++i)
          r += double(__bfloat162float(hw[j][static_cast<size_t>(c) * mats[j].k + i])) * __bfloat162float(ha[j][i]);
        num = std::max(num, std::fabs(double(__bfloat162float(got[c])) - r));
        den = std::max(den, std::fabs(r));
      }
      worst = std::max(worst, num / den);
    }
    failed |= !(worst <= 1e-2);
    std::printf("| %d x %d | %d | %d | %.2f | %.2f | %.0f | %.1e%s |\n", stages, packs, (stages - 1) * packs * 32 * 16 / 1024,
                ring.grid, us, us / floor_us, layer_bytes / us / 1e3, worst, worst <= 1e-2 ? "" : " **FAIL**");
  };
  const int sms = prop.multiProcessorCount;
  run(Ring<2, 8>(sms), 2, 8);
  run(Ring<3, 4>(sms), 3, 4);
  run(Ring<5, 4>(sms), 5, 4);
  run(Ring<9, 4>(sms), 9, 4);
  run(Ring<5, 8>(sms), 5, 8);
  run(Ring<9, 2>(sms), 9, 2);
  run(Ring<17, 2>(sms), 17, 2);
  std::printf("%s\n", failed ? "validation FAILED" : "validation ok (every output within 1e-2 of the f64 dot product)");
  return failed ? 1 : 0;
}
