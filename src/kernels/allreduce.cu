// The one-shot all-reduce kernel (see allreduce.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <fmt/format.h>

#include "cuda/cuda_check.h"
#include "cuda/launch.h"
#include "kernels/allreduce.h"
#include "kernels/pdl.cuh"

namespace opfuse::kernels {
namespace {

constexpr int kThreads = 512;

constexpr uint64_t kMeetTimeoutNs = 60ull * 1000 * 1000 * 1000;

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t LoadAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void StoreRelease(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Block b of every rank meets here: thread p (< world) raises this rank's flag in rank p's block
// and waits until rank p's flag in ours reaches the same generation.
__device__ __forceinline__ void Meet(const OneShotArgs& a, uint32_t (OneShotSignal::*flags)[kOneShotMaxBlocks][kOneShotMaxRanks],
                                     uint32_t gen) {
  // The block's writes to the staging buffer happen before the barrier, and the barrier before each
  // flag's release store at system scope: a release is cumulative, so a peer that acquires the flag
  // sees every thread's writes (no fence per thread).
  __syncthreads();
  const int p = threadIdx.x;
  if (p < a.world) {
    StoreRelease(&(a.signal[p]->*flags)[blockIdx.x][a.rank], gen);
    const uint32_t* mine = &(a.signal[a.rank]->*flags)[blockIdx.x][p];
    // A peer that never comes (its rank failed before launching) must not hang the GPU for good.
    const uint64_t t0 = GlobalTimerNs();
    while (LoadAcquire(mine) != gen)
      if (GlobalTimerNs() - t0 > kMeetTimeoutNs) __trap();
  }
  __syncthreads();
}

template <typename T>
__device__ __forceinline__ float ToF(T x) { return static_cast<float>(x); }
template <typename T>
__device__ __forceinline__ T FromF(float x) { return static_cast<T>(x); }
template <>
__device__ __forceinline__ float ToF(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromF(float x) { return __float2bfloat16(x); }
template <>
__device__ __forceinline__ float ToF(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ __half FromF(float x) { return __float2half(x); }

// Blocks of a call: one per 16 KiB (a 512-thread block's two 16-byte vectors a thread), at most
// kOneShotMaxBlocks. Every rank makes the same choice for the same call.
__host__ __device__ inline int64_t OneShotVectors(int64_t bytes) { return (bytes + 15) / 16; }
inline int OneShotBlocks(int64_t bytes) {
  return static_cast<int>(std::min<int64_t>(kOneShotMaxBlocks, std::max<int64_t>(1, (bytes + 16383) / 16384)));
}
// A block's region in a staging buffer: the buffer is two halves (the parity of the block's call
// counter) of kOneShotMaxBlocks regions each.
__host__ __device__ inline int64_t OneShotRegionBytes(int64_t staging_bytes) {
  return staging_bytes / (2 * kOneShotMaxBlocks) / 16 * 16;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) OneShotKernel(OneShotArgs a) {
  constexpr int kVec = 16 / sizeof(T);
  // Launched with PDL: the next kernel (the GEMV that reads the sum) may be scheduled now and stream
  // its weights while the ranks meet; nothing here is touched before the previous kernel is done.
  PdlAllowNext();
  PdlWait();
  __shared__ uint32_t gen;
  if (threadIdx.x == 0) gen = ++a.signal[a.rank]->counter[blockIdx.x];
  __syncthreads();
  const uint32_t g = gen;
  // This block's share: vectors [v0, v1) of the whole vector's ceil(count / kVec).
  const int64_t nvec = (a.count + kVec - 1) / kVec;
  const int64_t per = (nvec + gridDim.x - 1) / gridDim.x;
  const int64_t v0 = per * blockIdx.x, v1 = min(nvec, v0 + per);
  // The share is staged in this block's region of the half g & 1. The region was last written two
  // calls of this block ago, and every peer's block read it before raising its flag in the call
  // between, which this block waited for: no second meet at the end.
  const int64_t region = OneShotRegionBytes(a.staging_bytes);
  const int64_t at = ((g & 1) * kOneShotMaxBlocks + blockIdx.x) * region;
  const T* in = static_cast<const T*>(a.in) + v0 * kVec;
  T* mine = reinterpret_cast<T*>(static_cast<char*>(a.staging[a.rank]) + at);
  const int64_t n_here = min(a.count, v1 * kVec) - v0 * kVec;  // elements of this share
  for (int64_t v = threadIdx.x; v < v1 - v0; v += kThreads) {
    const int64_t e = v * kVec;
    if (e + kVec <= n_here) {
      reinterpret_cast<uint4*>(mine)[v] = reinterpret_cast<const uint4*>(in)[v];
    } else {
      for (int64_t i = e; i < n_here; ++i) mine[i] = in[i];
    }
  }
  Meet(a, &OneShotSignal::start, g);
  T* out = static_cast<T*>(a.out) + v0 * kVec;
  for (int64_t v = threadIdx.x; v < v1 - v0; v += kThreads) {
    const int64_t e = v * kVec;
    const int n = n_here - e < kVec ? static_cast<int>(n_here - e) : kVec;
    float acc[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[i] = 0.0f;
    for (int r = 0; r < a.world; ++r) {  // rank order: the reference's sum
      // whole vectors even at the tail: a region holds the share rounded up to 16 bytes
      uint4 raw = __ldcv(reinterpret_cast<const uint4*>(static_cast<const char*>(a.staging[r]) + at) + v);
      const T* x = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[i] += ToF(x[i]);
    }
    if (n == kVec) {
      uint4 raw;
      T* y = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int i = 0; i < kVec; ++i) y[i] = FromF<T>(acc[i]);
      reinterpret_cast<uint4*>(out)[v] = raw;
    } else {
      for (int i = 0; i < n; ++i) out[e + i] = FromF<T>(acc[i]);
    }
  }
}

// The rows of block b: [b * per, min(rows, (b + 1) * per)), per = ceil(rows / blocks).
inline int OneShotNormBlocks(int64_t rows) {
  return static_cast<int>(std::min<int64_t>(kOneShotMaxBlocks, std::max<int64_t>(1, rows)));
}

struct OneShotNormParams {  // the fused kernel's one parameter (cuda::KernelLaunch::Make)
  OneShotArgs a;
  OneShotNormArgs n;
};

// V consecutive elements of T, moved as one access (16 bytes when V = 16 / sizeof(T)).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// A pack a peer wrote: loaded past L1 (__ldcv), as the all-reduce kernel loads the staging buffers.
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> LoadPeer(const Pack<T, V>* p) {
  Pack<T, V> r;
  if constexpr (sizeof(Pack<T, V>) == 16) {
    const uint4 raw = __ldcv(reinterpret_cast<const uint4*>(p));
    __builtin_memcpy(&r, &raw, 16);
  } else {
    static_assert(V == 1, "a pack is one element or 16 bytes");
    r.v[0] = __ldcv(reinterpret_cast<const T*>(p));
  }
  return r;
}

// One row of the fused kernel, V elements an access (cols % V == 0 and every pointer V-aligned):
// the ranks' staged values summed in rank order (the all_reduce reference's sum) and rounded to T,
// plus the residual rounded again (add_rms_norm's sum, written), the block's sum of squares, then
// y = sum * rsqrt(mean + eps) * weight over the thread's own sums.
template <typename T, int V>
__device__ void AddRmsNormRow(const OneShotArgs& a, const OneShotNormArgs& n, int64_t at, int64_t row, int64_t e0,
                              float* partial) {
  using P = Pack<T, V>;
  const int64_t base = row * n.cols;
  const P* res = reinterpret_cast<const P*>(static_cast<const T*>(n.residual) + base);
  const P* w = static_cast<const P*>(n.weight);
  P* sum = reinterpret_cast<P*>(static_cast<T*>(n.sum) + base);
  P* y = reinterpret_cast<P*>(static_cast<T*>(n.y) + base);
  const int64_t packs = n.cols / V, first = (base - e0) / V;  // the row's first pack in the block's region
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < packs; c += kThreads) {
    float acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = 0.0f;
    for (int q = 0; q < a.world; ++q) {
      const P x = LoadPeer(reinterpret_cast<const P*>(static_cast<const char*>(a.staging[q]) + at) + first + c);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] += ToF(x.v[e]);
    }
    const P rv = res[c];
    P sv;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      sv.v[e] = FromF<T>(ToF(FromF<T>(acc[e])) + ToF(rv.v[e]));
      const float x = ToF(sv.v[e]);
      ss += x * x;
    }
    sum[c] = sv;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.0f;
  for (int k = 0; k < kThreads / 32; ++k) total += partial[k];
  __syncthreads();  // `partial` is rewritten by the next row
  const float inv = rsqrtf(total * (1.0f / static_cast<float>(n.cols)) + n.eps);
  for (int64_t c = threadIdx.x; c < packs; c += kThreads) {  // the thread's own sums (written above)
    const P sv = sum[c], wv = w[c];
    P yv;
#pragma unroll
    for (int e = 0; e < V; ++e) yv.v[e] = FromF<T>(ToF(sv.v[e]) * inv * ToF(wv.v[e]));
    y[c] = yv;
  }
}

// The block's rows [r0, r1): its elements staged, the ranks met, each row reduced and normalised.
template <typename T, int V>
__device__ void AddRmsNormRows(const OneShotArgs& a, const OneShotNormArgs& n, uint32_t g, int64_t at, int64_t r0,
                               int64_t r1, float* partial) {
  using P = Pack<T, V>;
  const int64_t e0 = r0 * n.cols, np = (r1 - r0) * n.cols / V;  // this block's elements, contiguous
  const P* in = reinterpret_cast<const P*>(static_cast<const T*>(a.in) + e0);
  P* mine = reinterpret_cast<P*>(static_cast<char*>(a.staging[a.rank]) + at);
  for (int64_t i = threadIdx.x; i < np; i += kThreads) mine[i] = in[i];
  Meet(a, &OneShotSignal::start, g);  // (the region's reuse: the all-reduce kernel's argument)
  for (int64_t r = r0; r < r1; ++r) AddRmsNormRow<T, V>(a, n, at, r, e0, partial);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) OneShotAddRmsNormKernel(OneShotNormParams p) {
  const OneShotArgs& a = p.a;
  const OneShotNormArgs& n = p.n;
  PdlAllowNext();
  PdlWait();
  __shared__ uint32_t gen;
  __shared__ float partial[kThreads / 32];
  if (threadIdx.x == 0) gen = ++a.signal[a.rank]->counter[blockIdx.x];
  __syncthreads();
  const uint32_t g = gen;
  const int64_t per = (n.rows + gridDim.x - 1) / gridDim.x;
  const int64_t r0 = min(n.rows, per * blockIdx.x), r1 = min(n.rows, r0 + per);
  const int64_t region = OneShotRegionBytes(a.staging_bytes);
  const int64_t at = ((g & 1) * kOneShotMaxBlocks + blockIdx.x) * region;
  // 16-byte packs where every row and pointer allows (the decode rows of a model always do), else
  // single elements: the same arithmetic, in the same order, either way (one row routine).
  constexpr int kVec = 16 / sizeof(T);
  const T* in = static_cast<const T*>(a.in) + r0 * n.cols;
  const bool vec = n.cols % kVec == 0 &&
                   ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(n.residual) |
                     reinterpret_cast<uintptr_t>(n.weight) | reinterpret_cast<uintptr_t>(n.sum) |
                     reinterpret_cast<uintptr_t>(n.y)) &
                    15) == 0;
  if (vec) AddRmsNormRows<T, kVec>(a, n, g, at, r0, r1, partial);
  else AddRmsNormRows<T, 1>(a, n, g, at, r0, r1, partial);
}

// What both kernels need: 2..kOneShotMaxRanks ranks, a float dtype.
bool RanksAndDtypeOk(const OneShotArgs& a) {
  return a.world >= 2 && a.world <= kOneShotMaxRanks &&
         (a.dtype == DType::kF32 || a.dtype == DType::kF16 || a.dtype == DType::kBF16);
}

// kernel<T>(params) for `dt` on `blocks` blocks of kThreads, through cuda::KernelLaunch (PDL as asked).
template <class P>
Status LaunchForDtype(const char* what, DType dt, void (*f32)(P), void (*f16)(P), void (*bf16)(P), int blocks,
                      const P& params, bool pdl, cudaStream_t stream) {
  void (*kernel)(P) = dt == DType::kF32 ? f32 : dt == DType::kF16 ? f16 : dt == DType::kBF16 ? bf16 : nullptr;
  if (!kernel) return InvalidArgument(fmt::format("{}: {} is not a float dtype", what, DTypeName(dt)));
  return cuda::KernelLaunch::Make(what, kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, params)
      .Pdl(pdl)
      .Launch(stream);
}

}  // namespace

bool OneShotAddRmsNormSupported(const OneShotArgs& a, int64_t rows, int64_t cols) {
  if (!RanksAndDtypeOk(a) || rows <= 0 || cols <= 0) return false;
  const int blocks = OneShotNormBlocks(rows);
  const int64_t per = (rows + blocks - 1) / blocks;
  return per * cols * DTypeSize(a.dtype) <= OneShotRegionBytes(a.staging_bytes);
}

Status LaunchOneShotAddRmsNorm(const OneShotArgs& a, const OneShotNormArgs& n, cudaStream_t stream) {
  return LaunchForDtype("one-shot all-reduce + add_rms_norm", a.dtype, OneShotAddRmsNormKernel<float>,
                        OneShotAddRmsNormKernel<__half>, OneShotAddRmsNormKernel<__nv_bfloat16>,
                        OneShotNormBlocks(n.rows), OneShotNormParams{a, n}, a.pdl, stream);
}

bool OneShotSupported(const OneShotArgs& a) {
  if (!RanksAndDtypeOk(a)) return false;
  if (reinterpret_cast<uintptr_t>(a.in) % 16 || reinterpret_cast<uintptr_t>(a.out) % 16) return false;
  if (a.count <= 0) return false;
  const int64_t bytes = a.count * DTypeSize(a.dtype);
  const int blocks = OneShotBlocks(bytes);
  const int64_t share = (OneShotVectors(bytes) + blocks - 1) / blocks * 16;  // a block's share, rounded up
  return share <= OneShotRegionBytes(a.staging_bytes);
}

Status LaunchOneShotAllReduce(const OneShotArgs& a, cudaStream_t stream) {
  return LaunchForDtype("one-shot all-reduce", a.dtype, OneShotKernel<float>, OneShotKernel<__half>,
                        OneShotKernel<__nv_bfloat16>, OneShotBlocks(a.count * DTypeSize(a.dtype)), a, a.pdl, stream);
}

}  // namespace opfuse::kernels
