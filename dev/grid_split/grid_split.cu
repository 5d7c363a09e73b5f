// grid_split: scratch probe (dev/, not part of the build) for issue 30's few vocabulary-wide rows
// (<= 64 rows of >= 32000 columns), where the split kernels run a row over one cluster of at most 8
// blocks — so 1-2 rows keep 8-16 SMs busy — and land at 3-6x the same-size copy (layer_norm
// 2 x 162791 11.6 µs against a copy of 1.9; logsumexp 1 x 141761 4.5 against 1.3). How fast is one
// launch that spreads the rows over every SM instead: each row over B = SMs / rows blocks (one a
// SM, all co-resident: a cooperative launch), each block holding its share of the row's aligned
// 16-byte window in registers, its partial reductions exchanged through global memory behind a
// per-row barrier (an arrival counter and a generation flag), then the row normalised from the
// registers — one DRAM read, one write, one launch?
// MODE 0: layer_norm with weight and bias (bf16 in and out, f32 math; the weight and bias loaded
// element by element from L2 at the row's shifted columns). MODE 1: logsumexp (an online max and
// sum of exp per block, combined; f32 out). Both checked against an f64 CPU reference, outputs
// poisoned first.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 dev/grid_split/grid_split.cu -o build/grid_split
//   device: build/grid_split            (a table: op, shape, blocks a row, µs, the copy's µs, of copy)
// Measured (H200, docs/BENCHMARKS.md "Vocabulary-wide rows, few of them"): 0.45-0.53 of its copy at 1-3
// rows, 0.38-0.41 from 8 rows: no better than the cluster split, so not built into the library.
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

constexpr int kThreads = 256;
constexpr int kMaxVpt = 8;  // 16-byte vectors a thread holds

__device__ __forceinline__ float Lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float Hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float Elem(const uint4& q, int j) {
  const unsigned w = j < 2 ? q.x : j < 4 ? q.y : j < 6 ? q.z : q.w;
  return (j & 1) ? Hi(w) : Lo(w);
}

// The sum of v over the block (every thread gets it); `sh` 32 floats of shared memory.
__device__ __forceinline__ float BlockSum(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  __syncthreads();
  if (l == 0) sh[w] = v;
  __syncthreads();
  v = l < kThreads / 32 ? sh[l] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float BlockMax(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  __syncthreads();
  if (l == 0) sh[w] = v;
  __syncthreads();
  v = l < kThreads / 32 ? sh[l] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The B blocks of row r wait for each other: the last to arrive resets the counter and bumps the
// row's generation; the others spin on it. The caller wrote its partials and fenced before.
__device__ __forceinline__ void RowBarrier(unsigned* count, unsigned* flag, int B) {
  if (threadIdx.x == 0) {
    volatile unsigned* f = flag;
    const unsigned gen = *f;
    __threadfence();
    if (atomicAdd(count, 1u) == static_cast<unsigned>(B - 1)) {
      *count = 0;
      __threadfence();
      atomicExch(flag, gen + 1);
    } else {
      while (*f == gen) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

template <int MODE, int VPT>
__global__ void __launch_bounds__(kThreads) GridSplit(const bf16* __restrict__ x, const bf16* __restrict__ w,
                                                      const bf16* __restrict__ b, bf16* __restrict__ y, float* __restrict__ lse,
                                                      float2* __restrict__ parts, unsigned* __restrict__ count,
                                                      unsigned* __restrict__ flag, int cols, int B, float eps) {
  __shared__ float red[32];
  const int r = blockIdx.x / B, k = blockIdx.x % B;
  const long long base = static_cast<long long>(r) * cols;
  const int sh = static_cast<int>(base & 7), nv = (sh + cols + 7) / 8;
  const int per = (nv + B - 1) / B, v0 = k * per, v1 = min(nv, v0 + per);
  const uint4* src = reinterpret_cast<const uint4*>(x + base - sh);
  uint4 q[VPT];
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int v = v0 + i * kThreads + threadIdx.x;
    q[i] = make_uint4(0, 0, 0, 0);
    if (v < v1) {
      if (v * 8 - sh >= 0 && (v + 1) * 8 - sh <= cols) {
        q[i] = __ldcs(src + v);
      } else {  // an edge vector of the window: the row's own elements only
        unsigned short e[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int j = 0; j < 8; ++j) {
          const int c = v * 8 - sh + j;
          if (c >= 0 && c < cols) e[j] = reinterpret_cast<const unsigned short*>(x)[base + c];
        }
        q[i] = make_uint4(e[0] | (unsigned(e[1]) << 16), e[2] | (unsigned(e[3]) << 16), e[4] | (unsigned(e[5]) << 16),
                          e[6] | (unsigned(e[7]) << 16));
      }
    }
  }
  auto inside = [&](int v, int j) {
    const int c = v * 8 - sh + j;
    return v < v1 && c >= 0 && c < cols;
  };
  float2 part;
  if constexpr (MODE == 0) {  // sum and sum of squares
    float s = 0.0f, ss = 0.0f;
#pragma unroll
    for (int i = 0; i < VPT; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float e = Elem(q[i], j);  // zeros outside the row
        s += e;
        ss += e * e;
      }
    s = BlockSum(s, red);
    ss = BlockSum(ss, red);
    part = make_float2(s, ss);
  } else {  // the block's max, then its sum of exp(x - max)
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < VPT; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (inside(v0 + i * kThreads + threadIdx.x, j)) m = fmaxf(m, Elem(q[i], j));
    m = BlockMax(m, red);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < VPT; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (inside(v0 + i * kThreads + threadIdx.x, j)) s += __expf(Elem(q[i], j) - m);
    s = BlockSum(s, red);
    part = make_float2(m, s);
  }
  if (threadIdx.x == 0) {
    parts[blockIdx.x] = part;
    __threadfence();
  }
  RowBarrier(count + r, flag + r, B);
  // every block combines its row's B partials (L2), thread t < B reading partial t
  const float2 p = threadIdx.x < B ? __ldcg(parts + r * B + threadIdx.x) : make_float2(MODE == 0 ? 0.0f : -INFINITY, 0.0f);
  if constexpr (MODE == 0) {
    const float s = BlockSum(p.x, red), ss = BlockSum(p.y, red);
    const float mean = s / cols, rstd = rsqrtf(fmaxf(ss / cols - mean * mean, 0.0f) + eps);
    unsigned short* out = reinterpret_cast<unsigned short*>(y);
    const unsigned short* wv = reinterpret_cast<const unsigned short*>(w);
    const unsigned short* bv = reinterpret_cast<const unsigned short*>(b);
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      const int v = v0 + i * kThreads + threadIdx.x;
      if (v >= v1) continue;
      const bool full = v * 8 - sh >= 0 && (v + 1) * 8 - sh <= cols;
      unsigned short o[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int c = v * 8 - sh + j;
        const bool in = full || (c >= 0 && c < cols);
        const float wj = in ? __uint_as_float(unsigned(__ldg(wv + (in ? c : 0))) << 16) : 0.0f;
        const float bj = in ? __uint_as_float(unsigned(__ldg(bv + (in ? c : 0))) << 16) : 0.0f;
        const bf16 h = __float2bfloat16((Elem(q[i], j) - mean) * rstd * wj + bj);
        o[j] = *reinterpret_cast<const unsigned short*>(&h);
      }
      if (full) {
        *reinterpret_cast<uint4*>(out + base - sh + v * 8) =
            make_uint4(o[0] | (unsigned(o[1]) << 16), o[2] | (unsigned(o[3]) << 16), o[4] | (unsigned(o[5]) << 16),
                       o[6] | (unsigned(o[7]) << 16));
      } else {
        for (int j = 0; j < 8; ++j) {
          const int c = v * 8 - sh + j;
          if (c >= 0 && c < cols) out[base + c] = o[j];
        }
      }
    }
  } else {
    const float m = BlockMax(p.x, red);
    const float s = BlockSum(p.x == -INFINITY ? 0.0f : p.y * __expf(p.x - m), red);
    if (k == 0 && threadIdx.x == 0) lse[r] = m + logf(s);
  }
}

template <int MODE>
void* Kernel(int vpt) {
  switch (vpt) {
    case 1: return reinterpret_cast<void*>(GridSplit<MODE, 1>);
    case 2: return reinterpret_cast<void*>(GridSplit<MODE, 2>);
    case 4: return reinterpret_cast<void*>(GridSplit<MODE, 4>);
    default: return reinterpret_cast<void*>(GridSplit<MODE, 8>);
  }
}
// Resident blocks an SM of both modes' kernel at `vpt`.
int Resident(int vpt) {
  int a = 0, b = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a, Kernel<0>(vpt), kThreads, 0));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel<1>(vpt), kThreads, 0));
  return std::min(a, b);
}
template <int MODE>
void Launch(int vpt, dim3 grid, cudaStream_t st, void** args) {
  CK(cudaLaunchCooperativeKernel(Kernel<MODE>(vpt), grid, dim3(kThreads), args, 0, st));
}

}  // namespace

int main() {
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  const int sms = p.multiProcessorCount;
  std::printf("device %s, %d SMs\n", p.name, sms);
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  const int shapes[][2] = {{1, 141761}, {2, 162791}, {2, 96844}, {3, 35492}, {8, 239019}, {16, 128256}, {32, 152064}, {64, 32000}};
  std::printf("| op | shape | blocks a row | vectors a thread | µs | copy µs | of copy |\n|---|---|---:|---:|---:|---:|---:|\n");
  for (auto& shp : shapes) {
    const int rows = shp[0], cols = shp[1];
    const long long n = static_cast<long long>(rows) * cols;
    std::vector<bf16> hx(n), hw(cols), hb(cols);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    for (auto& v : hx) v = __float2bfloat16(u(rng));
    for (auto& v : hw) v = __float2bfloat16(u(rng) / 4);
    for (auto& v : hb) v = __float2bfloat16(u(rng) / 4);
    bf16 *x, *y, *w, *b, *cpy;
    float *lse;
    float2* parts;
    unsigned *count, *flag;
    CK(cudaMalloc(&x, n * 2 + 32));
    CK(cudaMalloc(&y, n * 2 + 32));
    CK(cudaMalloc(&cpy, n * 2 + 32));
    CK(cudaMalloc(&w, cols * 2 + 32));
    CK(cudaMalloc(&b, cols * 2 + 32));
    CK(cudaMalloc(&lse, rows * 4));
    CK(cudaMalloc(&parts, sizeof(float2) * sms * 4));
    CK(cudaMalloc(&count, rows * 4));
    CK(cudaMalloc(&flag, rows * 4));
    CK(cudaMemset(count, 0, rows * 4));
    CK(cudaMemset(flag, 0, rows * 4));
    CK(cudaMemset(x, 0, n * 2 + 32));
    CK(cudaMemcpy(x, hx.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, hw.data(), cols * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b, hb.data(), cols * 2, cudaMemcpyHostToDevice));
    // the same-size copies: layer_norm reads and writes the row (n x 2 bytes each way), logsumexp only
    // reads it (half of it each way)
    double copies[2];
    for (int mode = 0; mode < 2; ++mode) {
      const long long vecs = mode == 0 ? n / 8 : n / 16;
      copies[mode] = TimeCaptured(st, [&] {
        Copy16<<<sms * 4, 512, 0, st>>>(reinterpret_cast<const uint4*>(x), reinterpret_cast<uint4*>(cpy), vecs);
      });
    }
    // blocks a row: the SMs shared out, one block an SM — two or four where a row's share would
    // pass kMaxVpt vectors a thread (a cooperative launch checks they are all resident)
    const int nv = (cols + 7 + 7) / 8;
    int B = 0, vpt = 0;
    for (int bps = 1; bps <= 4 && vpt == 0; bps *= 2) {
      const int b = std::max(1, sms * bps / rows), need = (nv + b - 1) / b;
      for (int v = 1; v <= kMaxVpt && vpt == 0; v *= 2)
        if (v * kThreads >= need && Resident(v) * sms >= b * rows) B = b, vpt = v;
    }
    if (vpt == 0) {
      std::printf("| - | %d x %d | - | - | too wide for the resident blocks | | |\n", rows, cols);
      continue;
    }
    float eps = 1e-5f;
    int c = cols, bb = B;
    void* args[] = {&x, &w, &b, &y, &lse, &parts, &count, &flag, &c, &bb, &eps};
    for (int mode = 0; mode < 2; ++mode) {
      CK(cudaMemset(y, 0xff, n * 2));  // poison
      CK(cudaMemset(lse, 0xff, rows * 4));
      const double us = TimeCaptured(st, [&] {
        if (mode == 0) Launch<0>(vpt, dim3(rows * B), st, args);
        else Launch<1>(vpt, dim3(rows * B), st, args);
      });
      double worst = 0;
      if (mode == 0) {
        std::vector<bf16> hy(n);
        CK(cudaMemcpy(hy.data(), y, n * 2, cudaMemcpyDeviceToHost));
        for (int r = 0; r < rows; ++r) {
          double s = 0, ss = 0;  // every column checked: an unwritten one is NaN (poisoned)
          for (int j = 0; j < cols; ++j) {
            const double e = __bfloat162float(hx[size_t(r) * cols + j]);
            s += e;
            ss += e * e;
          }
          const double mean = s / cols, rstd = 1.0 / std::sqrt(ss / cols - mean * mean + 1e-5);
          for (int j = 0; j < cols; ++j) {
            const double ref = (__bfloat162float(hx[size_t(r) * cols + j]) - mean) * rstd * __bfloat162float(hw[j]) + __bfloat162float(hb[j]);
            const double got = __bfloat162float(hy[size_t(r) * cols + j]);
            worst = std::isfinite(got) ? std::max(worst, std::fabs(got - ref) / (std::fabs(ref) + 0.05)) : 1e30;
          }
        }
      } else {
        std::vector<float> ho(rows);
        CK(cudaMemcpy(ho.data(), lse, rows * 4, cudaMemcpyDeviceToHost));
        for (int r = 0; r < rows; ++r) {
          double mx = -1e30, sum = 0;
          for (int j = 0; j < cols; ++j) mx = std::max(mx, double(__bfloat162float(hx[size_t(r) * cols + j])));
          for (int j = 0; j < cols; ++j) sum += std::exp(double(__bfloat162float(hx[size_t(r) * cols + j])) - mx);
          const double ref = mx + std::log(sum);
          worst = std::max(worst, std::fabs(ho[r] - ref) / (std::fabs(ref) + 1e-3));
        }
      }
      const double bound = mode == 0 ? 2e-2 : 1e-4;
      std::printf("| %s | %d x %d | %d | %d | %.2f | %.2f | %.2f |%s\n", mode == 0 ? "layer_norm" : "logsumexp", rows, cols, B, vpt, us,
                  copies[mode], copies[mode] / us, worst < bound ? "" : " MISMATCH");
    }
    cudaFree(x);
    cudaFree(y);
    cudaFree(cpy);
    cudaFree(w);
    cudaFree(b);
    cudaFree(lse);
    cudaFree(parts);
    cudaFree(count);
    cudaFree(flag);
  }
  return 0;
}
