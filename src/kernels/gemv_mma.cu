// The GEMV's tensor-core form (gemv.h, gemv_device.cuh): the same launch arguments as the CUDA-core
// kernel in gemv.cu — several weights per launch, norm prologue, SwiGLU and RoPE epilogues — for
// kGemvTensorCoreMinRows..kGemvMaxRows rows, so a decode step can keep its fusions at batch 3..64.
//
// Design note (a few activation rows times a weight stream, on tensor cores):
//  * mma.sync m16n8k16 with the weights as the 16-row A operand and the activations as the 8-column
//    B operand: one warp owns 16 output columns (16 weight rows; 16 pairs with SwiGLU or RoPE: gate
//    and up rows, or columns c and c + half) and all m rows, MT = ceil(m / 8) B tiles.
//  * The k order inside an mma is free as long as A and B agree, so each lane loads whole 16-byte
//    packs: lane (g, t) (g = lane / 4, t = lane % 4) reads pack 4c + t of weight rows g and g + 8 and
//    of activation rows 8j + g, and the two k16 steps of a 32-element chunk c take the pack's halves
//    (.x .y, then .z .w) — every load is 16 bytes, four lanes read 64 contiguous bytes of a row, and
//    no shuffle or shared-memory transpose is needed. Weights stream past L1 (read once); the
//    activations, a few KiB to 256 KiB, come through the read-only cache.
//  * The warps of a block split k: warp w takes chunks w, w + W, ... (W warps per block, derived
//    from the tile count and the SMs so the GPU holds about kWarpsPerSm warps, each with U chunks of
//    weights in flight — the bytes in flight a weight stream needs; few column tiles → more warps
//    per tile). The warps' f32 partial tiles are summed through shared memory, then the block's
//    threads run the epilogue (StoreCol: bias, SwiGLU, RoPE, rounding once to T) element by element.
//  * Norm prologue: the B operand is s * norm_weight rounded to T (s = x, or x + res rounded to T,
//    written to sum_out by block 0), and each lane sums s² of the rows it loads; the row's rstd
//    (summed over lanes and warps) scales the dot products in the epilogue — the CUDA-core kernel's
//    order (it keeps s * norm_weight in f32: the two differ by one bf16 rounding of the operand).
//  * Latency: each warp keeps U chunks of weights in flight and (1–2 B tiles, but not the SwiGLU +
//    norm instance) loads a chunk's activations one chunk ahead of its MMAs.
//  * PDL: the first U chunks of weights are loaded before the wait for the previous kernel.
#include <algorithm>

#include <fmt/format.h>

#include "kernels/gemv_device.cuh"
#include "kernels/mma.cuh"
#include "kernels/pdl.cuh"
#include "cuda/cuda_check.h"

namespace opfuse::kernels::gemv_detail {
namespace {

// Resident warps the grid aims at: 24 a SM measured faster than 16 on the wide and long-k weights
// (dev/gemv_sweep), where the instance's registers let them be resident (LaunchMt's one-wave rule).
inline constexpr int kWarpsPerSm = 24;

// Both k16 steps of one 32-element chunk (the packs' first halves, then their second halves):
// weight rows g / g + 8 in w0 / w1, activation row 8j + g in x.
template <class T>
__device__ __forceinline__ void MmaPack(float (&c)[4], const uint4& w0, const uint4& w1, const uint4& x) {
  const uint32_t a0[4] = {w0.x, w1.x, w0.y, w1.y}, a1[4] = {w0.z, w1.z, w0.w, w1.w};
  Mma(c, a0, x.x, x.y, static_cast<const T*>(nullptr));
  Mma(c, a1, x.z, x.w, static_cast<const T*>(nullptr));
}

template <class T, int MT, bool SWIGLU, bool NORM, bool ROPE>
__global__ void __launch_bounds__(MT >= 4 ? 256 : 512) GemvMmaKernel(GemvParams<T> p) {
  constexpr bool kDual = SWIGLU || ROPE;
  constexpr int NR = kDual ? 4 : 2;  // weight packs a lane loads per chunk: rows g, g + 8 (and their pairs)
  constexpr int U = kDual ? 2 : 4;   // chunks in flight per warp
  constexpr int NQ = kDual ? 8 : 4;  // f32 accumulators per B tile and lane (acc, then acc2)
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int nw = static_cast<int>(blockDim.x >> 5);
  const int g = lane >> 2, t = lane & 3;
  const int tile0 = static_cast<int>(blockIdx.x) * 16;
  const int kv = p.kv, m = p.m;
  const int nch = (kv + 3) / 4;  // 32-element chunks of k
  const int cnt = warp < nch ? (nch - warp + nw - 1) / nw : 0;
  const GemvCol c0 = LocateCol<T, SWIGLU, ROPE>(p, tile0 + g), c1 = LocateCol<T, SWIGLU, ROPE>(p, tile0 + g + 8);

  // Chunk i of this warp: pack (warp + nw * i) * 4 + t of rows g, g + 8 (zero past k, past the
  // columns, and for a RoPE kernel's columns without a pair).
  auto load = [&](int i, uint4 (&q)[NR]) {
    const int pk = (warp + nw * i) * 4 + t;
    const bool in = i < cnt && pk < kv;
#pragma unroll
    for (int r = 0; r < NR; ++r) q[r] = make_uint4(0, 0, 0, 0);
    if (in && c0.active) {
      q[0] = LoadStream(c0.w0 + pk);
      if constexpr (kDual) {
        if (c0.w1) q[2] = LoadStream(c0.w1 + pk);
      }
    }
    if (in && c1.active) {
      q[1] = LoadStream(c1.w0 + pk);
      if constexpr (kDual) {
        if (c1.w1) q[3] = LoadStream(c1.w1 + pk);
      }
    }
  };
  uint4 wq[U][NR];
  PdlAllowNext();
#pragma unroll
  for (int u = 0; u < U; ++u) load(u, wq[u]);
  PdlWait();

  float acc[MT][4], acc2[MT][4];  // acc2: the pair partners (kDual)
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[j][q] = acc2[j][q] = 0.0f;
  float ssq[MT];
#pragma unroll
  for (int j = 0; j < MT; ++j) ssq[j] = 0.0f;
  const uint4* a4 = reinterpret_cast<const uint4*>(p.a);
  const uint4* r4 = reinterpret_cast<const uint4*>(p.res);
  const uint4* n4 = reinterpret_cast<const uint4*>(p.nw);
  uint4* s4 = reinterpret_cast<uint4*>(p.sum_out);

  // The activation packs of chunk i (x; for the norm prologue also res and the norm weight), loaded
  // one chunk ahead of their use (up to 2 B tiles) so their latency overlaps the current chunk's
  // MMAs; zero past k, past the rows and past this warp's chunks.
  struct ActPacks {
    uint4 x[MT], r[MT], w;
  };
  auto load_act = [&](int i, ActPacks& b) {
    const int pk = (warp + nw * i) * 4 + t;
    const bool kin = i < cnt && pk < kv;
    b.w = make_uint4(0, 0, 0, 0);
    if constexpr (NORM) {
      if (kin && n4) b.w = __ldg(n4 + pk);
    }
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      const int row = 8 * j + g;
      const bool in = kin && row < m;
      const size_t at = static_cast<size_t>(row) * kv + pk;
      b.x[j] = b.r[j] = make_uint4(0, 0, 0, 0);
      if (in) b.x[j] = __ldg(a4 + at);
      if constexpr (NORM) {
        if (in && r4) b.r[j] = __ldg(r4 + at);
      }
    }
  };
  // Registers: 4 and 8 B tiles load at use; so does the SwiGLU + norm kernel, measured slower with
  // the look-ahead (docs/BENCHMARKS.md, issue 32).
  constexpr bool kAhead = MT <= 2 && !(SWIGLU && NORM);
  ActPacks cur, nxt;
  if constexpr (kAhead) load_act(0, cur);
  for (int i0 = 0; i0 < cnt; i0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + u;
      if constexpr (kAhead) load_act(i + 1, nxt);
      else load_act(i, cur);
      if (i < cnt) {
        const int pk = (warp + nw * i) * 4 + t;
        float nwf[8];
        if constexpr (NORM) {
          if (n4) {
            Unpack8<T>(cur.w, nwf);
          } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) nwf[e] = 1.0f;
          }
        }
#pragma unroll
        for (int j = 0; j < MT; ++j) {
          uint4 x = cur.x[j];
          if constexpr (NORM) {
            const int row = 8 * j + g;
            if (r4) {  // s = x + res, rounded to T: the normalised value is the stored sum (norm.cu's rule)
              x = AddPacks<T>(x, cur.r[j]);
              if (blockIdx.x == 0 && pk < kv && row < m) s4[static_cast<size_t>(row) * kv + pk] = x;
            }
            float f[8];
            Unpack8<T>(x, f);
#pragma unroll
            for (int e = 0; e < 8; ++e) ssq[j] = fmaf(f[e], f[e], ssq[j]);
            x = make_uint4(Pack2<T>(f[0] * nwf[0], f[1] * nwf[1]), Pack2<T>(f[2] * nwf[2], f[3] * nwf[3]),
                           Pack2<T>(f[4] * nwf[4], f[5] * nwf[5]), Pack2<T>(f[6] * nwf[6], f[7] * nwf[7]));
          }
          MmaPack<T>(acc[j], wq[u][0], wq[u][1], x);
          if constexpr (kDual) MmaPack<T>(acc2[j], wq[u][2], wq[u][3], x);
        }
      }
      load(i + U, wq[u]);
      if constexpr (kAhead) cur = nxt;
    }
  }

  // The warps' partial tiles (and row sums of squares) through shared memory: red[w][j][q][lane].
  extern __shared__ float red[];
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int q = 0; q < NQ; ++q) red[((warp * MT + j) * NQ + q) * 32 + lane] = q < 4 ? acc[j][q] : acc2[j][q - 4];
  float* sred = red + nw * MT * NQ * 32;  // NORM: [w][8 * j + g]
  if constexpr (NORM) {
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      float v = ssq[j];
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      if (t == 0) sred[warp * MT * 8 + 8 * j + g] = v;
    }
  }
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < MT * 32; e += static_cast<int>(blockDim.x)) {
    const int j = e >> 5, ln = e & 31, eg = ln >> 2, et = ln & 3;
    float v[NQ];
#pragma unroll
    for (int q = 0; q < NQ; ++q) {
      float s = 0.0f;
      for (int w = 0; w < nw; ++w) s += red[((w * MT + j) * NQ + q) * 32 + ln];
      v[q] = s;
    }
    // C layout: v[0], v[1] = (column eg, rows 2et, 2et + 1); v[2], v[3] = (column eg + 8, same rows);
    // v[4..7] the same for the pair partner.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 8 * j + 2 * et + h;
      if (r >= m) continue;
      float sc = 1.0f;
      if constexpr (NORM) {
        float s = 0.0f;
        for (int w = 0; w < nw; ++w) s += sred[w * MT * 8 + r];
        sc = rsqrtf(s / static_cast<float>(kv * 8) + p.eps);
      }
#pragma unroll
      for (int cc = 0; cc < 2; ++cc) {
        const GemvCol col = LocateCol<T, SWIGLU, ROPE>(p, tile0 + eg + 8 * cc);
        if (col.active) StoreCol<T, SWIGLU, ROPE>(p, col, r, v[2 * cc + h], kDual ? v[4 + 2 * cc + h] : 0.0f, sc);
      }
    }
  }
}

template <class T, int MT>
StatusOr<cuda::KernelLaunch> LaunchMt(const GemvArgs& args, const GemvParams<T>& p, const char* dt,
                                      const cuda::DeviceInfo& dev) {
  const bool norm = args.norm.kind != GemvNormKind::kNone;
  const bool swiglu = args.epilogue == GemvEpilogue::kSwiglu;
  bool rope = false;
  for (const auto& seg : args.segments) rope |= seg.rope_half > 0;
  const bool dual = swiglu || rope;
  // Warps per block: enough that tiles x warps fills the SMs with kWarpsPerSm warps, at most the
  // kernel's launch bound, at least two chunks of k a warp, and the reduction within 48 KiB; then
  // fewer while the grid would not be resident in one wave (this instance's registers and shared
  // memory, the occupancy API) — a second partial wave costs more than the bytes in flight gain.
  const int tiles = (p.cols + 15) / 16;
  const int nch = (p.kv + 3) / 4;
  const int max_warps = MT >= 4 ? 8 : 16;
  const size_t per_warp = static_cast<size_t>(MT) * ((dual ? 8 : 4) * 32 + (norm ? 8 : 0)) * sizeof(float);
  const int smem_cap = static_cast<int>((48 * 1024) / per_warp);
  const int sms = std::max(dev.sm_count, 1);
  auto make = [&](auto kernel) -> StatusOr<cuda::KernelLaunch> {
    int warps = std::clamp((sms * kWarpsPerSm + tiles - 1) / tiles, 1, std::max(1, std::min({max_warps, nch / 2, smem_cap})));
    for (; warps > 1; --warps) {
      int occ = 0;
      OPFUSE_RETURN_IF_ERROR(cuda::CudaStatus(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, 32 * warps, per_warp * static_cast<size_t>(warps)),
          "gemv_mma: occupancy query"));
      if (static_cast<int64_t>(occ) * sms >= tiles) break;
    }
    if (args.tuning.mma_warps > 0) warps = std::min({args.tuning.mma_warps, max_warps, smem_cap});
    const std::string name = fmt::format("gemv_mma:{}{}{}{}_m{}_n{}_k{}_w{}", NormTag(args.norm.kind), swiglu ? "swiglu_" : "",
                                         rope ? "rope_" : "", dt, args.m, p.cols, args.k, warps);
    return cuda::KernelLaunch::Make(name, kernel, dim3(static_cast<unsigned>(tiles)), dim3(static_cast<unsigned>(32 * warps)),
                                    per_warp * static_cast<size_t>(warps), p)
        .Pdl();
  };
  if (swiglu) return norm ? make(&GemvMmaKernel<T, MT, true, true, false>) : make(&GemvMmaKernel<T, MT, true, false, false>);
  if (rope) return norm ? make(&GemvMmaKernel<T, MT, false, true, true>) : make(&GemvMmaKernel<T, MT, false, false, true>);
  return norm ? make(&GemvMmaKernel<T, MT, false, true, false>) : make(&GemvMmaKernel<T, MT, false, false, false>);
}

}  // namespace

template <class T>
StatusOr<cuda::KernelLaunch> LaunchGemvMma(const GemvArgs& args, const GemvParams<T>& p, const char* dt,
                                           const cuda::DeviceInfo& dev) {
  static_assert(kGemvMaxRows <= 64, "GemvMmaKernel instances cover MT 1, 2, 4, 8 tiles of 8 rows");
  if (args.m <= 8) return LaunchMt<T, 1>(args, p, dt, dev);
  if (args.m <= 16) return LaunchMt<T, 2>(args, p, dt, dev);
  if (args.m <= 32) return LaunchMt<T, 4>(args, p, dt, dev);
  return LaunchMt<T, 8>(args, p, dt, dev);
}

template StatusOr<cuda::KernelLaunch> LaunchGemvMma<__nv_bfloat16>(const GemvArgs&, const GemvParams<__nv_bfloat16>&,
                                                                   const char*, const cuda::DeviceInfo&);
template StatusOr<cuda::KernelLaunch> LaunchGemvMma<__half>(const GemvArgs&, const GemvParams<__half>&, const char*,
                                                            const cuda::DeviceInfo&);

}  // namespace opfuse::kernels::gemv_detail
