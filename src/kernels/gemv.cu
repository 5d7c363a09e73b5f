// GEMV library kernel (gemv.h), its CUDA-core form: C[m, n] = A[m, k] · W[n, k]ᵀ (+ bias) for
// m ≤ kGemvCudaCoreMaxRows (4), bf16/f16 with f32 accumulation, several weights per launch, optional
// SwiGLU / RoPE epilogue and norm prologue. More rows (up to kGemvMaxRows) run the same launch
// arguments on tensor cores (gemv_mma.cu); GemvUsesTensorCores (gemv_args.h) picks the form.
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
//  * 128-thread blocks, persistent: a logical block is 4 columns (4 / KS with the k split); the grid
//    is at most SMs x the kernel's occupancy (4-5 blocks per SM at ~100 registers), and block b walks
//    logical blocks b, b + grid, ... A warp issues the next column's first loads while it uses the
//    current column's last chunk, so its weight stream has no gap between columns; the norm prologue
//    runs once per block, not once per 4 columns. Against one block per logical block (2048-column
//    down projection: 3 waves of 660 blocks) this made the decode step faster at 128 keys
//    (docs/BENCHMARKS.md, Llama engine). GemvTuning::blocks_per_sm = 0 restores one block per logical
//    block; N caps the blocks per SM (2 and 3 measured slower).
//  * Launched with PDL (pdl.cuh): the first chunk of weight loads is issued before the wait for the
//    previous kernel (weights are never written by the graph), so the stream starts during the
//    previous kernel's tail; later chunks are loaded one chunk ahead of their use.
//  * Norm prologue (NORM): the block computes rms_norm / add_rms_norm of its input rows itself —
//    s = x (+ res, rounded to T) times the norm weight staged as f32 in shared memory, the dot
//    products scaled by rsqrt(mean(s^2) + eps) at the end; block 0 writes add_rms_norm's sum.
//  * RoPE epilogue (ROPE): in a rope segment a warp dots rows c and c + D/2 of one head (the SwiGLU
//    pair machinery) and writes the rotated pair from row r of the cos/sin tables.
//  * Long k (KS = 4 for k > 2048): 4 warps share a column, each a quarter of k, merged in shared
//    memory — the MLP down projection's 11 KiB rows otherwise take 3 dependent load rounds per warp.
// Measured numbers: docs/BENCHMARKS.md (Llama engine).
#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "kernels/fused_common.cuh"
#include "kernels/gemv.h"
#include "kernels/gemv_device.cuh"
#include "kernels/pdl.cuh"
#include "cuda/cuda_check.h"

namespace opfuse::kernels {
namespace {

using namespace gemv_detail;

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

__device__ __forceinline__ float WarpSum(float v) { return fz::warp_reduce<fz::SumOp>(v, 32); }

// 8 weights against 8 f32 activations (the norm prologue's staged row).
template <class T>
__device__ __forceinline__ float Dot8F(const uint4& w, const float4& a0, const float4& a1, float acc) {
  const float2 w0 = Unpack2<T>(w.x), w1 = Unpack2<T>(w.y), w2 = Unpack2<T>(w.z), w3 = Unpack2<T>(w.w);
  acc = fmaf(w0.x, a0.x, acc);
  acc = fmaf(w0.y, a0.y, acc);
  acc = fmaf(w1.x, a0.z, acc);
  acc = fmaf(w1.y, a0.w, acc);
  acc = fmaf(w2.x, a1.x, acc);
  acc = fmaf(w2.y, a1.y, acc);
  acc = fmaf(w3.x, a1.z, acc);
  acc = fmaf(w3.y, a1.w, acc);
  return acc;
}

// The norm prologue: rows 0..m-1 of s = x (+ res, rounded to T) times the norm weight, as f32 into
// sa[r * k + e]; returns rstd of row r in rstd[r] (every thread). Block 0 writes s to sum_out.
template <class T, int MR>
__device__ __forceinline__ void NormPrologue(const GemvParams<T>& p, float* sa, float (&rstd)[MR]) {
  __shared__ float red[MR][4];
  const int kv = p.kv, tid = static_cast<int>(threadIdx.x);
  const uint4* x4 = reinterpret_cast<const uint4*>(p.a);
  const uint4* r4 = reinterpret_cast<const uint4*>(p.res);
  const uint4* w4 = reinterpret_cast<const uint4*>(p.nw);
  uint4* s4 = reinterpret_cast<uint4*>(p.sum_out);
  float ss[MR];
#pragma unroll
  for (int r = 0; r < MR; ++r) ss[r] = 0.0f;
  for (int i = tid; i < kv; i += 128) {
    float wf[8];
    if (w4) {
      Unpack8<T>(__ldg(w4 + i), wf);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) wf[e] = 1.0f;
    }
#pragma unroll
    for (int r = 0; r < MR; ++r) {
      if (r >= p.m) break;
      uint4 xv = x4[static_cast<size_t>(r) * kv + i];
      if (r4) {  // s = x + res, rounded to T: the normalised value is the stored sum (norm.cu's rule)
        xv = AddPacks<T>(xv, r4[static_cast<size_t>(r) * kv + i]);
        if (blockIdx.x == 0) s4[static_cast<size_t>(r) * kv + i] = xv;
      }
      float f[8];
      Unpack8<T>(xv, f);
      float4* dst = reinterpret_cast<float4*>(sa + static_cast<size_t>(r) * kv * 8 + static_cast<size_t>(i) * 8);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss[r] = fmaf(f[e], f[e], ss[r]);
      dst[0] = make_float4(f[0] * wf[0], f[1] * wf[1], f[2] * wf[2], f[3] * wf[3]);
      dst[1] = make_float4(f[4] * wf[4], f[5] * wf[5], f[6] * wf[6], f[7] * wf[7]);
    }
  }
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    const float v = WarpSum(ss[r]);
    if ((tid & 31) == 0) red[r][tid >> 5] = v;
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < MR; ++r)
    rstd[r] = rsqrtf((red[r][0] + red[r][1] + red[r][2] + red[r][3]) / static_cast<float>(kv * 8) + p.eps);
}

template <class T, int MR, bool SWIGLU, int U, bool NORM, bool ROPE, int KS>
__global__ void __launch_bounds__(128) GemvKernel(GemvParams<T> p) {
  static_assert(!(SWIGLU && ROPE), "one dual-row epilogue per kernel");
  static_assert(KS == 1 || (!SWIGLU && !ROPE && !NORM), "the K split is for plain columns");
  // KS warps share a column (each a 1/KS slice of k; long-k weights such as the MLP down
  // projection): a logical block holds 4 / KS columns and merges the slices through shared memory.
  // The grid may be smaller than the logical blocks (persistent: block b takes b, b + gridDim.x, ...);
  // every warp of a block runs the same iterations, so the barriers below are block-uniform.
  constexpr int kCpb = 4 / KS;  // columns (pairs) per logical block
  const int wib = static_cast<int>(threadIdx.x >> 5);
  const int part = wib % KS;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int nlb = (p.cols + kCpb - 1) / kCpb;
  const int kv = p.kv;
  const int kvp = (kv + KS - 1) / KS;
  const int kbeg = part * kvp, kend = min(kv, kbeg + kvp);  // this warp's packs [kbeg, kend)
  const uint4* a = reinterpret_cast<const uint4*>(p.a);
  int lb = static_cast<int>(blockIdx.x);
  GemvCol c = LocateCol<T, SWIGLU, ROPE>(p, lb * kCpb + wib / KS);

  // Loads of the packs i0, i0 + 32, ... (U of them) of a column's weight row(s).
  auto load = [&](const GemvCol& cc, int i0, uint4 (&wa)[U], uint4 (&wb)[U]) {
    const bool dual = cc.w1 != nullptr;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + 32 * u;
      if (cc.active && i < kend) {
        wa[u] = LoadStream(cc.w0 + i);
        if (dual) wb[u] = LoadStream(cc.w1 + i);
      }
    }
  };
  // The first weight loads depend on no earlier kernel: issued before the PDL wait, they overlap
  // the previous kernel's tail (pdl.cuh). Each later chunk — the next column's first one after a
  // column's last — is loaded before the current one is used.
  uint4 wa[U], wb[U];
  PdlAllowNext();
  load(c, kbeg + lane, wa, wb);
  PdlWait();
  extern __shared__ float4 smem_a4[];
  float rstd[MR];
  if constexpr (NORM) NormPrologue<T, MR>(p, reinterpret_cast<float*>(smem_a4), rstd);
  __shared__ float red[2][4][MR];  // KS > 1: the k slices' sums, double-buffered over iterations
  for (int it = 0; lb < nlb; lb += static_cast<int>(gridDim.x), ++it) {
    const int nxt = lb + static_cast<int>(gridDim.x);
    const GemvCol cn = nxt < nlb ? LocateCol<T, SWIGLU, ROPE>(p, nxt * kCpb + wib / KS) : GemvCol{};
    const bool dual = c.w1 != nullptr;
    float acc0[MR], acc1[MR];
#pragma unroll
    for (int r = 0; r < MR; ++r) acc0[r] = acc1[r] = 0.0f;
    for (int i0 = kbeg + lane; i0 < kend; i0 += 32 * U) {
      uint4 na[U], nb[U];
      const bool more = i0 + 32 * U < kend;
      if (more) load(c, i0 + 32 * U, na, nb);
      else load(cn, kbeg + lane, na, nb);
      if (c.active) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int i = i0 + 32 * u;
          if (i < kend) {
#pragma unroll
            for (int r = 0; r < MR; ++r) {
              if (r < p.m) {
                if constexpr (NORM) {
                  const float4* sa = smem_a4 + (static_cast<size_t>(r) * kv + i) * 2;
                  const float4 a0 = sa[0], a1 = sa[1];
                  acc0[r] = Dot8F<T>(wa[u], a0, a1, acc0[r]);
                  if (dual) acc1[r] = Dot8F<T>(wb[u], a0, a1, acc1[r]);
                } else {
                  const uint4 av = __ldg(a + static_cast<size_t>(r) * kv + i);
                  acc0[r] = Dot8<T>(wa[u], av, acc0[r]);
                  if (dual) acc1[r] = Dot8<T>(wb[u], av, acc1[r]);
                }
              }
            }
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        wa[u] = na[u];
        if (SWIGLU || ROPE) wb[u] = nb[u];
      }
    }

    // Full dot products: the warp's lanes, then (KS > 1) the column's k slices.
    float d0[MR], d1[MR];
#pragma unroll
    for (int r = 0; r < MR; ++r) {
      d0[r] = WarpSum(acc0[r]);
      d1[r] = dual ? WarpSum(acc1[r]) : 0.0f;
    }
    bool writer = c.active;
    if constexpr (KS > 1) {
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < MR; ++r) red[it & 1][wib][r] = d0[r];
      }
      __syncthreads();
      writer = writer && part == 0;
      if (writer) {
#pragma unroll
        for (int r = 0; r < MR; ++r) {
          float t = 0.0f;
#pragma unroll
          for (int j = 0; j < KS; ++j) t += red[it & 1][wib + j][r];
          d0[r] = t;
        }
      }
    }
    if (writer) {
#pragma unroll
      for (int r = 0; r < MR; ++r) {
        if (r >= p.m) break;
        if (lane == r) StoreCol<T, SWIGLU, ROPE>(p, c, r, d0[r], d1[r], NORM ? rstd[r] : 1.0f);
      }
    }
    c = cn;
  }
}

// Warps per column of a plain GEMV: long k (> 2048, e.g. the MLP down projection) is split over
// kGemvLongKSplit warps; GemvTuning::ksplit (1, 2, 4) overrides it for long k (tests reach each split).
int KSplitFor(int64_t k, int ksplit) {
  if (k <= 2048) return 1;
  return ksplit == 1 || ksplit == 2 || ksplit == 4 ? ksplit : kGemvLongKSplit;
}

template <class T, int MR>
StatusOr<cuda::KernelLaunch> Launch(const GemvArgs& args, const GemvParams<T>& p, const char* dt,
                                    const cuda::DeviceInfo& dev) {
  const int threads = 128, warps_per_block = threads / 32;
  const bool norm = args.norm.kind != GemvNormKind::kNone;
  bool rope = false;
  for (const auto& seg : args.segments) rope |= seg.rope_half > 0;
  const std::string name = fmt::format("gemv:{}{}{}{}_m{}_n{}_k{}", NormTag(args.norm.kind),
                                       args.epilogue == GemvEpilogue::kSwiglu ? "swiglu_" : "", rope ? "rope_" : "", dt,
                                       args.m, p.cols, args.k);
  const size_t smem = norm ? NormSmemBytes(args.m, args.k) : 0;
  const bool swiglu = args.epilogue == GemvEpilogue::kSwiglu;
  // Blocks per SM of the persistent grid: GemvTuning::blocks_per_sm = N caps it at N (0: one block per
  // logical block, the grid before persistence); by default the kernel's occupancy. GemvTuning::grid
  // = N caps the whole grid at N blocks (tests: many logical blocks per block on small shapes).
  const int setting = args.tuning.blocks_per_sm, grid_cap = args.tuning.grid;
  auto make = [&](auto kernel, int ks = 1) -> StatusOr<cuda::KernelLaunch> {
    // Logical blocks (4 / ks columns each); a persistent grid of at most SMs x blocks-per-SM walks them.
    const int logical = (p.cols + warps_per_block / ks - 1) / (warps_per_block / ks);
    int grid = logical;
    if (setting != 0 && dev.sm_count > 0) {
      int occ = 0;
      OPFUSE_RETURN_IF_ERROR(cuda::CudaStatus(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, threads, smem), "gemv: occupancy query"));
      const int per_sm = setting > 0 ? std::min(setting, std::max(occ, 1)) : std::max(occ, 1);
      grid = std::min(logical, dev.sm_count * per_sm);
    }
    if (grid_cap > 0) grid = std::min(grid, grid_cap);
    return cuda::KernelLaunch::Make(ks > 1 ? fmt::format("{}_ks{}", name, ks) : name, kernel,
                                    dim3(static_cast<unsigned>(grid)), dim3(threads), smem, p)
        .Pdl();
  };
  if (swiglu) return norm ? make(&GemvKernel<T, MR, true, 4, true, false, 1>) : make(&GemvKernel<T, MR, true, 4, false, false, 1>);
  if (rope) return norm ? make(&GemvKernel<T, MR, false, 4, true, true, 1>) : make(&GemvKernel<T, MR, false, 4, false, true, 1>);
  if (norm) return make(&GemvKernel<T, MR, false, 8, true, false, 1>);
  switch (KSplitFor(args.k, args.tuning.ksplit)) {
    case 4: return make(&GemvKernel<T, MR, false, 8, false, false, 4>, 4);
    case 2: return make(&GemvKernel<T, MR, false, 8, false, false, 2>, 2);
    default: return make(&GemvKernel<T, MR, false, 8, false, false, 1>);
  }
}

template <class T>
StatusOr<cuda::KernelLaunch> PlanTyped(const GemvArgs& args, const char* dt, const cuda::DeviceInfo& dev) {
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
    p.half[s] = static_cast<int>(seg.rope_half);
    p.cos[s] = static_cast<const T*>(seg.cos);
    p.sin[s] = static_cast<const T*>(seg.sin);
    if (!swiglu || s == 0) cols += static_cast<int>(seg.rope_half > 0 ? seg.n / 2 : seg.n);
  }
  p.start[p.nseg] = cols;
  p.cols = cols;
  if (args.norm.kind != GemvNormKind::kNone) {
    p.a = static_cast<const T*>(args.norm.x);
    p.res = static_cast<const T*>(args.norm.res);
    p.nw = static_cast<const T*>(args.norm.weight);
    p.sum_out = static_cast<T*>(args.norm.sum_out);
    p.eps = static_cast<float>(args.norm.eps);
  }
  if (GemvUsesTensorCores(args)) return LaunchGemvMma<T>(args, p, dt, dev);
  if (args.m <= 1) return Launch<T, 1>(args, p, dt, dev);
  if (args.m <= 2) return Launch<T, 2>(args, p, dt, dev);
  static_assert(kGemvCudaCoreMaxRows <= 4, "GemvKernel instances cover MR 1, 2, 4");
  return Launch<T, 4>(args, p, dt, dev);
}

}  // namespace

StatusOr<cuda::KernelLaunch> PlanGemv(const GemvArgs& args, const cuda::DeviceInfo& dev) {
  OPFUSE_RETURN_IF_ERROR(GemvSupported(args));
  if (args.dtype == DType::kBF16) return PlanTyped<__nv_bfloat16>(args, "bf16", dev);
  return PlanTyped<__half>(args, "f16", dev);
}

}  // namespace opfuse::kernels
