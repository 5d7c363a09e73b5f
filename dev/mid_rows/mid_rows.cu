// mid_rows: scratch probe (dev/, not part of the build) for issue 30's worst remaining sweep cases
// after the staged split: (a) mid widths at a few rows an SM (layer_norm 687 x 6653 0.48 of the copy,
// 1261 x 5303 0.52, 565 x 13824; the register path: one row a block, 224-448 threads of 63 registers,
// 2-4 blocks an SM, so 1.3-2.2 waves of rows), (b) wide rows at 1-10 waves (1338 x 18944: the register
// path at one 608-thread block an SM; 4631 x 28978: the persistent twin stage, one 1024-thread block an
// SM, 0.55). What does each structure reach at these shapes, timed as the bench times (L2 flushed,
// events, median)?
//   reg V:        one row a block in registers, V 16-byte vectors a thread (the library's register path)
//   stage K/T:    a cluster of K blocks a row (K = 1: one block), each staging its share with cp.async
//                 in shared memory, T threads (the staged split; K = 1 is a plain staged row, not
//                 persistent)
// bf16 rms_norm and layer_norm (no bias: centred variance, a second reduction), rows on the 16-byte
// grid (columns a multiple of 8), against a 16-byte copy of the same bytes timed the same way.
// Checked against an f64 CPU reference on sampled rows (y poisoned before every variant).
// Answers (H200, 2026-12-04; of the probe's copy): the one-row-a-block register kernel wins at every
// shape — rms_norm 0.94 (687 x 6656, 4 vectors, 32 registers, 9 blocks an SM), 0.98 (1261 x 5304), 0.96
// (565 x 13824, 8 vectors: one wave), 1.01 (2048 x 4096), 1.00 (1338 x 18944), 1.02 (4631 x 28976),
// 0.99 (3000 x 40000); layer_norm 0.79-0.88 (2 vectors a thread best at mid widths, 8 on wide rows);
// the staged row (K 1) 0.72-0.91, the staged split (K 2-8) 0.27-0.89 and worst at mid widths. The
// library's register kernels used 59-64 registers at 4 vectors (4 blocks an SM): its row loop and
// early weight (docs/BENCHMARKS.md, "Register rows").
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 dev/mid_rows/mid_rows.cu -o build/mid_rows
//   device: build/mid_rows            (a table: shape, op, variant, blocks an SM, waves, µs, of copy)
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../probe_common.cuh"

namespace cg = cooperative_groups;
using bf16 = __nv_bfloat16;

namespace {

__device__ __forceinline__ unsigned SmemAddr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void CpAsync16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(SmemAddr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ float Lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float Hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ unsigned Pack2(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<unsigned*>(&h);
}

// Sum over the block; `red` holds 33 floats; every thread gets the total.
__device__ float BlockSum(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  __syncthreads();  // red is reused by a second reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < nw ? red[lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

__device__ __forceinline__ float Sum8(uint4 q, float sub, bool sq) {
  const unsigned u[4] = {q.x, q.y, q.z, q.w};
  float a = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float l = Lo(u[j]) - sub, h = Hi(u[j]) - sub;
    a += sq ? l * l + h * h : l + h;
  }
  return a;
}
__device__ __forceinline__ uint4 Norm8(uint4 q, uint4 g, float sub, float inv) {
  const unsigned u[4] = {q.x, q.y, q.z, q.w}, gw[4] = {g.x, g.y, g.z, g.w};
  unsigned o[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) o[j] = Pack2((Lo(u[j]) - sub) * inv * Lo(gw[j]), (Hi(u[j]) - sub) * inv * Hi(gw[j]));
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// One row a block; thread t holds vectors t + i * blockDim.x, i < V.
template <int V, bool LN>
__global__ void __launch_bounds__(1024) RegRow(const bf16* __restrict__ x, const bf16* __restrict__ w, bf16* __restrict__ y, int cols) {
  __shared__ float red[33];
  const int nv = cols / 8;
  const long long r = blockIdx.x;
  const uint4* xr = reinterpret_cast<const uint4*>(x + r * cols);
  uint4 q[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    q[i] = v < nv ? xr[v] : make_uint4(0, 0, 0, 0);
  }
  float mean = 0.0f;
  if (LN) {
    float a = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) a += Sum8(q[i], 0.0f, false);
    mean = BlockSum(a, red) / cols;
  }
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (threadIdx.x + i * blockDim.x < nv) a += Sum8(q[i], mean, true);
  const float inv = rsqrtf(BlockSum(a, red) / cols + 1e-6f);
  const uint4* wv = reinterpret_cast<const uint4*>(w);
  uint4* yr = reinterpret_cast<uint4*>(y + r * cols);
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v < nv) yr[v] = Norm8(q[i], wv[v], mean, inv);
  }
}

extern __shared__ __align__(16) uint4 g_smem[];

// Row r = blockIdx.x / K; block k = the cluster rank stages vectors [k * per, min((k + 1) * per, nv)).
template <bool LN>
__global__ void __launch_bounds__(512) StageSplit(const bf16* __restrict__ x, const bf16* __restrict__ w, bf16* __restrict__ y,
                                                  int cols, int per) {
  __shared__ float red[33];
  __shared__ float partial[2];
  cg::cluster_group cluster = cg::this_cluster();
  const int K = static_cast<int>(cluster.num_blocks());
  const int k = static_cast<int>(cluster.block_rank());
  const long long r = blockIdx.x / K;
  const int nv = cols / 8;
  const int v0 = k * per, v1 = min(v0 + per, nv), n = max(v1 - v0, 0);
  const uint4* src = reinterpret_cast<const uint4*>(x + r * cols) + v0;
  for (int v = threadIdx.x; v < n; v += blockDim.x) CpAsync16(g_smem + v, src + v);
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  auto all_sum = [&](float sub, bool sq, int slot) {
    float acc = 0.0f;
    for (int v = threadIdx.x; v < n; v += blockDim.x) acc += Sum8(g_smem[v], sub, sq);
    const float s = BlockSum(acc, red);
    if (K == 1) return s;
    if (threadIdx.x == 0) partial[slot] = s;
    cluster.sync();
    float total = 0.0f;
    for (int q = 0; q < K; ++q) total += *cluster.map_shared_rank(&partial[slot], q);
    return total;
  };
  const float mean = LN ? all_sum(0.0f, false, 0) / cols : 0.0f;
  const float inv = rsqrtf(all_sum(mean, true, 1) / cols + 1e-6f);
  const uint4* wv = reinterpret_cast<const uint4*>(w) + v0;
  uint4* yr = reinterpret_cast<uint4*>(y + r * cols) + v0;
  for (int v = threadIdx.x; v < n; v += blockDim.x) yr[v] = Norm8(g_smem[v], wv[v], mean, inv);
  if (K > 1) cluster.sync();  // peers read `partial` from this block's shared memory
}

float Bf(bf16 v) { return __bfloat162float(v); }

// The bench's method: L2 flushed (DeepFlush over 256 MiB) before each sample, events around the
// launch, the median of 15 samples after 2 warm-ups.
template <class F>
double TimeFlushed(cudaStream_t s, const int4* flush, long long flush_n, int* sink, F&& launch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int i = 0; i < 17; ++i) {
    DeepFlush<<<264, 512, 0, s>>>(flush, flush_n, sink);
    CK(cudaEventRecord(a, s));
    launch();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 2) t.push_back(1e3 * ms);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, sms);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  for (auto k : {StageSplit<false>, StageSplit<true>}) {
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    CK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  }
  const long long flush_n = (256ll << 20) / 16;
  int4* flush;
  int* sink;
  CK(cudaMalloc(&flush, flush_n * 16));
  CK(cudaMemset(flush, 1, flush_n * 16));
  CK(cudaMalloc(&sink, 4));
  struct Shape { int rows, cols; };
  const Shape shapes[] = {{687, 6656},  {1261, 5304},  {565, 13824}, {2048, 4096},
                          {1338, 18944}, {4631, 28976}, {1712, 78376}, {3000, 40000}};
  std::mt19937 rng(20261204);
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  std::printf("| rows x cols | op | variant | regs | blocks an SM | waves | us | copy us | of copy | max err (bf16 ulps) |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  int bad = 0;
  for (const Shape& sh : shapes) {
    const long long n = static_cast<long long>(sh.rows) * sh.cols;
    std::vector<bf16> hx(n), hw(sh.cols), hy(n);
    for (auto& v : hx) v = __float2bfloat16(ud(rng) + 0.5f);  // a non-zero mean: the centred variance matters
    for (auto& v : hw) v = __float2bfloat16(ud(rng));
    bf16 *x, *w, *y;
    CK(cudaMalloc(&x, n * 2));
    CK(cudaMalloc(&w, sh.cols * 2));
    CK(cudaMalloc(&y, n * 2));
    CK(cudaMemcpy(x, hx.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, hw.data(), sh.cols * 2, cudaMemcpyHostToDevice));
    const double copy_us = TimeFlushed(s, flush, flush_n, sink, [&] {
      Copy16<<<sms * 16, 256, 0, s>>>(reinterpret_cast<const uint4*>(x), reinterpret_cast<uint4*>(y), n / 8);
    });
    std::vector<int> sample;
    for (int r = 0; r < sh.rows; r += std::max(1, sh.rows / 13)) sample.push_back(r);
    sample.push_back(sh.rows - 1);
    const int nv = sh.cols / 8;
    for (int ln = 0; ln < 2; ++ln) {
      std::vector<double> mean(sh.rows, 0.0), inv(sh.rows, 0.0);
      for (int r : sample) {
        double m = 0, ss = 0;
        if (ln) {
          for (int c = 0; c < sh.cols; ++c) m += Bf(hx[(long long)r * sh.cols + c]);
          m /= sh.cols;
        }
        for (int c = 0; c < sh.cols; ++c) {
          const double d = Bf(hx[(long long)r * sh.cols + c]) - m;
          ss += d * d;
        }
        mean[r] = m;
        inv[r] = 1.0 / std::sqrt(ss / sh.cols + 1e-6);
      }
      const char* op = ln ? "layer" : "rms";
      auto check_print = [&](const std::string& variant, int regs, int bps, double waves, double us) {
        CK(cudaMemcpy(hy.data(), y, n * 2, cudaMemcpyDeviceToHost));
        double worst = 0;
        for (int r : sample)
          for (int c = 0; c < sh.cols; c += 3) {
            const long long i = (long long)r * sh.cols + c;
            const double ref = (Bf(hx[i]) - mean[r]) * inv[r] * Bf(hw[c]);
            const double got = Bf(hy[i]);
            const double ulp = std::max(std::ldexp(1.0, std::ilogb(std::fabs(ref) > 1e-30 ? ref : 1e-30) - 7), 1e-3);
            worst = std::max(worst, std::isfinite(got) ? std::fabs(got - ref) / ulp : 1e9);
          }
        if (worst > 2.0) ++bad;
        std::printf("| %d x %d | %s | %s | %d | %d | %.2f | %.1f | %.1f | %.3f | %.2f |\n", sh.rows, sh.cols, op, variant.c_str(), regs,
                    bps, waves, us, copy_us, copy_us / us, worst);
      };
      auto reg = [&](auto v_c) {
        constexpr int V = decltype(v_c)::value;
        const int threads = (nv + V - 1) / V;
        const int t = (threads + 31) / 32 * 32;
        if (t > 1024 || (V > 1 && (nv + std::max(1, V / 2) - 1) / std::max(1, V / 2) <= 64)) return;  // a wider V only where the narrower needs > 64 threads
        auto k = ln ? RegRow<V, true> : RegRow<V, false>;
        cudaFuncAttributes fa;
        CK(cudaFuncGetAttributes(&fa, k));
        int bps = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, k, t, 0));
        CK(cudaMemset(y, 0xff, n * 2));
        const double us = TimeFlushed(s, flush, flush_n, sink, [&] { k<<<sh.rows, t, 0, s>>>(x, w, y, sh.cols); });
        check_print("reg v" + std::to_string(V) + " t" + std::to_string(t), fa.numRegs, bps,
                    double(sh.rows) / std::max(1, bps * sms), us);
      };
      reg(std::integral_constant<int, 1>{});
      reg(std::integral_constant<int, 2>{});
      reg(std::integral_constant<int, 4>{});
      reg(std::integral_constant<int, 8>{});
      auto k = ln ? StageSplit<true> : StageSplit<false>;
      cudaFuncAttributes fa;
      CK(cudaFuncGetAttributes(&fa, k));
      for (int K : {1, 2, 4, 8}) {
        const int per = (nv + K - 1) / K;
        const size_t smem = size_t(per) * 16;
        if (smem > 200 * 1024) continue;
        for (int threads : {128, 256, 512}) {
          if (threads > 128 && per < threads) continue;  // fewer vectors than threads: the smaller block only
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
          CK(cudaOccupancyMaxActiveClusters(&clusters, k, &cfg));
          if (clusters < 1) continue;
          int bps = 0;
          CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, k, threads, smem));
          CK(cudaMemset(y, 0xff, n * 2));
          const double us = TimeFlushed(s, flush, flush_n, sink, [&] {
            CK(cudaLaunchKernelEx(&cfg, k, (const bf16*)x, (const bf16*)w, y, sh.cols, per));
          });
          check_print("stage K" + std::to_string(K) + " t" + std::to_string(threads), fa.numRegs, bps,
                      double(sh.rows) * K / std::max(1, clusters * K), us);
        }
      }
    }
    CK(cudaFree(x));
    CK(cudaFree(w));
    CK(cudaFree(y));
  }
  std::printf("%s\n", bad ? "SOME OUTPUTS WRONG" : "all outputs within 2 bf16 ulps (or 1e-3) of the f64 reference");
  return bad ? 1 : 0;
}
