// lse_stream: scratch probe (dev/, not part of the build) for issue 30's worst read-only row reduction:
// the JIT's staged logsumexp runs wide bf16 rows at 0.56-0.58 of the same-size copy (2249 x 59669,
// 3441 x 38998, 5188 x 25867 in the seed-510156581 sweep), issue-bound at 0.58 warp instructions an
// element. How fast is a lean one-pass logsumexp that streams each row once from global memory — no
// shared-memory stage, an online (max, sum) per thread over 16-byte vectors, U vectors in flight a
// thread, the row's aligned window with only its two edge vectors masked — against the copy?
// One block a row (grid = rows), T threads. Checked against an f64 CPU logsumexp on sampled rows.
// Answer (H200, 2026-12-02): 0.96-0.97 of the copy at 256-512 threads, U 2-4 (2249 x 59669 72.4 µs,
// copy 69.5; the JIT's staged function 119.9 in the sweep); 1024 threads or U 8 slower; narrow rows
// (8192 x 3000: 0.49) need several rows a block. docs/BENCHMARKS.md has the table.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 dev/lse_stream/lse_stream.cu -o build/lse_stream
//   device: build/lse_stream            (a table: shape, config, µs, fraction of the copy)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "../graph_time.h"
#include "../probe_common.cuh"

using bf16 = __nv_bfloat16;

namespace {

__device__ __forceinline__ float Lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float Hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
constexpr float kLog2e = 1.4426950408889634f;

// the online pair (m, s): s = sum exp2(z - m) over z = x * log2e seen so far
__device__ __forceinline__ void Absorb(float& m, float& s, const uint4& q, bool edge, int c0, int cols) {
  const unsigned u[4] = {q.x, q.y, q.z, q.w};
  float z[8];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    z[2 * k] = Lo(u[k]) * kLog2e;
    z[2 * k + 1] = Hi(u[k]) * kLog2e;
  }
  if (edge) {
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (c0 + j < 0 || c0 + j >= cols) z[j] = -INFINITY;
  }
  float mx = z[0];
#pragma unroll
  for (int j = 1; j < 8; ++j) mx = fmaxf(mx, z[j]);
  const float mn = fmaxf(m, mx);
  if (mn == -INFINITY) return;
  float t = s * exp2f(m - mn);
#pragma unroll
  for (int j = 0; j < 8; ++j) t += exp2f(z[j] - mn);
  m = mn;
  s = t;
}

// the warp's online pairs combined by butterflies: every lane gets the warp's (m, s)
__device__ __forceinline__ void WarpCombine(float& m, float& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    const float mn = fmaxf(m, m2);
    s = (m == -INFINITY ? 0.0f : s * exp2f(m - mn)) + (m2 == -INFINITY ? 0.0f : s2 * exp2f(m2 - mn));
    m = mn;
  }
}

template <int U>
__global__ void __launch_bounds__(1024) LseStream(const bf16* __restrict__ x, float* __restrict__ out, int cols) {
  const long long base = static_cast<long long>(blockIdx.x) * cols;
  const int sh = static_cast<int>(base & 7), nv = (sh + cols + 7) / 8;
  const uint4* src = reinterpret_cast<const uint4*>(x + base - sh);
  const int full0 = sh > 0 ? 1 : 0, full1 = max(full0, (sh + cols) / 8);
  float m = -INFINITY, s = 0.0f;
  const int T = blockDim.x;
  int v = threadIdx.x;
  for (; v + (U - 1) * T < nv; v += U * T) {
    uint4 q[U];
#pragma unroll
    for (int k = 0; k < U; ++k) q[k] = __ldcs(src + v + k * T);
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int vk = v + k * T;
      Absorb(m, s, q[k], vk < full0 || vk >= full1, vk * 8 - sh, cols);
    }
  }
  for (; v < nv; v += T) Absorb(m, s, __ldcs(src + v), v < full0 || v >= full1, v * 8 - sh, cols);
  // block combine of (m, s)
  __shared__ float rm[32], rs[32];
  WarpCombine(m, s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = T / 32;
  if (lane == 0) {
    rm[warp] = m;
    rs[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < nw ? rm[lane] : -INFINITY;
    s = lane < nw ? rs[lane] : 0.0f;
    WarpCombine(m, s);
    if (lane == 0) out[blockIdx.x] = (m + log2f(s)) / kLog2e;
  }
}

}  // namespace

int main() {
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  const int sms = p.multiProcessorCount;
  std::printf("device %s, %d SMs\n", p.name, sms);
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  const int shapes[][2] = {{2249, 59669}, {3441, 38998}, {5188, 25867}, {2048, 65536}, {8192, 3000}};
  std::printf("| shape | config | µs | of copy |\n|---|---|---:|---:|\n");
  for (auto& shp : shapes) {
    const int rows = shp[0], cols = shp[1];
    const long long n = static_cast<long long>(rows) * cols;
    std::vector<bf16> hx(n);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-8.0f, 8.0f);
    for (auto& v : hx) v = __float2bfloat16(u(rng));
    bf16 *x, *y;
    float* out;
    CK(cudaMalloc(&x, n * 2 + 32));
    CK(cudaMalloc(&y, n * 2 + 32));
    CK(cudaMalloc(&out, rows * 4));
    CK(cudaMemset(x, 0, n * 2 + 32));
    CK(cudaMemcpy(x, hx.data(), n * 2, cudaMemcpyHostToDevice));
    // the same-size copy as opfuse bench's: the input's bytes read and as many written
    const double copy = TimeCaptured(st, [&] { Copy16<<<sms * 8, 512, 0, st>>>(reinterpret_cast<const uint4*>(x), reinterpret_cast<uint4*>(y), n / 16); });
    std::printf("| %d x %d | copy (half the input each way) | %.1f | 1.00 |\n", rows, cols, copy);
    for (int threads : {256, 512, 1024})
      for (int U : {2, 4, 8}) {
        CK(cudaMemset(out, 0xff, rows * 4));  // poison
        const double us = TimeCaptured(st, [&] {
          if (U == 2) LseStream<2><<<rows, threads, 0, st>>>(x, out, cols);
          if (U == 4) LseStream<4><<<rows, threads, 0, st>>>(x, out, cols);
          if (U == 8) LseStream<8><<<rows, threads, 0, st>>>(x, out, cols);
          CK(cudaGetLastError());
        });
        std::vector<float> ho(rows);
        CK(cudaMemcpy(ho.data(), out, rows * 4, cudaMemcpyDeviceToHost));
        double worst = 0;
        for (int r = 0; r < rows; r += 97) {
          double mx = -1e30, sum = 0;
          for (int c = 0; c < cols; ++c) mx = std::max(mx, double(__bfloat162float(hx[size_t(r) * cols + c])));
          for (int c = 0; c < cols; ++c) sum += std::exp(double(__bfloat162float(hx[size_t(r) * cols + c])) - mx);
          const double ref = mx + std::log(sum);
          worst = std::max(worst, std::fabs(ho[r] - ref) / (std::fabs(ref) + 1e-3));
        }
        std::printf("| %d x %d | stream t%d U%d | %.1f | %.2f |%s\n", rows, cols, threads, U, us, copy / us, worst < 1e-4 ? "" : " MISMATCH");
      }
    cudaFree(x);
    cudaFree(y);
    cudaFree(out);
  }
  return 0;
}
