// stage_pipeline: scratch probe (dev/, not part of the build) for issue 30's staged rows — the library
// and JIT stage kernels (kernels/fused_common.cuh StagedRows, the JIT's stage function) run wide rows
// at 0.4-0.7 of the copy although Nsight Compute shows each byte read and written once. What limits
// them: the rows in flight (double-buffered: one row ahead a block), the threads a block, or the
// passes? A bf16 rms_norm over R rows of C columns (C a multiple of 8: aligned rows), persistent
// blocks staging each row in shared memory with cp.async, NBUF buffers a block (NBUF - 1 rows ahead),
// blocks per SM from shared memory and threads; MODE 0 the rms_norm (sum of squares over shared
// memory, block reduction, y = x * inv * w), MODE 1 the staged copy alone (shared memory to y, no
// reduction), MODE 2 the read side alone (sum of squares and reduction, one float a row out). Against
// a 16-byte copy of the same bytes. One launch per timing (the tensors exceed L2), best of 5 graph
// replays (dev/graph_time.h). MODE 4 (StagedShifted): MODE 0 over odd widths, rows off the 16-byte
// grid, in the library's shifted-row layout — the lean form of kernels/norm.cu's NormStageKernel. MODE 3: MODE 0 with each row one bulk copy (cp.async.bulk) issued by
// one thread, completing on the buffer's mbarrier. MODE 0 and 3 checked against an f64 CPU reference on sampled rows (y poisoned).
// Answers (H200, 2026-12-02; of the probe's copy): MODE 0 at 512-1024 threads, two buffers 0.85-0.96
// (6648 x 20192 143.9 µs, copy 138.1; 2730 x 49152 148.1, copy 139.3); three or four buffers 0.74-0.89
// (fewer blocks an SM); bulk copies no faster (0.79-0.92); 256 threads 0.66-0.85; MODE 1 0.91-1.01;
// MODE 2 about twice the copy's speed. The library's staged rms_norm ran 1.2-1.5x this kernel's time
// at the same shapes: the per-element work of its passes, not the pipeline, is its gap. MODE 4 (H200,
// 2026-12-02): 0.77-0.85 of the copy (6647 x 20190 163.3 µs, copy 138.0; 3674 x 36523 179.1, copy
// 138.3), 0.06-0.14 below the aligned neighbours: shifted rows cost even the lean kernel.
// kernels/norm.cu's staged output pass now has this probe's form (interior vectors with no column
// test, the weight/bias presence hoisted by WithOperands, the edge vectors element by element) and a
// whole-block row_reduce (BlockRowReduce): the library's staged norms 7-21 % faster (docs/BENCHMARKS.md).
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 dev/stage_pipeline/stage_pipeline.cu -o build/stage_pipeline
//   device: build/stage_pipeline            (a table: shape, config, µs, fraction of the copy)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <type_traits>
#include <vector>

#include "../graph_time.h"
#include "../probe_common.cuh"

using bf16 = __nv_bfloat16;

namespace {

__device__ __forceinline__ unsigned SmemAddr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void CpAsync16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(SmemAddr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void Commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int K>
__device__ __forceinline__ void WaitGroup() {
  asm volatile("cp.async.wait_group %0;" ::"n"(K) : "memory");
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
  __syncthreads();
  return t;
}

extern __shared__ __align__(16) uint4 g_smem[];

template <int NBUF, int MODE>
__global__ void __launch_bounds__(1024) Staged(const bf16* __restrict__ x, const bf16* __restrict__ w, bf16* __restrict__ y,
                                               float* __restrict__ rowout, int rows, int cols) {
  __shared__ float red[32];
  const int nv = cols / 8;
  auto issue = [&](int r, int b) {
    const uint4* src = reinterpret_cast<const uint4*>(x + static_cast<long long>(r) * cols);
    uint4* dst = g_smem + static_cast<long long>(b) * nv;
    for (int v = threadIdx.x; v < nv; v += blockDim.x) CpAsync16(dst + v, src + v);
  };
#pragma unroll
  for (int k = 0; k < NBUF - 1; ++k) {
    const int r = blockIdx.x + k * gridDim.x;
    if (r < rows) issue(r, k);
    Commit();
  }
  int it = 0;
  for (int r = blockIdx.x; r < rows; r += gridDim.x, ++it) {
    const int rn = r + (NBUF - 1) * gridDim.x;
    if (rn < rows) issue(rn, (it + NBUF - 1) % NBUF);
    Commit();
    WaitGroup<NBUF - 1>();
    __syncthreads();
    const uint4* xs = g_smem + static_cast<long long>(it % NBUF) * nv;
    uint4* yr = reinterpret_cast<uint4*>(y + static_cast<long long>(r) * cols);
    if constexpr (MODE == 1) {
      for (int v = threadIdx.x; v < nv; v += blockDim.x) StoreV4(yr + v, xs[v]);
    } else {
      float acc = 0.0f;
      for (int v = threadIdx.x; v < nv; v += blockDim.x) {
        const uint4 q = xs[v];
        const unsigned u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) acc += Lo(u[k]) * Lo(u[k]) + Hi(u[k]) * Hi(u[k]);
      }
      const float inv = rsqrtf(BlockSum(acc, red) / cols + 1e-6f);
      if constexpr (MODE == 2) {
        if (threadIdx.x == 0) rowout[r] = inv;
      } else {
        const uint4* wv = reinterpret_cast<const uint4*>(w);
        for (int v = threadIdx.x; v < nv; v += blockDim.x) {
          const uint4 q = xs[v], g = wv[v];
          const unsigned u[4] = {q.x, q.y, q.z, q.w}, gw[4] = {g.x, g.y, g.z, g.w};
          unsigned o[4];
#pragma unroll
          for (int k = 0; k < 4; ++k) o[k] = Pack2(Lo(u[k]) * inv * Lo(gw[k]), Hi(u[k]) * inv * Hi(gw[k]));
          StoreV4(yr + v, make_uint4(o[0], o[1], o[2], o[3]));
        }
      }
    }
    __syncthreads();  // buffer it % NBUF is refilled next iteration but NBUF - 1
  }
}

// MODE 0's rms_norm with each row brought in by one bulk copy (cp.async.bulk, the TMA engine) that a
// single thread issues, completing on the buffer's mbarrier — no per-thread copy instructions.
__device__ __forceinline__ void BarInit(uint64_t* bar) {
  asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(SmemAddr(bar)) : "memory");
}
__device__ __forceinline__ void BulkLoad(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(SmemAddr(bar)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(SmemAddr(dst)),
               "l"(src), "r"(bytes), "r"(SmemAddr(bar))
               : "memory");
}
__device__ __forceinline__ void BarWait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred p;\n LAB_WAIT:\n"
      " mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n"
      " @!p bra LAB_WAIT;\n}\n" ::"r"(SmemAddr(bar)),
      "r"(parity)
      : "memory");
}

template <int NBUF>
__global__ void __launch_bounds__(1024) StagedBulk(const bf16* __restrict__ x, const bf16* __restrict__ w, bf16* __restrict__ y,
                                                   float* __restrict__, int rows, int cols) {
  __shared__ float red[32];
  __shared__ __align__(8) uint64_t bars[NBUF];
  const int nv = cols / 8;
  const unsigned bytes = static_cast<unsigned>(cols) * 2u;
  if (threadIdx.x == 0) {
    for (int b = 0; b < NBUF; ++b) BarInit(&bars[b]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](int r, int b) {
    BulkLoad(g_smem + static_cast<long long>(b) * nv, x + static_cast<long long>(r) * cols, bytes, &bars[b]);
  };
  if (threadIdx.x == 0)
    for (int k = 0; k < NBUF - 1; ++k) {
      const int r = blockIdx.x + k * gridDim.x;
      if (r < rows) issue(r, k);
    }
  int it = 0;
  for (int r = blockIdx.x; r < rows; r += gridDim.x, ++it) {
    const int rn = r + (NBUF - 1) * gridDim.x;
    if (threadIdx.x == 0 && rn < rows) issue(rn, (it + NBUF - 1) % NBUF);
    const int b = it % NBUF;
    BarWait(&bars[b], static_cast<unsigned>((it / NBUF) & 1));
    const uint4* xs = g_smem + static_cast<long long>(b) * nv;
    uint4* yr = reinterpret_cast<uint4*>(y + static_cast<long long>(r) * cols);
    float acc = 0.0f;
    for (int v = threadIdx.x; v < nv; v += blockDim.x) {
      const uint4 q = xs[v];
      const unsigned u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) acc += Lo(u[k]) * Lo(u[k]) + Hi(u[k]) * Hi(u[k]);
    }
    const float inv = rsqrtf(BlockSum(acc, red) / cols + 1e-6f);
    const uint4* wv = reinterpret_cast<const uint4*>(w);
    for (int v = threadIdx.x; v < nv; v += blockDim.x) {
      const uint4 q = xs[v], g = wv[v];
      const unsigned u[4] = {q.x, q.y, q.z, q.w}, gw[4] = {g.x, g.y, g.z, g.w};
      unsigned o[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) o[k] = Pack2(Lo(u[k]) * inv * Lo(gw[k]), Hi(u[k]) * inv * Hi(gw[k]));
      StoreV4(yr + v, make_uint4(o[0], o[1], o[2], o[3]));
    }
    __syncthreads();  // every thread is done with buffer b before thread 0 refills it
  }
}


// MODE 4: MODE 0 over rows off the 16-byte grid (odd widths, as the library's shifted rows): row r's
// aligned window from x + r * cols - s (s = (r * cols) % 8) staged, the last copy with a source size;
// the sum pass unchecked but on the window's two edge vectors; the output pass per compile-time shift
// S, the weight from its two aligned vectors around columns v * 8 - S .. + 7, stores aligned
// st.global.v4 inside the row and element by element at its edges. Two buffers.
__device__ __forceinline__ void CpAsync16Size(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(SmemAddr(dst)), "l"(src), "r"(bytes) : "memory");
}
template <int S>
__device__ __forceinline__ void ShiftedWeight(const unsigned* a, const unsigned* b, float (&o)[8]) {
  // element j of the window vector is weight column v * 8 - S + j: a's element 8 - S + j for j < S, else b's j - S
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int e = j < S ? 8 - S + j : j - S;
    const unsigned wd = j < S ? a[e >> 1] : b[e >> 1];
    o[j] = (e & 1) ? Hi(wd) : Lo(wd);
  }
}
template <class F>
__device__ __forceinline__ void Shift8(int s, F&& f) {
  switch (s) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    default: f(std::integral_constant<int, 0>{}); break;
  }
}
__global__ void __launch_bounds__(1024) StagedShifted(const bf16* __restrict__ x, const bf16* __restrict__ w, bf16* __restrict__ y,
                                                      int rows, int cols, int buf_vecs) {
  __shared__ float red[32];
  auto issue = [&](int r, int b) {
    const long long base = static_cast<long long>(r) * cols;
    const int sh = static_cast<int>(base % 8), nv = (sh + cols + 7) / 8;
    const uint4* src = reinterpret_cast<const uint4*>(x + base - sh);
    uint4* dst = g_smem + static_cast<long long>(b) * buf_vecs;
    int v = threadIdx.x;
    for (; v < nv - 1; v += blockDim.x) CpAsync16(dst + v, src + v);
    if (v == nv - 1) CpAsync16Size(dst + v, src + v, (sh + cols - v * 8) * 2);
  };
  if (blockIdx.x < rows) issue(blockIdx.x, 0);
  Commit();
  int it = 0;
  for (int r = blockIdx.x; r < rows; r += gridDim.x, ++it) {
    if (r + gridDim.x < rows) issue(r + gridDim.x, (it + 1) & 1);
    Commit();
    WaitGroup<1>();
    __syncthreads();
    const long long base = static_cast<long long>(r) * cols;
    const int sh = static_cast<int>(base % 8), nv = (sh + cols + 7) / 8;
    const int full0 = sh > 0 ? 1 : 0, full1 = max(full0, (sh + cols) / 8);
    const uint4* xs = g_smem + static_cast<long long>(it & 1) * buf_vecs;
    float acc = 0.0f;
    for (int v = threadIdx.x; v < nv; v += blockDim.x) {
      const uint4 q = xs[v];
      const unsigned u[4] = {q.x, q.y, q.z, q.w};
      if (v >= full0 && v < full1) {
#pragma unroll
        for (int k = 0; k < 4; ++k) acc += Lo(u[k]) * Lo(u[k]) + Hi(u[k]) * Hi(u[k]);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int c = v * 8 - sh + j;
          const float f = (j & 1) ? Hi(u[j >> 1]) : Lo(u[j >> 1]);
          if (c >= 0 && c < cols) acc += f * f;
        }
      }
    }
    const float inv = rsqrtf(BlockSum(acc, red) / cols + 1e-6f);
    bf16* yw = y + base - sh;  // the window's first element (vector v at yw + v * 8, aligned)
    Shift8(sh, [&](auto s_c) {
      constexpr int S = decltype(s_c)::value;
      const int hi = min(full1, cols / 8);  // the weight's vectors v - 1 and v inside it
      const uint4* wv = reinterpret_cast<const uint4*>(w);
      for (int v = threadIdx.x; v < nv; v += blockDim.x) {
        const uint4 q = xs[v];
        const unsigned u[4] = {q.x, q.y, q.z, q.w};
        if (v >= full0 && v < hi) {
          float wf[8];
          const uint4 b4 = wv[v];
          const unsigned bw[4] = {b4.x, b4.y, b4.z, b4.w};
          if constexpr (S == 0) {
            ShiftedWeight<0>(bw, bw, wf);
          } else {
            const uint4 a4 = wv[v - 1];
            const unsigned aw[4] = {a4.x, a4.y, a4.z, a4.w};
            ShiftedWeight<S>(aw, bw, wf);
          }
          unsigned o[4];
#pragma unroll
          for (int k = 0; k < 4; ++k) o[k] = Pack2(Lo(u[k]) * inv * wf[2 * k], Hi(u[k]) * inv * wf[2 * k + 1]);
          StoreV4(yw + v * 8, make_uint4(o[0], o[1], o[2], o[3]));
        } else {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const int c = v * 8 - S + j;
            if (c >= 0 && c < cols) {
              const float f = (j & 1) ? Hi(u[j >> 1]) : Lo(u[j >> 1]);
              yw[v * 8 + j] = __float2bfloat16(f * inv * __bfloat162float(w[c]));
            }
          }
        }
      }
    });
    __syncthreads();
  }
}

template <int NBUF, int MODE>
double Run(const bf16* x, const bf16* w, bf16* y, float* ro, int rows, int cols, int threads, int sms, int* bps_out) {
  auto k = MODE == 3 ? StagedBulk<NBUF> : Staged<NBUF, MODE>;
  const size_t smem = size_t{NBUF} * cols * 2;
  if (smem + 2048 > 227 * 1024) return -1;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  CK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  int bps = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, k, threads, smem));
  if (bps < 1) return -1;
  *bps_out = bps;
  const int grid = std::min(rows, bps * sms);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  const double us = TimeCaptured(s, [&] { k<<<grid, threads, smem, s>>>(x, w, y, ro, rows, cols); CK(cudaGetLastError()); });
  CK(cudaStreamDestroy(s));
  return us;
}

float Bf(bf16 v) { return __bfloat162float(v); }

// One shape's tensors: x (rows x cols) and w (cols) random in [-2, 2) here and on the device (16 bytes
// of slack past each: the shifted rows' window reads), y and a float a row on the device.
struct Tensors {
  int rows, cols;
  long long n;
  std::vector<bf16> hx, hw;
  bf16 *x = nullptr, *w = nullptr, *y = nullptr;
  float* ro = nullptr;
  Tensors(int r, int c, unsigned seed) : rows(r), cols(c), n(static_cast<long long>(r) * c), hx(n), hw(c) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (auto& v : hx) v = __float2bfloat16(u(rng));
    for (auto& v : hw) v = __float2bfloat16(u(rng));
    CK(cudaMalloc(&x, n * 2 + 16));
    CK(cudaMalloc(&y, n * 2 + 16));
    CK(cudaMalloc(&w, cols * 2 + 16));
    CK(cudaMalloc(&ro, rows * 4));
    CK(cudaMemcpy(x, hx.data(), n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, hw.data(), cols * 2, cudaMemcpyHostToDevice));
  }
  ~Tensors() {
    cudaFree(x);
    cudaFree(y);
    cudaFree(w);
    cudaFree(ro);
  }
  // the same-size 16-byte copy of x into y, µs
  double CopyUs(cudaStream_t s, int sms) const {
    return TimeCaptured(s, [&] { Copy16<<<sms * 8, 512, 0, s>>>(reinterpret_cast<const uint4*>(x), reinterpret_cast<uint4*>(y), n / 8); });
  }
  // y against the f64 rms_norm of every `step`-th row: the worst |y - ref| / (|ref| + 0.01)
  double WorstRmsError(int step) const {
    std::vector<bf16> hy(n);
    CK(cudaMemcpy(hy.data(), y, n * 2, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int r = 0; r < rows; r += step) {
      double ss = 0;
      for (int c = 0; c < cols; ++c) ss += double(Bf(hx[size_t(r) * cols + c])) * Bf(hx[size_t(r) * cols + c]);
      const double inv = 1.0 / std::sqrt(ss / cols + 1e-6);
      for (int c = 0; c < cols; ++c) {
        const double ref = Bf(hx[size_t(r) * cols + c]) * inv * Bf(hw[c]);
        worst = std::max(worst, std::fabs(Bf(hy[size_t(r) * cols + c]) - ref) / (std::fabs(ref) + 1e-2));
      }
    }
    return worst;
  }
};

}  // namespace

int main() {
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, dev));
  const int sms = p.multiProcessorCount;
  std::printf("device %s, %d SMs\n", p.name, sms);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  const int shapes[][2] = {{6648, 20192}, {3674, 36528}, {5000, 16504}, {2730, 49152}};
  std::printf("| shape | config | regs-limited blocks/SM | µs | of copy |\n|---|---|---:|---:|---:|\n");
  for (auto& sh : shapes) {
    const Tensors t(sh[0], sh[1], 7);
    const int rows = t.rows, cols = t.cols;
    const double copy = t.CopyUs(s, sms);
    std::printf("| %d x %d | copy | - | %.1f | 1.00 |\n", rows, cols, copy);
    for (int mode : {0, 3, 1, 2})
      for (int nbuf : {2, 3, 4})
        for (int threads : {256, 512, 1024}) {
          int bps = 0;
          double us = -1;
          CK(cudaMemset(t.y, 0xff, t.n * 2));  // poison
#define RUN(NB, M) if (nbuf == NB && mode == M) us = Run<NB, M>(t.x, t.w, t.y, t.ro, rows, cols, threads, sms, &bps);
          RUN(2, 0) RUN(3, 0) RUN(4, 0) RUN(2, 1) RUN(3, 1) RUN(4, 1) RUN(2, 2) RUN(3, 2) RUN(4, 2) RUN(2, 3) RUN(3, 3) RUN(4, 3)
#undef RUN
          if (us < 0) continue;
          const char* what = mode == 0 ? "rms_norm" : mode == 1 ? "staged copy" : mode == 2 ? "read+reduce" : "rms_norm bulk";
          std::printf("| %d x %d | %s nbuf %d t%d | %d | %.1f | %.2f |\n", rows, cols, what, nbuf, threads, bps, us, copy / us);
          if ((mode == 0 || mode == 3) && threads == 512) {  // check sampled rows against the CPU
            const double worst = t.WorstRmsError(997);
            if (!(worst < 2e-2)) {
              std::printf("MISMATCH %d x %d nbuf %d: worst rel err %g\n", rows, cols, nbuf, worst);
              return 1;
            }
          }
        }
  }
  // MODE 4: odd widths (shifted rows), two buffers
  const int odd[][2] = {{6647, 20190}, {3674, 36523}, {5000, 16500}, {2730, 49151}, {7708, 17412}};
  for (auto& sh : odd) {
    const Tensors t(sh[0], sh[1], 9);
    const int rows = t.rows, cols = t.cols;
    const double copy = t.CopyUs(s, sms);
    std::printf("| %d x %d | copy | - | %.1f | 1.00 |\n", rows, cols, copy);
    const int buf_vecs = (cols + 7 + 7) / 8;
    const size_t smem = size_t{2} * buf_vecs * 16;
    CK(cudaFuncSetAttribute(StagedShifted, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    CK(cudaFuncSetAttribute(StagedShifted, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
    for (int threads : {512, 1024}) {
      int bps = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, StagedShifted, threads, smem));
      if (bps < 1) continue;
      const int grid = std::min(rows, bps * sms);
      CK(cudaMemset(t.y, 0xff, t.n * 2));  // poison
      const double us = TimeCaptured(s, [&] {
        StagedShifted<<<grid, threads, smem, s>>>(t.x, t.w, t.y, rows, cols, buf_vecs);
        CK(cudaGetLastError());
      });
      std::printf("| %d x %d | shifted rms_norm nbuf 2 t%d | %d | %.1f | %.2f |\n", rows, cols, threads, bps, us, copy / us);
      const double worst = t.WorstRmsError(331);
      if (!(worst < 2e-2)) {
        std::printf("MISMATCH shifted %d x %d: worst rel err %g\n", rows, cols, worst);
        return 1;
      }
    }
  }
  CK(cudaStreamDestroy(s));
  return 0;
}
