// row_split_cluster: scratch probe (dev/, not part of the build) for issue 30's vocabulary-wide few-row
// cases: what shortens the library's split rows (NormSplitRow: a row over a cluster of blocks, its
// sum of squares combined through distributed shared memory)? A bf16 rms_norm over R rows of C
// columns (x * rsqrt(mean(x^2) + eps) * w), each block holding its share of the row in registers
// (16-byte vectors), against a 16-byte copy of the same bytes. Variants: clusters of 8 (the library's
// form: cluster.sync, pull the partials, a closing cluster.sync), of 16 (non-portable), one
// 1024-thread block a row (8 vectors a thread, block barriers only), and clusters of 8 with a
// push-style exchange (RmsPush: st.async of each partial into every peer's shared memory, completing
// on the peer's mbarrier; one early cluster barrier while the loads are in flight, none at the end).
// Each timed graph runs the kernel over 128 buffer sets (more than L2 holds) one after another; µs
// per launch. Checked against an f64 CPU reference (outputs poisoned first).
// Answers (H200, 2026-11-28; µs per launch: copy / cluster 8 / cluster 16 / one block): 1 x 128256
// 1.83 / 4.41 / 4.43 / -; 2 x 96848 1.92 / 4.32 / 4.38 / -; 15 x 34056 2.45 / 4.43 / 4.38 / 9.32;
// 32 x 32000 2.98 / 5.00 / 5.14 / 9.44; 64 x 50256 5.50 / 9.26 / 11.25 / 11.60 — twice the SMs a row
// buys nothing, one block a row cannot keep enough bytes in flight, and even this minimal split
// costs 2.2-2.4x the copy. The push variant is built, NOT yet run on a GPU: run it next.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 dev/row_split_cluster/row_split_cluster.cu -o build/row_split_cluster
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "../graph_time.h"

namespace cg = cooperative_groups;
using bf16 = __nv_bfloat16;

namespace {

// Row r of x over a cluster of gridDim.x / R blocks: block k holds vectors [k * per, (k + 1) * per),
// at most kVpt 16-byte vectors a thread (4 for the clusters, 8 for one 1024-thread block a row):
// thread t's vector i is j(i) = k * per + i * blockDim.x + t where mine(i).
struct RowShare {
  int r, k, per, nv;
  __device__ int j(int i) const { return k * per + i * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x); }
  __device__ bool mine(int i) const { return i * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x) < per && j(i) < nv; }
};
template <int kVpt>
__device__ __forceinline__ void LoadShare(const bf16* x, int C, const RowShare& s, uint4 (&v)[kVpt]) {
  const uint4* xv = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(s.r) * C);
#pragma unroll
  for (int i = 0; i < kVpt; ++i)
    if (s.mine(i)) v[i] = __ldg(xv + s.j(i));
}
// The block's sum of squares, in every thread of warp 0.
template <int kVpt>
__device__ __forceinline__ float BlockSumSquares(const uint4 (&v)[kVpt], const RowShare& s, float* red) {
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < kVpt; ++i)
    if (s.mine(i)) {
      const bf16* e = reinterpret_cast<const bf16*>(&v[i]);
#pragma unroll
      for (int t = 0; t < 8; ++t) acc += __bfloat162float(e[t]) * __bfloat162float(e[t]);
    }
  for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = acc;
  __syncthreads();
  float t = 0.f;
  if (threadIdx.x < 32) {
    t = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.f;
    for (int o = 16; o; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  }
  return t;
}
// y = x * inv * w over this block's share.
template <int kVpt>
__device__ __forceinline__ void StoreShare(const uint4 (&v)[kVpt], const bf16* w, bf16* y, int C, const RowShare& s, float inv) {
  const uint4* wv = reinterpret_cast<const uint4*>(w);
  uint4* yv = reinterpret_cast<uint4*>(y + static_cast<int64_t>(s.r) * C);
#pragma unroll
  for (int i = 0; i < kVpt; ++i)
    if (s.mine(i)) {
      const uint4 wq = __ldg(wv + s.j(i));
      const bf16* e = reinterpret_cast<const bf16*>(&v[i]);
      const bf16* we = reinterpret_cast<const bf16*>(&wq);
      uint4 o;
      bf16* oe = reinterpret_cast<bf16*>(&o);
#pragma unroll
      for (int t = 0; t < 8; ++t) oe[t] = __float2bfloat16(__bfloat162float(e[t]) * inv * __bfloat162float(we[t]));
      yv[s.j(i)] = o;
    }
}

// The library's form: partials pulled through distributed shared memory after a cluster barrier, a
// closing barrier so no block exits while another still reads its share.
template <int kVpt>
__global__ void __launch_bounds__(kVpt > 4 ? 1024 : 512, 1) RmsSplit(const bf16* x, const bf16* w, bf16* y, int C, int per) {
  __shared__ float red[32];
  __shared__ float share;
  const cg::cluster_group cl = cg::this_cluster();
  const int nb = static_cast<int>(cl.num_blocks());
  const RowShare s{static_cast<int>(blockIdx.x) / nb, static_cast<int>(cl.block_rank()), per, C / 8};  // C a multiple of 8 here
  uint4 v[kVpt];
  LoadShare<kVpt>(x, C, s, v);
  const float part = BlockSumSquares<kVpt>(v, s, red);
  if (threadIdx.x == 0) share = part;
  cl.sync();
  float tot = 0.f;
  for (int b = 0; b < nb; ++b) tot += *cl.map_shared_rank(&share, b);
  StoreShare<kVpt>(v, w, y, C, s, rsqrtf(tot / C + 1e-5f));
  cl.sync();
}

// The push-style exchange: each block's partial sum is written into every peer's shared memory with
// st.async (completing on the peer's mbarrier, 4 bytes each), so a block waits only for the partials
// it receives — no pull through distributed shared memory after a cluster barrier, and no closing
// cluster barrier (nothing reads a peer's memory; a block waits on its own mbarrier for every write
// into it before it exits). One cluster barrier stays, early, while the row's loads are in flight:
// no block pushes before every peer's mbarrier is initialised.
__device__ __forceinline__ uint32_t SmemAddr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__global__ void __launch_bounds__(512, 1) RmsPush(const bf16* x, const bf16* w, bf16* y, int C, int per) {
  __shared__ float red[32];
  __shared__ float parts[16];
  __shared__ __align__(8) uint64_t bar;
  const cg::cluster_group cl = cg::this_cluster();
  const int nb = static_cast<int>(cl.num_blocks()), k = static_cast<int>(cl.block_rank());
  const RowShare s{static_cast<int>(blockIdx.x) / nb, k, per, C / 8};
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(SmemAddr(&bar)));
    asm volatile("fence.mbarrier_init.release.cluster;");
    // this thread's arrival, expecting one 4-byte partial from each block of the cluster (itself too)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddr(&bar)), "r"(4 * nb) : "memory");
  }
  uint4 v[4];
  LoadShare<4>(x, C, s, v);
  cl.sync();  // every peer's mbarrier is initialised (the loads above are in flight meanwhile)
  const float part = BlockSumSquares<4>(v, s, red);
  if (threadIdx.x < nb) {  // lane b pushes this block's partial into block b's parts[k]
    uint32_t ra, rb;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(SmemAddr(&parts[k])), "r"(threadIdx.x));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(SmemAddr(&bar)), "r"(threadIdx.x));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(ra), "r"(__float_as_uint(part)),
                 "r"(rb)
                 : "memory");
  }
  // every partial has landed in parts[] (phase 0 of this block's mbarrier)
  asm volatile(
      "{\n.reg .pred p;\nWAIT_%=:\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], 0;\n@!p bra WAIT_%=;\n}\n" ::"r"(
          SmemAddr(&bar))
      : "memory");
  float tot = 0.f;
  for (int b = 0; b < nb; ++b) tot += parts[b];
  StoreShare<4>(v, w, y, C, s, rsqrtf(tot / C + 1e-5f));
}

__global__ void Copy16(const uint4* a, uint4* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) b[i] = a[i];
}

}  // namespace

int main() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  constexpr int kSets = 128;
  struct Case {
    int R, C;
  };
  const Case cases[] = {{1, 128256}, {2, 96848}, {4, 102760}, {8, 151936}, {15, 34056}, {32, 32000}, {64, 50256}};
  int fails = 0;
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  CK(cudaFuncSetAttribute(RmsSplit<4>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  std::printf("%-14s %10s %10s %10s %10s %10s %10s\n", "rows x cols", "copy us", "cl8 us", "cl16 us", "1blk us", "push8 us", "push/cl8");
  for (const Case& c : cases) {
    const size_t n = size_t(c.R) * c.C;
    std::vector<bf16> hx(n), hw(c.C);
    for (auto& e : hx) e = __float2bfloat16(u(rng));
    for (auto& e : hw) e = __float2bfloat16(u(rng));
    bf16 *x, *y, *w;
    CK(cudaMalloc(&x, n * 2 * kSets));
    CK(cudaMalloc(&y, n * 2 * kSets));
    CK(cudaMalloc(&w, c.C * 2));
    for (int s = 0; s < kSets; ++s) CK(cudaMemcpy(x + s * n, hx.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, hw.data(), c.C * 2, cudaMemcpyHostToDevice));
    // f64 reference of set 0
    std::vector<double> ref(n);
    for (int r = 0; r < c.R; ++r) {
      double ss = 0;
      for (int j = 0; j < c.C; ++j) ss += double(__bfloat162float(hx[size_t(r) * c.C + j])) * __bfloat162float(hx[size_t(r) * c.C + j]);
      const double inv = 1.0 / std::sqrt(ss / c.C + 1e-5);
      for (int j = 0; j < c.C; ++j)
        ref[size_t(r) * c.C + j] = __bfloat162float(hx[size_t(r) * c.C + j]) * inv * __bfloat162float(hw[j]);
    }
    double us[4] = {0, 0, 0, 0};
    for (int vi = 0; vi < 4; ++vi) {
      const int nb = vi == 0 || vi == 3 ? 8 : vi == 1 ? 16 : 1;
      const int kVpt = vi == 2 ? 8 : 4;
      auto kern = vi == 3 ? RmsPush : vi == 2 ? RmsSplit<8> : RmsSplit<4>;
      const int nv = c.C / 8, per = (nv + nb - 1) / nb;
      const int threads = std::min(vi == 2 ? 1024 : 512, ((per + kVpt - 1) / kVpt + 31) / 32 * 32);
      cudaLaunchConfig_t cfg{};
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = nb;
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      cfg.gridDim = dim3(c.R * nb);
      cfg.blockDim = dim3(threads);
      cfg.stream = st;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      if (per > threads * kVpt) {
        std::printf("%dx%d: %d blocks do not hold the row\n", c.R, c.C, nb);
        continue;
      }
      CK(cudaMemset(y, 0xFF, n * 2));
      CK(cudaLaunchKernelEx(&cfg, kern, (const bf16*)x, (const bf16*)w, y, c.C, per));
      CK(cudaStreamSynchronize(st));
      std::vector<bf16> hy(n);
      CK(cudaMemcpy(hy.data(), y, n * 2, cudaMemcpyDeviceToHost));
      double err = 0;
      for (size_t i = 0; i < n; ++i) {
        const double d = std::fabs(__bfloat162float(hy[i]) - ref[i]);
        err = std::isnan(d) ? INFINITY : std::max(err, d);
      }
      if (!(err < 3e-2)) {
        ++fails;
        std::printf("FAIL %dx%d variant %d (cluster %d): max|err| %g\n", c.R, c.C, vi, nb, err);
      }
      us[vi] = TimeCaptured(st, [&] {
                 for (int s = 0; s < kSets; ++s)
                   CK(cudaLaunchKernelEx(&cfg, kern, (const bf16*)(x + s * n), (const bf16*)w, y + s * n, c.C, per));
               }) / kSets;
    }
    const double cu = TimeCaptured(st, [&] {
                        for (int s = 0; s < kSets; ++s)
                          Copy16<<<264, 512, 0, st>>>(reinterpret_cast<const uint4*>(x + s * n),
                                                      reinterpret_cast<uint4*>(y + s * n), int64_t(n) / 8);
                      }) / kSets;
    std::printf("%4d x %-7d %10.2f %10.2f %10.2f %10.2f %10.2f %10.3f\n", c.R, c.C, cu, us[0], us[1], us[2], us[3], us[3] / us[0]);
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFree(w));
  }
  std::printf("failures: %d\n", fails);
  return fails ? 1 : 0;
}
