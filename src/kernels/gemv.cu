// GEMV library kernel (gemv.h): C[m, n] = A[m, k] · W[n, k]ᵀ (+ bias) for m ≤ kGemvMaxRows (2), bf16/f16 with f32
// accumulation, several weights per launch, optional SwiGLU epilogue.
//
// Design note (the decode matmul is a weight stream):
//  * One warp per output column (a row of W): its 32 lanes walk the row in 16-byte packs (8
//    elements), lane i taking packs i, i+32, ...; U packs per lane are loaded before the first is
//    used (8 for a plain column, 4 + 4 for a gate/up pair), so a warp keeps 4-8 KiB in flight and a
//    128-thread block 16-32 KiB — enough to cover DRAM latency at full bandwidth with a few blocks
//    per SM. Weights are read once, with ld.global.nc.L1::no_allocate (streamed past L1); the
//    activations (m·k·2 bytes, a few KiB) are re-read by every warp through the read-only cache
//    (__ldg), where they stay.
//  * Each lane accumulates m partial sums in f32 (m ≤ 4 registers, the compile-time bound MR
//    ∈ {1, 2, 4} with the real m checked at run time); an xor-butterfly then gives every lane
//    the full dot product and lane r writes row r. The sum order differs from cuBLASLt's, which is
//    within the bf16 bound every test uses (rounding happens once, at the store).
//  * Segments: the grid covers the concatenated columns of up to 4 weights (q, k and v projections
//    of one input: one launch, one wave); a warp finds its segment by at most 3 compares.
//  * SwiGLU: a warp dots gate row j and up row j against the same activation packs and writes
//    silu(g) * u (f32 in between, as the fused group's CPU reference keeps it), so neither gate nor
//    up is ever stored. silu is glu.cu's: x / (1 + 2^(-x log2 e)) with a fast divide.
//  * 128-thread blocks: 2048 columns make 512 blocks, spread evenly over 132 SMs (4 per SM).
//  * Launched with PDL (pdl.cuh): the first chunk of weight loads is issued before the wait for the
//    previous kernel (weights are never written by the graph), so the stream starts during the
//    previous kernel's tail; later chunks are loaded one chunk ahead of their use.
// Measured numbers: docs/BENCHMARKS.md ("GEMV").
#include <algorithm>

#include <fmt/format.h>

#include "kernels/fused_common.cuh"
#include "kernels/gemv.h"
#include "kernels/pdl.cuh"

namespace opfuse::kernels {
namespace {

using fused::FromF;
using fused::ToF;

template <class T>
struct GemvParams {
  const T* a;
  int m;
  int kv;    // k / 8: 16-byte packs per row
  int nseg;
  int cols;  // columns (warps) in all
  int start[kGemvMaxSegments + 1];
  const T* w[kGemvMaxSegments];
  const T* bias[kGemvMaxSegments];
  T* out[kGemvMaxSegments];
  int ldo[kGemvMaxSegments];
};

// A weight pack, streamed past L1 (read once).
__device__ __forceinline__ uint4 LoadStream(const uint4* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

template <class T>
__device__ __forceinline__ float2 Unpack2(uint32_t v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
  } else {
    __half2 h;
    memcpy(&h, &v, 4);
    return __half22float2(h);
  }
}

template <class T>
__device__ __forceinline__ float Dot8(const uint4& w, const uint4& a, float acc) {
  const uint32_t ww[4] = {w.x, w.y, w.z, w.w}, aa[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 x = Unpack2<T>(ww[j]), y = Unpack2<T>(aa[j]);
    acc = fmaf(x.x, y.x, acc);
    acc = fmaf(x.y, y.y, acc);
  }
  return acc;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float Silu(float x) { return __fdividef(x, 1.0f + fused::Exp2(-fused::kLog2e * x)); }

template <class T, int MR, bool SWIGLU, int U>
__global__ void __launch_bounds__(128) GemvKernel(GemvParams<T> p) {
  const int warp = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31);
  if (warp >= p.cols) return;
  int s = 0;
  if constexpr (!SWIGLU)
    while (s + 1 < p.nseg && warp >= p.start[s + 1]) ++s;
  const int col = warp - p.start[s];
  const int kv = p.kv;
  const uint4* w0 = reinterpret_cast<const uint4*>(p.w[s]) + static_cast<size_t>(col) * kv;
  const uint4* w1 = SWIGLU ? reinterpret_cast<const uint4*>(p.w[1]) + static_cast<size_t>(col) * kv : nullptr;
  const uint4* a = reinterpret_cast<const uint4*>(p.a);

  float acc0[MR], acc1[MR];
#pragma unroll
  for (int r = 0; r < MR; ++r) acc0[r] = acc1[r] = 0.0f;

  // Loads of the packs i0, i0 + 32, ... (U of them) of the warp's weight row(s).
  auto load = [&](int i0, uint4 (&wa)[U], uint4 (&wb)[U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + 32 * u;
      if (i < kv) {
        wa[u] = LoadStream(w0 + i);
        if constexpr (SWIGLU) wb[u] = LoadStream(w1 + i);
      }
    }
  };
  // The first weight loads depend on no earlier kernel: issued before the PDL wait, they overlap
  // the previous kernel's tail (pdl.cuh). Each later chunk is loaded before the current one is used.
  uint4 wa[U], wb[U];
  PdlAllowNext();
  load(lane, wa, wb);
  PdlWait();
  for (int i0 = lane; i0 < kv; i0 += 32 * U) {
    uint4 na[U], nb[U];
    const bool more = i0 + 32 * U < kv;
    if (more) load(i0 + 32 * U, na, nb);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + 32 * u;
      if (i < kv) {
#pragma unroll
        for (int r = 0; r < MR; ++r) {
          if (r < p.m) {
            const uint4 av = __ldg(a + static_cast<size_t>(r) * kv + i);
            acc0[r] = Dot8<T>(wa[u], av, acc0[r]);
            if constexpr (SWIGLU) acc1[r] = Dot8<T>(wb[u], av, acc1[r]);
          }
        }
      }
    }
    if (more) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        wa[u] = na[u];
        if constexpr (SWIGLU) wb[u] = nb[u];
      }
    }
  }

  const float b0 = p.bias[s] ? ToF(p.bias[s][col]) : 0.0f;
  const float b1 = SWIGLU && p.bias[1] ? ToF(p.bias[1][col]) : 0.0f;
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    if (r >= p.m) break;
    const float g = WarpSum(acc0[r]) + b0;
    float o = g;
    if constexpr (SWIGLU) o = Silu(g) * (WarpSum(acc1[r]) + b1);
    if (lane == r) p.out[s][static_cast<size_t>(r) * p.ldo[s] + col] = FromF<T>(o);
  }
}

template <class T, int MR>
StatusOr<cuda::KernelLaunch> Launch(const GemvArgs& args, const GemvParams<T>& p, const char* dt) {
  const int threads = 128, warps_per_block = threads / 32;
  const dim3 grid(static_cast<unsigned>((p.cols + warps_per_block - 1) / warps_per_block));
  const std::string name =
      fmt::format("gemv:{}{}_m{}_n{}_k{}", args.epilogue == GemvEpilogue::kSwiglu ? "swiglu_" : "", dt, args.m, p.cols,
                  args.k);
  if (args.epilogue == GemvEpilogue::kSwiglu)
    return cuda::KernelLaunch::Make(name, &GemvKernel<T, MR, true, 4>, grid, dim3(threads), 0, p).Pdl();
  return cuda::KernelLaunch::Make(name, &GemvKernel<T, MR, false, 8>, grid, dim3(threads), 0, p).Pdl();
}

template <class T>
StatusOr<cuda::KernelLaunch> PlanTyped(const GemvArgs& args, const char* dt) {
  GemvParams<T> p{};
  p.a = static_cast<const T*>(args.a);
  p.m = static_cast<int>(args.m);
  p.kv = static_cast<int>(args.k / 8);
  const bool swiglu = args.epilogue == GemvEpilogue::kSwiglu;
  p.nseg = static_cast<int>(args.segments.size());
  int cols = 0;
  for (int s = 0; s < p.nseg; ++s) {
    const GemvSegment& seg = args.segments[static_cast<size_t>(s)];
    p.start[s] = cols;
    p.w[s] = static_cast<const T*>(seg.w);
    p.bias[s] = static_cast<const T*>(seg.bias);
    p.out[s] = static_cast<T*>(swiglu ? args.segments[0].out : seg.out);
    p.ldo[s] = static_cast<int>(seg.n);
    if (!swiglu || s == 0) cols += static_cast<int>(seg.n);
  }
  p.start[p.nseg] = cols;
  p.cols = cols;
  if (args.m <= 1) return Launch<T, 1>(args, p, dt);
  if (args.m <= 2) return Launch<T, 2>(args, p, dt);
  static_assert(kGemvMaxRows <= 4, "GemvKernel instances cover MR 1, 2, 4");
  return Launch<T, 4>(args, p, dt);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

Status GemvSupported(const GemvArgs& a) {
  if (a.dtype != DType::kBF16 && a.dtype != DType::kF16)
    return Unimplemented(fmt::format("gemv: dtype {} (bf16 and f16 only; f32 goes to cuBLASLt)", DTypeName(a.dtype)));
  if (a.m < 1 || a.m > kGemvMaxRows)
    return Unimplemented(fmt::format("gemv: {} rows (the GEMV covers 1..{}; more rows use tensor cores)", a.m, kGemvMaxRows));
  if (a.k < 8 || a.k % 8 != 0) return Unimplemented(fmt::format("gemv: k = {} is not a positive multiple of 8", a.k));
  if (a.k / 8 > (int64_t{1} << 30)) return Unimplemented(fmt::format("gemv: k = {} too large", a.k));
  if (a.segments.empty() || a.segments.size() > static_cast<size_t>(kGemvMaxSegments))
    return Unimplemented(fmt::format("gemv: {} weights in one launch (1..{})", a.segments.size(), kGemvMaxSegments));
  if (a.epilogue == GemvEpilogue::kSwiglu &&
      (a.segments.size() != 2 || a.segments[0].n != a.segments[1].n))
    return Unimplemented("gemv: the swiglu epilogue takes two weights (gate, up) of the same n");
  if (!Aligned16(a.a)) return Unimplemented("gemv: activations not 16-byte aligned");
  int64_t cols = 0;
  for (const auto& s : a.segments) {
    if (s.n < 1) return Unimplemented(fmt::format("gemv: a weight with n = {}", s.n));
    if (!Aligned16(s.w)) return Unimplemented("gemv: a weight not 16-byte aligned");
    cols += s.n;
  }
  if (cols > (int64_t{1} << 26)) return Unimplemented(fmt::format("gemv: {} output columns", cols));
  return Status::Ok();
}

StatusOr<cuda::KernelLaunch> PlanGemv(const GemvArgs& args, const cuda::DeviceInfo& dev) {
  (void)dev;
  OPFUSE_RETURN_IF_ERROR(GemvSupported(args));
  if (args.dtype == DType::kBF16) return PlanTyped<__nv_bfloat16>(args, "bf16");
  return PlanTyped<__half>(args, "f16");
}

}  // namespace opfuse::kernels
