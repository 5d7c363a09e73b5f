// split_stage: scratch probe (dev/, not part of the build) for issue 30's worst remaining sweep cases —
// rows past 100000 columns with hundreds of rows and every SM busy (softmax 385 x 235068 0.39 of the
// copy, layer_norm 1112 x 120607 0.42-0.52, rms_norm 0.55): too wide for one block's shared memory
// (a staged row), so the row kernels take the cluster split (each block's share of the row in
// registers: one register-heavy block an SM, copy-then-compute, nothing in flight while it reduces and
// writes) or the looped path (the row re-read from L2). What does a *staged split* reach: a cluster
// of K blocks a row, each block staging its share (row / K) in shared memory with cp.async, the sum
// of squares combined through distributed shared memory, then the share normalised from shared
// memory — so several clusters' blocks are resident on an SM at once (shared memory, not registers,
// bounds them) and one block's loads are in flight while another reduces or writes?
// A bf16 rms_norm (y = x * rsqrt(mean(x^2) + eps) * w) over R rows of C columns (C a multiple of 8:
// rows on the 16-byte grid), one cluster a row, not persistent (the block scheduler keeps the SMs
// full), against a 16-byte copy of the same bytes. Variants: K = 2, 4, 8 blocks a row, 256/512/1024
// threads a block. Timed as one launch in a CUDA graph (dev/graph_time.h; tensors larger than L2),
// checked against an f64 CPU reference on sampled rows (y poisoned first).
// Answers (H200, 2026-12-03; of the probe's copy, best of the 9 configurations each): 385 x 235064
// 0.754 (K 8, 512 threads, 3 blocks an SM), 1112 x 120600 0.845 (K 8, 256, 7), 648 x 173616 0.785
// (K 8, 512, 4), 600 x 200968 0.796 (K 8, 512, 4), 1045 x 128336 0.819 (K 8, 256, 7), 2249 x 59664
// 0.862 (K 4, 256, 7) — where the sweep's fused kernels ran these widths at 0.39-0.55 of the bench's
// copy. The fastest configuration has each block's share at 15-60 KB and 3-7 blocks resident an SM
// (1024-2048 threads an SM); one block an SM (K 2-4 at the widest rows, or 1024-thread blocks) is
// 0.38-0.73. Built into the library kernels and the JIT as the staged split (target::ChooseRowStageSplit,
// kernels/staged_row.cuh; docs/BENCHMARKS.md, "The staged split").
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 dev/split_stage/split_stage.cu -o build/split_stage
//   device: build/split_stage            (a table: shape, K, threads, blocks an SM, µs, copy µs, of copy)
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "../graph_time.h"
#include "../probe_common.cuh"

namespace cg = cooperative_groups;
using bf16 = __nv_bfloat16;

namespace {

__device__ __forceinline__ unsigned SmemAddr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void CpAsync16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(SmemAddr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void StoreV4(void* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ float Lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float Hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ unsigned Pack2(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<unsigned*>(&h);
}

__device__ float BlockSum(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < nw ? red[lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

extern __shared__ __align__(16) uint4 g_smem[];

// Row r = blockIdx.x / K; block k = the cluster rank holds vectors [k * per, min((k + 1) * per, nv)).
__global__ void __launch_bounds__(1024) SplitStage(const bf16* __restrict__ x, const bf16* __restrict__ w, bf16* __restrict__ y,
                                                   int cols, int per) {
  __shared__ float red[32];
  __shared__ float partial;
  cg::cluster_group cluster = cg::this_cluster();
  const int K = static_cast<int>(cluster.num_blocks());
  const int k = static_cast<int>(cluster.block_rank());
  const long long r = blockIdx.x / K;
  const int nv = cols / 8;
  const int v0 = k * per, v1 = min(v0 + per, nv);
  const uint4* src = reinterpret_cast<const uint4*>(x + r * cols);
  for (int v = v0 + threadIdx.x; v < v1; v += blockDim.x) CpAsync16(g_smem + (v - v0), src + v);
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  float acc = 0.0f;
  for (int v = threadIdx.x; v < v1 - v0; v += blockDim.x) {
    const uint4 q = g_smem[v];
    const unsigned u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) acc += Lo(u[j]) * Lo(u[j]) + Hi(u[j]) * Hi(u[j]);
  }
  const float s = BlockSum(acc, red);
  if (threadIdx.x == 0) partial = s;
  cluster.sync();
  float total = 0.0f;
  for (int q = 0; q < K; ++q) total += *cluster.map_shared_rank(&partial, q);
  const float inv = rsqrtf(total / cols + 1e-6f);
  const uint4* wv = reinterpret_cast<const uint4*>(w);
  uint4* yr = reinterpret_cast<uint4*>(y + r * cols);
  for (int v = threadIdx.x; v < v1 - v0; v += blockDim.x) {
    const uint4 q = g_smem[v], g = wv[v0 + v];
    const unsigned u[4] = {q.x, q.y, q.z, q.w}, gw[4] = {g.x, g.y, g.z, g.w};
    unsigned o[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) o[j] = Pack2(Lo(u[j]) * inv * Lo(gw[j]), Hi(u[j]) * inv * Hi(gw[j]));
    StoreV4(yr + v0 + v, make_uint4(o[0], o[1], o[2], o[3]));
  }
  cluster.sync();  // peers read `partial` from this block's shared memory: stay until they have
}

float Bf(bf16 v) { return __bfloat162float(v); }

}  // namespace

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, sms);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  CK(cudaFuncSetAttribute(SplitStage, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  CK(cudaFuncSetAttribute(SplitStage, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  struct Shape { int rows, cols; };
  // the sweep's worst (columns rounded down to a multiple of 8) and wide rows around them
  const Shape shapes[] = {{385, 235064}, {1112, 120600}, {648, 173616}, {600, 200968}, {1045, 128336}, {2249, 59664}};
  std::mt19937 rng(20261203);
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  std::printf("| rows x cols | K | threads | blocks an SM | us | copy us | of copy | max err (bf16 ulps) |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  int bad = 0;
  for (const Shape& sh : shapes) {
    const long long n = static_cast<long long>(sh.rows) * sh.cols;
    std::vector<bf16> hx(n), hw(sh.cols), hy(n);
    for (auto& v : hx) v = __float2bfloat16(ud(rng));
    for (auto& v : hw) v = __float2bfloat16(ud(rng));
    bf16 *x, *w, *y;
    CK(cudaMalloc(&x, n * 2));
    CK(cudaMalloc(&w, sh.cols * 2));
    CK(cudaMalloc(&y, n * 2));
    CK(cudaMemcpy(x, hx.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, hw.data(), sh.cols * 2, cudaMemcpyHostToDevice));
    const long long cvec = n * 2 / 16;
    uint4 *ca, *cb;
    CK(cudaMalloc(&ca, cvec * 16));
    CK(cudaMalloc(&cb, cvec * 16));
    const double copy_us = TimeCaptured(s, [&] { Copy16<<<sms * 16, 256, 0, s>>>(ca, cb, cvec); });
    // f64 reference of sampled rows
    std::vector<int> sample;
    for (int r = 0; r < sh.rows; r += std::max(1, sh.rows / 13)) sample.push_back(r);
    sample.push_back(sh.rows - 1);
    std::vector<double> inv(sh.rows, 0.0);
    for (int r : sample) {
      double ss = 0;
      for (int c = 0; c < sh.cols; ++c) ss += double(Bf(hx[(long long)r * sh.cols + c])) * Bf(hx[(long long)r * sh.cols + c]);
      inv[r] = 1.0 / std::sqrt(ss / sh.cols + 1e-6);
    }
    const int nv = sh.cols / 8;
    for (int K : {2, 4, 8}) {
      const int per = (nv + K - 1) / K;
      const size_t smem = size_t(per) * 16;
      if (smem > 200 * 1024) continue;
      for (int threads : {256, 512, 1024}) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(static_cast<unsigned>(sh.rows) * K);
        cfg.blockDim = dim3(threads);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = s;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = K;
        at[0].val.clusterDim.y = 1;
        at[0].val.clusterDim.z = 1;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        int clusters = 0;
        CK(cudaOccupancyMaxActiveClusters(&clusters, SplitStage, &cfg));
        if (clusters < 1) continue;
        int bps = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, SplitStage, threads, smem));
        CK(cudaMemset(y, 0xff, n * 2));
        auto launch = [&] { CK(cudaLaunchKernelEx(&cfg, SplitStage, (const bf16*)x, (const bf16*)w, y, sh.cols, per)); };
        const double us = TimeCaptured(s, launch);
        CK(cudaMemcpy(hy.data(), y, n * 2, cudaMemcpyDeviceToHost));
        double worst = 0;
        for (int r : sample)
          for (int c = 0; c < sh.cols; c += 3) {
            const long long i = (long long)r * sh.cols + c;
            const double ref = Bf(hx[i]) * inv[r] * Bf(hw[c]);
            const double got = Bf(hy[i]);
            const double ulp = std::max(std::ldexp(1.0, std::ilogb(std::fabs(ref) > 1e-30 ? ref : 1e-30) - 7), 1e-6);
            worst = std::max(worst, std::isfinite(got) ? std::fabs(got - ref) / ulp : 1e9);
          }
        if (worst > 1.5) ++bad;
        std::printf("| %d x %d | %d | %d | %d | %.1f | %.1f | %.3f | %.2f |\n", sh.rows, sh.cols, K, threads, bps, us, copy_us,
                    copy_us / us, worst);
      }
    }
    CK(cudaFree(x));
    CK(cudaFree(w));
    CK(cudaFree(y));
    CK(cudaFree(ca));
    CK(cudaFree(cb));
  }
  std::printf("%s\n", bad ? "SOME OUTPUTS WRONG" : "all outputs within 1.5 bf16 ulps (or 1e-6) of the f64 reference");
  return bad ? 1 : 0;
}
