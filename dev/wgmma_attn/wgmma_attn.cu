// wgmma_attn: scratch probe (dev/, not part of the build) of a prefill attention kernel on Hopper's
// warpgroup MMA (issue 32: attention at the speed of torch's default SDPA, cuDNN's sm90 wgmma kernel),
// built on dev/wgmma_tile's validated pieces (S = Q K^T with both operands from shared memory, O += P V
// with P from registers and V transposed by the instruction). The softmax is the library kernel's
// (maximum over raw scores, one FMA + ex2 a weight, rescale skipped when no maximum moved); causal
// grids are folded as in the library. Three forms, each checked against the CPU reference:
//   * WgmmaAttnTma (kept form): a producer warpgroup, one thread of which issues TMA loads (128-byte
//     swizzle) of Q and of K/V tiles into a 3-stage ring with "full" / "empty" mbarriers, and two
//     consumer warpgroups of 64 query rows that wait on the barriers only — no block barrier a tile.
//     111 registers, one block of 384 threads a SM.
//   * WgmmaAttn<NWG, BN>: K/V double-buffered through cp.async into the no-swizzle core-matrix layout,
//     one block barrier a tile, each GEMM waited on before the softmax.
//   * WgmmaAttnPipe<NWG>: the same with the next tile's Q K^T issued before this tile's softmax.
//
// Answer (H200, docs/BENCHMARKS.md "Prefill attention: the kernel's structure" and "The Hopper kernel
// in the library"): the TMA producer / consumer form is 1.12-1.25x faster than the library's mma.sync
// kernel and is now the library's Hopper kernel (src/kernels/sm90a/attention_wgmma.cu). The cp.async
// forms are not faster than the mma.sync kernel; 128-key tiles are slower. Template options of the TMA
// form measured since: PIPE (FA3's intra-warpgroup overlap: next Q K^T before the softmax, 168
// registers) level with the unpipelined form; NC = 3 consumer warpgroups (192-row blocks) 11 % faster
// at 8192 rows and at full 2048, slower at causal 2048 (wave fill).
// kv_attention (RunKv: B sequences over caches, positions read on the device, windows, and NaN in
// every cache row a sequence must not read): a TMA box cannot zero-fill the rows in [S_b, S) as the
// cp.async loader does, and P = 0 does not neutralise a NaN there (0 x NaN = NaN in the MMA). Boxes
// start at the window's first visible key (older rows are never loaded), and the producer warp zeroes
// the V rows past S_b of a pass's last tile in shared memory (fence.proxy.async) and releases that
// tile through one `ready` barrier; the others go on `full` (releasing every tile through a second
// barrier lagged the ring to one stage: 1.23-1.33x slower).
// ptxas note: waiting for the older of two wgmma groups while the newer is in flight made ptxas
// serialize every wgmma of the kernel (C7514); retiring P V_{j-1} before issuing Q K^T_{j+1} keeps
// the pipeline. The P fragments passed as the A operand must stay live until the wait (asm fence).
//
// Check: against an f64 CPU reference on small odd shapes (causal and not, T < S, T > S, GQA, poisoned
// output). Timing: TimeCaptured (dev/graph_time.h). Compare with build/attn_prefill (the library
// kernel) in the same device call.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a dev/wgmma_attn/wgmma_attn.cu -o build/wgmma_attn
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "../graph_time.h"
#include "../wgmma_common.cuh"

namespace {

using bf16 = __nv_bfloat16;

// Pins accumulator registers around a wgmma batch (no moves of them across it), as CUTLASS's
// warpgroup_fence_operand does.
__device__ __forceinline__ void FenceOperand(float (&d)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void CpCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void CpWait0() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ float Ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// The softmax of one 64-key score tile shared by the three kernels. A thread holds rows qrow and
// qrow + 8 of its warp; s holds NV scores in the wgmma accumulator layout, NV / 4 chunks of 8 keys
// (chunk c: keys n0 + 8c + (lane % 4) * 2 + {0, 1}, values {row, row, row + 8, row + 8}).

// Scores of keys past S, above the causal diagonal, or (WIN) below the row's window bound wlo to -inf.
template <int NV, bool WIN>
__device__ __forceinline__ void MaskScores(float* s, int n0, int lane, int qrow, int S, int off, int causal, int wlo) {
#pragma unroll
  for (int i = 0; i < NV / 4; ++i)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int key = n0 + 8 * i + (lane & 3) * 2 + e;
      if (key >= S || (causal && key > qrow + off) || (WIN && key < wlo)) s[4 * i + e] = -INFINITY;
      if (key >= S || (causal && key > qrow + 8 + off) || (WIN && key < wlo + 8)) s[4 * i + 2 + e] = -INFINITY;
    }
}

// One online-softmax step: the row maxima over the raw scores (scale_log2 > 0) into mrow (log2
// units), each weight 2^(s * scale_log2 - mu) in place, the row sums into lrow; alpha is the factor
// the accumulator must be rescaled by.
template <int NV>
__device__ __forceinline__ void SoftmaxStep(float* s, float (&mrow)[2], float (&lrow)[2], float scale_log2,
                                            float (&alpha)[2]) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < NV / 4; ++i) {
    mx[0] = fmaxf(mx[0], fmaxf(s[4 * i], s[4 * i + 1]));
    mx[1] = fmaxf(mx[1], fmaxf(s[4 * i + 2], s[4 * i + 3]));
  }
  float mu[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float m_new = fmaxf(mrow[r], mx[r] * scale_log2);
    mu[r] = m_new == -INFINITY ? 0.f : m_new;
    alpha[r] = Ex2(mrow[r] - mu[r]);
    mrow[r] = m_new;
  }
  float rs[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < NV / 4; ++i) {
    float* t = s + 4 * i;
    t[0] = Ex2(fmaf(t[0], scale_log2, -mu[0]));
    t[1] = Ex2(fmaf(t[1], scale_log2, -mu[0]));
    t[2] = Ex2(fmaf(t[2], scale_log2, -mu[1]));
    t[3] = Ex2(fmaf(t[3], scale_log2, -mu[1]));
    rs[0] += t[0] + t[1];
    rs[1] += t[2] + t[3];
  }
  lrow[0] = lrow[0] * alpha[0] + rs[0];
  lrow[1] = lrow[1] * alpha[1] + rs[1];
}

// o *= alpha row-wise; with SKIP not at all when no row maximum of the warp moved (alpha exactly 1).
template <bool SKIP>
__device__ __forceinline__ void Rescale(float (&o)[32], const float (&alpha)[2]) {
  if (SKIP && !__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    o[4 * i] *= alpha[0];
    o[4 * i + 1] *= alpha[0];
    o[4 * i + 2] *= alpha[1];
    o[4 * i + 3] *= alpha[1];
  }
}

// P's A fragments (the mma.sync m16n8k16 layout) for keys 16kk .. 16kk + 15 from the weights.
template <int NV>
__device__ __forceinline__ void PackP(const float* s, uint32_t (&a)[NV / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < NV / 8; ++kk) {
    const float* t = s + 8 * kk;
    a[kk][0] = PackBf16(t[0], t[1]);
    a[kk][1] = PackBf16(t[2], t[3]);
    a[kk][2] = PackBf16(t[4], t[5]);
    a[kk][3] = PackBf16(t[6], t[7]);
  }
}

// The normalised output of rows row and row + 8 (those below T): o_rows points at column 0 of this
// head in row 0, rows `stride` elements apart.
__device__ __forceinline__ void StoreRows(__nv_bfloat16* o_rows, int64_t stride, const float (&o)[32],
                                          const float (&lrow)[2], int row, int T, int lane) {
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = lrow[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[r] = l > 0.f ? 1.f / l : 0.f;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int col = 8 * i + (lane & 3) * 2;
    if (row < T)
      *reinterpret_cast<uint32_t*>(o_rows + int64_t(row) * stride + col) = PackBf16(o[4 * i] * inv[0], o[4 * i + 1] * inv[0]);
    if (row + 8 < T)
      *reinterpret_cast<uint32_t*>(o_rows + int64_t(row + 8) * stride + col) =
          PackBf16(o[4 * i + 2] * inv[1], o[4 * i + 3] * inv[1]);
  }
}

struct Params {
  const bf16 *q, *k, *v;
  bf16* o;
  int T, S, Hq, Hkv, group, causal;
  float scale_log2;
  int fold;
  // WgmmaAttnTma only: kv_attention over caches of B sequences (blockIdx.z), sequence b seeing
  // S_b = min(S, pos[b] + T) keys (pos == nullptr: S), and a sliding window (0: none).
  const int* pos;
  int window;
  int B;
};

// HD = 64. Layout of a [rows x 64] tile: element (r, d) at byte (r/8)*1024 + (d/8)*128 + (r%8)*16 + (d%8)*2.
// BN keys a tile (64 or 128: a 128-key tile is two n64 halves of the score accumulators).
template <int NWG, int BN>
__global__ void __launch_bounds__(NWG * 128) WgmmaAttn(Params p) {
  constexpr int HD = 64, BM = 64 * NWG, TH = 128 * NWG, NH = BN / 64;
  constexpr int SBO = HD / 8 * 128;      // bytes between 8-row core groups
  constexpr int TILE = BN * HD * 2;      // bytes of one K or V tile
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t s0 = Smem32(smem);
  const uint32_t sQ = s0 + 4 * TILE;     // K0 V0 K1 V1 Q
  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, warp = wtid / 32, lane = tid % 32;
  const int h = blockIdx.y, kvh = h / p.group;
  const int S = p.S, off = S - p.T;
  const int64_t q_stride = int64_t(p.Hq) * HD, kv_stride = int64_t(p.Hkv) * HD;
  const bf16* qbase = p.q + int64_t(h) * HD;
  const bf16* kbase = p.k + int64_t(kvh) * HD;
  const bf16* vbase = p.v + int64_t(kvh) * HD;
  // This thread's 16-byte chunks of a [rows x 64] tile: lanes 0-7 take rows 0-7 of one chunk column
  // (128 contiguous bytes of shared memory), the next 8 lanes the next column.
  auto load = [&](uint32_t dst, const bf16* base, int64_t stride, int row0, int nrows, int rows) {
    for (int i = tid; i < rows * 8; i += TH) {
      const int r = (i & 7) + ((i >> 6) << 3), c = (i >> 3) & 7;  // 64 chunks = 8 rows x 8 columns a group
      const bool ok = row0 + r < nrows && row0 + r >= 0;
      const bf16* src = ok ? base + int64_t(row0 + r) * stride + c * 8 : base;
      CpAsync16(dst + (r >> 3) * SBO + c * 128 + (r & 7) * 16, src, ok ? 16 : 0);
    }
  };
  const int nq = (p.T + BM - 1) / BM, bx = blockIdx.x;
  const int npass = p.fold && 2 * bx + 1 < nq ? 2 : 1;
  for (int pass = 0; pass < npass; ++pass) {
    const int mt = p.fold ? (pass == 0 ? nq - 1 - bx : bx) : p.causal ? int(gridDim.x) - 1 - bx : bx;
    const int m0 = mt * BM;
    const int kv_end = p.causal ? min(S, max(0, m0 + BM + off)) : S;
    const int ntiles = (kv_end + BN - 1) / BN;
    const int g0 = m0 + wg * 64;                 // this warpgroup's first row
    const int glast = min(g0 + 64, p.T) - 1;
    const int wrow0 = g0 + warp * 16;            // this warp's first row
    if (pass) __syncthreads();
    load(sQ, qbase, q_stride, m0, p.T, BM);
    if (ntiles > 0) {
      load(s0, kbase, kv_stride, 0, S, BN);
      load(s0 + TILE, vbase, kv_stride, 0, S, BN);
    }
    CpCommit();
    float o[32], mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    for (int i = 0; i < 32; ++i) o[i] = 0.f;
    for (int j = 0; j < ntiles; ++j) {
      const int n0 = j * BN;
      CpWait0();
      ProxyFence();
      __syncthreads();
      if (j + 1 < ntiles) {
        const uint32_t st = s0 + ((j + 1) & 1) * 2 * TILE;
        load(st, kbase, kv_stride, n0 + BN, S, BN);
        load(st + TILE, vbase, kv_stride, n0 + BN, S, BN);
      }
      CpCommit();
      if (g0 > glast || (p.causal && n0 > glast + off)) continue;  // warpgroup-uniform
      const uint32_t sk = s0 + (j & 1) * 2 * TILE, sv = sk + TILE, sq = sQ + wg * 8 * SBO;
      float s[NH][32];
      WgFence();
#pragma unroll
      for (int hh = 0; hh < NH; ++hh)
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk)
          WgmmaSS(s[hh], Desc(sq + kk * 256, 128, SBO), Desc(sk + hh * 8 * SBO + kk * 256, 128, SBO), kk > 0);
      WgCommit();
      WgWait0();
      float* const sf = &s[0][0];
      if (n0 + BN > S || (p.causal && n0 + BN - 1 > wrow0 + off))
        MaskScores<BN / 2, false>(sf, n0, lane, wrow0 + lane / 4, S, off, p.causal, 0);
      float alpha[2];
      SoftmaxStep<BN / 2>(sf, mrow, lrow, p.scale_log2, alpha);
      Rescale<true>(o, alpha);
      uint32_t a[BN / 16][4];
      PackP<BN / 2>(sf, a);
      WgFence();
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) WgmmaRS(o, a[kk], Desc(sv + kk * 2 * SBO, SBO, 128));
      WgCommit();
      WgWait0();
    }
    CpWait0();
    StoreRows(p.o + int64_t(h) * HD, q_stride, o, lrow, wrow0 + lane / 4, p.T, lane);
  }
}


// The same with the next tile's Q K^T issued before this tile's softmax (FA3's intra-warpgroup
// pipelining): K in 3 buffers and V in 4, tile j + 2 issued at the top of tile j (its buffers' last
// readers, Q K^T_{j-1} and P V_{j-2}, are waited on by every warpgroup before that barrier).
template <int NWG>
__global__ void __launch_bounds__(NWG * 128, NWG == 2 ? 2 : 1) WgmmaAttnPipe(Params p) {
  constexpr int HD = 64, BN = 64, BM = 64 * NWG, TH = 128 * NWG;
  constexpr int SBO = HD / 8 * 128;
  constexpr int TILE = BN * HD * 2;
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t s0 = Smem32(smem);
  const uint32_t sKb = s0, sVb = s0 + 3 * TILE, sQ = s0 + 7 * TILE;
  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, warp = wtid / 32, lane = tid % 32;
  const int h = blockIdx.y, kvh = h / p.group;
  const int S = p.S, off = S - p.T;
  const int64_t q_stride = int64_t(p.Hq) * HD, kv_stride = int64_t(p.Hkv) * HD;
  const bf16* qbase = p.q + int64_t(h) * HD;
  const bf16* kbase = p.k + int64_t(kvh) * HD;
  const bf16* vbase = p.v + int64_t(kvh) * HD;
  auto load = [&](uint32_t dst, const bf16* base, int64_t stride, int row0, int nrows, int rows) {
    for (int i = tid; i < rows * 8; i += TH) {
      const int r = (i & 7) + ((i >> 6) << 3), c = (i >> 3) & 7;
      const bool ok = row0 + r < nrows && row0 + r >= 0;
      const bf16* src = ok ? base + int64_t(row0 + r) * stride + c * 8 : base;
      CpAsync16(dst + (r >> 3) * SBO + c * 128 + (r & 7) * 16, src, ok ? 16 : 0);
    }
  };
  auto load_tile = [&](int t) {
    load(sKb + (t % 3) * TILE, kbase, kv_stride, t * BN, S, BN);
    load(sVb + (t % 4) * TILE, vbase, kv_stride, t * BN, S, BN);
  };
  const int nq = (p.T + BM - 1) / BM, bx = blockIdx.x;
  const int npass = p.fold && 2 * bx + 1 < nq ? 2 : 1;
  for (int pass = 0; pass < npass; ++pass) {
    const int mt = p.fold ? (pass == 0 ? nq - 1 - bx : bx) : p.causal ? int(gridDim.x) - 1 - bx : bx;
    const int m0 = mt * BM;
    const int kv_end = p.causal ? min(S, max(0, m0 + BM + off)) : S;
    const int ntiles = (kv_end + BN - 1) / BN;
    const int g0 = m0 + wg * 64;
    const int glast = min(g0 + 64, p.T) - 1;
    const int wrow0 = g0 + warp * 16;
    const uint32_t sq = sQ + wg * 8 * SBO;
    auto active = [&](int j) { return g0 <= glast && !(p.causal && j * BN > glast + off); };  // warpgroup-uniform
    auto issue_qk = [&](float (&d)[32], int j) {
      const uint32_t sk = sKb + (j % 3) * TILE;
      FenceOperand(d);
      WgFence();
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
        WgmmaSS(d, Desc(sq + kk * 256, 128, SBO), Desc(sk + kk * 256, 128, SBO), kk > 0);
      WgCommit();
    };
    if (pass) __syncthreads();
    load(sQ, qbase, q_stride, m0, p.T, BM);
    if (ntiles > 0) load_tile(0);
    CpCommit();
    if (ntiles > 1) load_tile(1);
    CpCommit();
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    ProxyFence();
    __syncthreads();
    float o[32], sa[32], sb[32], mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    for (int i = 0; i < 32; ++i) o[i] = 0.f;
    if (ntiles > 0) {
      issue_qk(sa, 0);
      WgWait0();
    }
    // One tile: `cur` holds its scores, `nxt` receives the next tile's. The loop alternates the two
    // arrays instead of copying, so the registers the softmax reads are never a pending wgmma's.
    // NEXT (compile time): whether a next tile's Q K^T is issued, so every wait below has a constant
    // group count and ptxas can keep the wgmma pipeline (no tile is skipped: a warpgroup past the
    // causal diagonal computes a fully masked tile, weights 0).
    auto step = [&](auto next_c, int j, float (&s)[32], float (&sn)[32]) {
      constexpr bool NEXT = decltype(next_c)::value;
      const int n0 = j * BN;
      CpWait0();  // tile j + 1 has landed
      ProxyFence();
      __syncthreads();
      if (j + 2 < ntiles) load_tile(j + 2);
      CpCommit();
      // P V_{j-1} done before Q K^T_{j+1} is issued: with only the Q K^T group in flight during the
      // softmax, ptxas keeps the wgmma pipeline (waiting for the older of two groups instead makes it
      // serialize every wgmma of the kernel: C7514).
      WgWait0();
      if constexpr (NEXT) issue_qk(sn, j + 1);
      {
        if (n0 + BN > S || (p.causal && n0 + BN - 1 > wrow0 + off))
          MaskScores<32, false>(s, n0, lane, wrow0 + lane / 4, S, off, p.causal, 0);
        float alpha[2];
        SoftmaxStep<32>(s, mrow, lrow, p.scale_log2, alpha);
        uint32_t a[4][4];
        PackP<32>(s, a);
        // P V_{j-1} (issued last tile) must finish before O is rescaled; Q K^T_{j+1} may still run.
        if constexpr (NEXT)
          WgWait1();
        else
          WgWait0();
        Rescale<false>(o, alpha);
        const uint32_t sv = sVb + (j % 4) * TILE;
        FenceOperand(o);
        WgFence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) WgmmaRS(o, a[kk], Desc(sv + kk * 2 * SBO, SBO, 128));
        WgCommit();
        // The wgmma reads P's registers asynchronously: keep all four fragments live (distinct
        // registers) until it has been waited on.
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          asm volatile("" : "+r"(a[kk][0]), "+r"(a[kk][1]), "+r"(a[kk][2]), "+r"(a[kk][3])::"memory");
      }
      // Q K^T_{j+1} (the older group) must finish before its scores are read; P V_j may still run.
      if constexpr (NEXT) WgWait1();
    };
    std::integral_constant<bool, true> next;
    std::integral_constant<bool, false> last;
    int j = 0;
    for (; j + 2 < ntiles; j += 2) {
      step(next, j, sa, sb);
      step(next, j + 1, sb, sa);
    }
    if (j + 1 < ntiles) {
      step(next, j, sa, sb);
      step(last, j + 1, sb, sa);
    } else if (j < ntiles) {
      step(last, j, sa, sb);
    }
    WgWait0();
    CpWait0();
    StoreRows(p.o + int64_t(h) * HD, q_stride, o, lrow, wrow0 + lane / 4, p.T, lane);
  }
}


// FA3's structure: a producer warpgroup whose one thread brings Q and the K/V tiles in with the TMA
// engine (128-byte swizzle, dev/wgmma_tile/wgmma_tma.cu's descriptors) into a ring of NS stages, each
// with a "full" mbarrier (TMA transaction bytes) and an "empty" one (each consumer warp arrives once
// its wgmmas on the stage are done); two consumer warpgroups of 64 query rows each wait on the
// barriers only — no block barrier a tile. Causal grids folded as in the library; a second pass
// reuses the Q buffer after the consumers arrive on q_empty.
// PIPE: the consumers pipeline as WgmmaAttnPipe does (Q K^T_{j+1} issued before tile j's softmax,
// P V_j left in flight across the next tile's top; every warpgroup computes every tile, a tile past its
// causal diagonal fully masked), releasing a stage once its P V has been waited on.
template <int NS, bool PIPE = false, int NC = 2>
__global__ void __launch_bounds__((NC + 1) * 128, 1) WgmmaAttnTma(Params p, const __grid_constant__ CUtensorMap mq,
                                                        const __grid_constant__ CUtensorMap mk,
                                                        const __grid_constant__ CUtensorMap mv) {
  constexpr int HD = 64, BN = 64, BM = 64 * NC, TILE = 64 * 64 * 2;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // 1024-byte aligned base (the swizzle atom), then Q (2 tiles), K stages, V stages, barriers.
  const uint32_t raw = Smem32(smem_raw), s0 = (raw + 1023) & ~1023u;
  const uint32_t sQ = s0, sK = s0 + NC * TILE, sV = sK + NS * TILE, bars = sV + NS * TILE;
  // full: the TMA's bytes landed; empty: every consumer warp is done with the stage; ready (one): the
  // producer warp has zeroed what must not be read in a pass's last tile (V rows past S_b: 0 x NaN
  // would poison P V) — consumers wait on it instead of full for that tile only.
  const uint32_t q_full = bars, q_empty = bars + 8, k_full = bars + 16, empty = k_full + 8 * NS,
                 ready = empty + 8 * NS;  // one barrier
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int h = blockIdx.y, kvh = h / p.group, b = blockIdx.z;
  const int S = p.pos ? min(p.S, max(0, __ldg(p.pos + b) + p.T)) : p.S;  // this sequence's keys
  const int off = S - p.T;
  const int qrow0 = b * p.T, krow0 = b * p.S;  // this sequence's first row in the 2-D maps
  if (tid == 0) {
    MbarInit(q_full, 1);
    MbarInit(q_empty, 4 * NC);
    for (int i = 0; i < NS; ++i) {
      MbarInit(k_full + 8 * i, 1);
      MbarInit(empty + 8 * i, 4 * NC);
    }
    MbarInit(ready, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int nq = (p.T + BM - 1) / BM, bx = blockIdx.x;
  const int npass = p.fold && 2 * bx + 1 < nq ? 2 : 1;
  int it = 0;     // K/V tiles through the ring so far (the same count in every role)
  int tails = 0;  // tiles released through `ready` so far (consumers)
  for (int pass = 0; pass < npass; ++pass) {
    const int mt = p.fold ? (pass == 0 ? nq - 1 - bx : bx) : p.causal ? int(gridDim.x) - 1 - bx : bx;
    const int m0 = mt * BM;
    const int kv_end = p.causal ? min(S, max(0, m0 + BM + off)) : S;
    // Tiles start at kv_begin (a window's lowest visible key for this block's first row), so older
    // keys are never loaded; they need not be 64-aligned.
    const int kv_begin = p.window > 0 && p.causal ? min(kv_end, max(0, m0 + off + 1 - p.window)) : 0;
    const int ntiles = (kv_end - kv_begin + BN - 1) / BN;
    const int win_lo_last = p.window > 0 && p.causal ? m0 + BM + off - p.window : INT_MIN;
    if (wg == 0) {  // producer: warp 0 (lane 0 issues, all lanes zero and release)
      if (warp == 0) {
        if (pass) MbarWait(q_empty, (pass - 1) & 1);
        if (lane == 0) {
          MbarExpect(q_full, NC * TILE);
          for (int c = 0; c < NC; ++c) Tma2d(sQ + c * TILE, &mq, h * HD, qrow0 + m0 + 64 * c, q_full);
        }
        for (int j = 0; j < ntiles; ++j, ++it) {
          const int st = it % NS, ph = (it / NS) & 1, t0 = kv_begin + j * BN;
          MbarWait(empty + 8 * st, ph ^ 1);  // a fresh barrier passes parity 1 at once
          if (lane == 0) {
            MbarExpect(k_full + 8 * st, 2 * TILE);
            Tma2d(sK + st * TILE, &mk, kvh * HD, krow0 + t0, k_full + 8 * st);
            Tma2d(sV + st * TILE, &mv, kvh * HD, krow0 + t0, k_full + 8 * st);
          }
          __syncwarp();
          if (t0 + BN > S) {  // the pass's last tile reaches past S: zero those V rows, then release it
            MbarWait(k_full + 8 * st, ph);
            for (int i = (S - t0) * 8 + lane; i < BN * 8; i += 32)  // 16-byte units of 128-byte rows
              asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(sV + st * TILE + i * 16), "r"(0) : "memory");
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            __syncwarp();
            if (lane == 0) MbarArrive(ready);
          }
        }
      } else {
        it += ntiles;
      }
      continue;
    }
    // consumers: warpgroup c = wg - 1 owns rows m0 + 64c ..
    const int c = wg - 1, g0 = m0 + 64 * c, glast = min(g0 + 64, p.T) - 1, wrow0 = g0 + warp * 16;
    const uint32_t sq = sQ + c * TILE;
    MbarWait(q_full, pass & 1);
    float o[32], mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    for (int i = 0; i < 32; ++i) o[i] = 0.f;
    if constexpr (PIPE) {
      const int it0 = it;
      auto wait_tile = [&](int j) {
        const int st = (it0 + j) % NS, ph = ((it0 + j) / NS) & 1;
        if (kv_begin + j * BN + BN > S)
          MbarWait(ready, tails++ & 1);
        else
          MbarWait(k_full + 8 * st, ph);
      };
      auto issue_qk = [&](float (&d)[32], int j) {
        const uint32_t sk = sK + ((it0 + j) % NS) * TILE;
        FenceOperand(d);
        WgFence();
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk)
          WgmmaSS(d, DescSw128(sq + kk * 32, 16, 1024), DescSw128(sk + kk * 32, 16, 1024), kk > 0);
        WgCommit();
      };
      float sa[32], sb[32];
      if (ntiles > 0) {
        wait_tile(0);
        issue_qk(sa, 0);
        WgWait0();
      }
      auto step = [&](auto next_c, int j, float(&s)[32], float(&sn)[32]) {
        constexpr bool NEXT = decltype(next_c)::value;
        const int n0 = kv_begin + j * BN;
        WgWait0();  // P V_{j-1} done: its stage is free
        if (j > 0 && lane == 0) MbarArrive(empty + 8 * ((it0 + j - 1) % NS));
        if constexpr (NEXT) {
          wait_tile(j + 1);
          issue_qk(sn, j + 1);
        }
        if (n0 + BN > S || (p.causal && n0 + BN - 1 > wrow0 + off) || n0 < win_lo_last) {
          const int qrow = wrow0 + lane / 4;
          const int wlo = p.window > 0 && p.causal ? qrow + off + 1 - p.window : INT_MIN;
          MaskScores<32, true>(s, n0, lane, qrow, S, off, p.causal, wlo);
        }
        float alpha[2];
        SoftmaxStep<32>(s, mrow, lrow, p.scale_log2, alpha);
        uint32_t a[4][4];
        PackP<32>(s, a);
        Rescale<true>(o, alpha);
        const uint32_t sv = sV + ((it0 + j) % NS) * TILE;
        FenceOperand(o);
        WgFence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) WgmmaRS(o, a[kk], DescSw128(sv + kk * 2048, 16, 1024));
        WgCommit();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          asm volatile("" : "+r"(a[kk][0]), "+r"(a[kk][1]), "+r"(a[kk][2]), "+r"(a[kk][3])::"memory");
        if constexpr (NEXT) WgWait1();  // Q K^T_{j+1} (the older group) done; P V_j may run on
      };
      std::integral_constant<bool, true> next;
      std::integral_constant<bool, false> last;
      int j = 0;
      for (; j + 2 < ntiles; j += 2) {
        step(next, j, sa, sb);
        step(next, j + 1, sb, sa);
      }
      if (j + 1 < ntiles) {
        step(next, j, sa, sb);
        step(last, j + 1, sb, sa);
      } else if (j < ntiles) {
        step(last, j, sa, sb);
      }
      WgWait0();
      FenceOperand(o);
      if (ntiles > 0 && lane == 0) MbarArrive(empty + 8 * ((it0 + ntiles - 1) % NS));
      it += ntiles;
    }
    for (int j = 0; !PIPE && j < ntiles; ++j, ++it) {
      const int st = it % NS, ph = (it / NS) & 1, n0 = kv_begin + j * BN;
      if (n0 + BN > S)
        MbarWait(ready, tails++ & 1);  // the producer zeroed its V rows past S
      else
        MbarWait(k_full + 8 * st, ph);
      if (g0 <= glast && !(p.causal && n0 > glast + off)) {  // warpgroup-uniform
        float s[32];
        WgFence();
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk)
          WgmmaSS(s, DescSw128(sq + kk * 32, 16, 1024), DescSw128(sK + st * TILE + kk * 32, 16, 1024), kk > 0);
        WgCommit();
        WgWait0();
        if (n0 + BN > S || (p.causal && n0 + BN - 1 > wrow0 + off) || n0 < win_lo_last) {
          const int qrow = wrow0 + lane / 4;
          const int wlo = p.window > 0 && p.causal ? qrow + off + 1 - p.window : INT_MIN;
          MaskScores<32, true>(s, n0, lane, qrow, S, off, p.causal, wlo);
        }
        float alpha[2];
        SoftmaxStep<32>(s, mrow, lrow, p.scale_log2, alpha);
        Rescale<true>(o, alpha);
        uint32_t a[4][4];
        PackP<32>(s, a);
        WgFence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) WgmmaRS(o, a[kk], DescSw128(sV + st * TILE + kk * 2048, 16, 1024));
        WgCommit();
        WgWait0();
      }
      if (lane == 0) MbarArrive(empty + 8 * st);  // this warp is done with the stage
    }
    if (lane == 0) MbarArrive(q_empty);  // Q's buffer is free for the next pass
    const int64_t q_stride = int64_t(p.Hq) * HD;
    StoreRows(p.o + int64_t(qrow0) * q_stride + int64_t(h) * HD, q_stride, o, lrow, wrow0 + lane / 4, p.T, lane);
  }
}

struct Shape {
  const char* name;
  int T, S, Hq, Hkv;
  bool causal;
};

float Bf(bf16 x) { return __bfloat162float(x); }


// kv_attention through WgmmaAttnTma: B sequences over caches of S rows, sequence b's T new queries at
// positions pos[b] .. pos[b] + T - 1, an optional window; the cache rows a sequence must not read
// (past pos[b] + T, and older than the first query's window) hold NaN. Returns the max |error|
// against an f64 reference (INFINITY if any output is not finite).
double RunKv(int B, int T, int S, int Hq, int Hkv, std::vector<int> pos, int window, bool fold, std::mt19937& rng,
             bool pipe = false) {
  constexpr int D = 64;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const size_t nq = size_t(B) * T * Hq * D, nk = size_t(B) * S * Hkv * D;
  std::vector<bf16> hq(nq), hk(nk), hv(nk);
  for (auto& x : hq) x = __float2bfloat16(u(rng));
  for (auto& x : hk) x = __float2bfloat16(u(rng));
  for (auto& x : hv) x = __float2bfloat16(u(rng));
  const bf16 nan = __float2bfloat16(NAN);
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < S; ++j)
      if (j >= pos[b] + T || (window > 0 && j <= pos[b] - window))
        for (int e = 0; e < Hkv * D; ++e) hk[(size_t(b) * S + j) * Hkv * D + e] = hv[(size_t(b) * S + j) * Hkv * D + e] = nan;
  bf16 *q, *k, *v, *o;
  int* dpos;
  CK(cudaMalloc(&q, nq * 2));
  CK(cudaMalloc(&k, nk * 2));
  CK(cudaMalloc(&v, nk * 2));
  CK(cudaMalloc(&o, nq * 2));
  CK(cudaMalloc(&dpos, B * sizeof(int)));
  CK(cudaMemcpy(q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(k, hk.data(), nk * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(v, hv.data(), nk * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dpos, pos.data(), B * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaMemset(o, 0xFF, nq * 2));
  // Q as [B*T rows, Hq*D], the caches as [B*S rows, Hkv*D]: 64 x 64 boxes.
  const CUtensorMap mq = TensorMap2dBf16(q, uint64_t(Hq) * D, uint64_t(B) * T, 64, 64, CU_TENSOR_MAP_L2_PROMOTION_L2_128B),
                    mk = TensorMap2dBf16(k, uint64_t(Hkv) * D, uint64_t(B) * S, 64, 64, CU_TENSOR_MAP_L2_PROMOTION_L2_128B),
                    mv = TensorMap2dBf16(v, uint64_t(Hkv) * D, uint64_t(B) * S, 64, 64, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
  Params p{q, k, v, o, T, S, Hq, Hkv, Hq / Hkv, 1, float(1.4426950408889634 / 8.0), fold ? 1 : 0, dpos, window, B};
  const int nqt = (T + 127) / 128;
  const size_t smem = 1024 + 2 * 8192 + 2 * 3 * 8192 + 256;
  auto kern = pipe ? WgmmaAttnTma<3, true> : WgmmaAttnTma<3, false>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kern<<<dim3(fold ? (nqt + 1) / 2 : nqt, Hq, B), 384, smem>>>(p, mq, mk, mv);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<bf16> ho(nq);
  CK(cudaMemcpy(ho.data(), o, nq * 2, cudaMemcpyDeviceToHost));
  double err = 0;
  const int group = Hq / Hkv;
  std::vector<double> w(S);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h)
      for (int t = 0; t < T; ++t) {
        const int lim = pos[b] + t;  // keys j <= lim, and j > lim - window
        double mx = -INFINITY;
        for (int j = 0; j < S; ++j) {
          if (j > lim || (window > 0 && j <= lim - window)) { w[j] = -INFINITY; continue; }
          double d = 0;
          for (int e = 0; e < D; ++e)
            d += double(Bf(hq[((size_t(b) * T + t) * Hq + h) * D + e])) * Bf(hk[((size_t(b) * S + j) * Hkv + h / group) * D + e]);
          w[j] = d / 8.0;
          mx = std::max(mx, w[j]);
        }
        double l = 0;
        for (int j = 0; j < S; ++j) l += w[j] = (w[j] == -INFINITY ? 0 : std::exp(w[j] - mx));
        for (int e = 0; e < D; ++e) {
          double a = 0;
          for (int j = 0; j < S; ++j) if (w[j] != 0) a += w[j] * Bf(hv[((size_t(b) * S + j) * Hkv + h / group) * D + e]);
          const double got = Bf(ho[((size_t(b) * T + t) * Hq + h) * D + e]);
          const double dlt = std::fabs(got - a / l);
          err = std::isnan(dlt) ? INFINITY : std::max(err, dlt);
        }
      }
  for (void* ptr : {(void*)q, (void*)k, (void*)v, (void*)o, (void*)dpos}) CK(cudaFree(ptr));
  return err;
}
}  // namespace

int main() {
  constexpr int D = 64;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  int fails = 0;
  auto run = [&](const Shape& s, int nwg, bool fold, bool check, bool time, bool pipe, int bn = 64) -> double {
    const size_t nq = size_t(s.T) * s.Hq * D, nk = size_t(s.S) * s.Hkv * D;
    std::vector<bf16> hq(nq), hk(nk), hv(nk);
    for (auto& x : hq) x = __float2bfloat16(u(rng));
    for (auto& x : hk) x = __float2bfloat16(u(rng));
    for (auto& x : hv) x = __float2bfloat16(u(rng));
    bf16 *q, *k, *v, *o;
    CK(cudaMalloc(&q, nq * 2));
    CK(cudaMalloc(&k, nk * 2));
    CK(cudaMalloc(&v, nk * 2));
    CK(cudaMalloc(&o, nq * 2));
    CK(cudaMemcpy(q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(k, hk.data(), nk * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(v, hv.data(), nk * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(o, 0xFF, nq * 2));
    Params p{q, k, v, o, s.T, s.S, s.Hq, s.Hkv, s.Hq / s.Hkv, s.causal ? 1 : 0, float(1.4426950408889634 / 8.0),
             fold && s.causal ? 1 : 0};
    // nwg 0: the producer / consumer kernel with two consumer warpgroups, -3: three; pipe: PIPE
    const int nc = nwg == 0 ? 2 : nwg < 0 ? -nwg : 0;
    const bool tma = nc > 0;
    auto tma_kern = nc == 3 ? (pipe ? WgmmaAttnTma<3, true, 3> : WgmmaAttnTma<3, false, 3>)
                            : (pipe ? WgmmaAttnTma<3, true> : WgmmaAttnTma<3, false>);
    const int bm = tma ? 64 * nc : 64 * nwg, nqt = (s.T + bm - 1) / bm;
    const dim3 grid(p.fold ? (nqt + 1) / 2 : nqt, s.Hq);
    const size_t smem = tma ? 1024 + nc * 8192 + 2 * 3 * 8192 + 256 : (pipe ? 7 * 64 : 4 * bn) * D * 2 + size_t(bm) * D * 2;
    auto kern = pipe ? (nwg == 1 ? WgmmaAttnPipe<1> : nwg == 2 ? WgmmaAttnPipe<2> : WgmmaAttnPipe<3>)
                : bn == 128 ? (nwg == 1 ? WgmmaAttn<1, 128> : WgmmaAttn<2, 128>)
                            : (nwg == 1 ? WgmmaAttn<1, 64> : WgmmaAttn<2, 64>);
    CUtensorMap mq{}, mk{}, mv{};
    if (tma) {
      mq = TensorMap2dBf16(q, uint64_t(s.Hq) * D, s.T, 64, 64, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
      mk = TensorMap2dBf16(k, uint64_t(s.Hkv) * D, s.S, 64, 64, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
      mv = TensorMap2dBf16(v, uint64_t(s.Hkv) * D, s.S, 64, 64, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
      CK(cudaFuncSetAttribute(tma_kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    } else {
      CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    }
    auto launch = [&](cudaStream_t st) {
      if (tma)
        tma_kern<<<grid, 128 * (nc + 1), smem, st>>>(p, mq, mk, mv);
      else
        kern<<<grid, 128 * nwg, smem, st>>>(p);
    };
    launch(0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    if (check) {
      std::vector<bf16> ho(nq);
      CK(cudaMemcpy(ho.data(), o, nq * 2, cudaMemcpyDeviceToHost));
      double err = 0;
      const int group = s.Hq / s.Hkv, off = s.S - s.T;
      std::vector<double> w(s.S);
      for (int h = 0; h < s.Hq; ++h)
        for (int i = 0; i < s.T; ++i) {
          double mx = -INFINITY;
          for (int j = 0; j < s.S; ++j) {
            if (s.causal && j > i + off) { w[j] = -INFINITY; continue; }
            double d = 0;
            for (int e = 0; e < D; ++e) d += double(Bf(hq[(size_t(i) * s.Hq + h) * D + e])) * Bf(hk[(size_t(j) * s.Hkv + h / group) * D + e]);
            w[j] = d / 8.0;
            mx = std::max(mx, w[j]);
          }
          double l = 0;
          for (int j = 0; j < s.S; ++j) l += w[j] = (w[j] == -INFINITY ? 0 : std::exp(w[j] - mx));
          for (int e = 0; e < D; ++e) {
            double a = 0;
            for (int j = 0; j < s.S; ++j) if (w[j] != 0) a += w[j] * Bf(hv[(size_t(j) * s.Hkv + h / group) * D + e]);
            const double ref = mx == -INFINITY ? 0 : a / l;
            const double got = Bf(ho[(size_t(i) * s.Hq + h) * D + e]);
            const double d = std::fabs(got - ref);
            err = std::isnan(d) ? INFINITY : std::max(err, d);
          }
        }
      const bool ok = err < 2e-2;
      fails += !ok;
      std::printf("check %-22s nwg %d fold %d pipe %d bn %d: max|err| %.3g %s\n", s.name, nwg, int(fold), int(pipe), bn,
                  err, ok ? "OK" : "FAIL");
    }
    double us = 0;
    if (time) {
      cudaStream_t st;
      CK(cudaStreamCreate(&st));
      us = TimeCaptured(st, [&] { launch(st); });
      CK(cudaStreamDestroy(st));
    }
    CK(cudaFree(q));
    CK(cudaFree(k));
    CK(cudaFree(v));
    CK(cudaFree(o));
    return us;
  };
  const Shape small[] = {{"causal 300 gqa", 300, 300, 4, 2, true}, {"T<S 77/300", 77, 300, 4, 1, true},
                         {"full 130/211", 130, 211, 2, 2, false}, {"T>S 200/50", 200, 50, 2, 1, true},
                         {"causal 520", 520, 520, 2, 1, true}};
  for (const Shape& s : small)
    for (int nwg : {1, 2, 3})
      for (bool fold : {false, true})
        for (bool pipe : {false, true})
          if (nwg < 3 || pipe) run(s, nwg, fold, true, false, pipe);
  for (const Shape& s : small)
    for (int nwg : {1, 2})
      for (bool fold : {false, true}) run(s, nwg, fold, true, false, false, 128);
  for (const Shape& s : small)
    for (bool fold : {false, true})
      for (bool pipe : {false, true})
        for (int nwg : {0, -3}) run(s, nwg, fold, true, false, pipe);
  struct KvCase {
    int B, T, S, Hq, Hkv;
    std::vector<int> pos;
    int window;
  };
  const KvCase kv[] = {{3, 130, 700, 8, 2, {0, 300, 570}, 0}, {2, 200, 1024, 8, 8, {100, 824}, 90},
                       {1, 333, 333, 4, 1, {0}, 64}, {2, 64, 512, 8, 2, {448, 7}, 200}, {2, 300, 600, 4, 2, {0, 37}, 0}};
  for (const KvCase& c : kv)
    for (bool fold : {false, true})
      for (bool pipe : {false, true}) {
        const double err = RunKv(c.B, c.T, c.S, c.Hq, c.Hkv, c.pos, c.window, fold, rng, pipe);
        const bool ok = err < 2e-2;
        fails += !ok;
        std::printf("check kv B=%d T=%d S=%d window=%d fold %d pipe %d: max|err| %.3g %s\n", c.B, c.T, c.S, c.window,
                    int(fold), int(pipe), err, ok ? "OK" : "FAIL");
      }
  std::printf("checks: %d failures\n\n", fails);
  const Shape big[] = {{"tinyllama causal 512", 512, 512, 32, 4, true},   {"tinyllama causal 1024", 1024, 1024, 32, 4, true},
                       {"tinyllama causal 2048", 2048, 2048, 32, 4, true}, {"tinyllama causal 8192", 8192, 8192, 32, 4, true},
                       {"full 2048", 2048, 2048, 32, 4, false}};
  for (const Shape& s : big) {
    double flops = 0;
    for (int i = 0; i < s.T; ++i) flops += s.causal ? std::min(s.S, i + s.S - s.T + 1) : s.S;
    flops *= 4.0 * D * s.Hq;
    for (int nwg : {0, -3})
      for (bool fold : {false, true})
        for (int bn : {64})
          for (bool pipe : {false, true}) {
            if (!s.causal && fold) continue;
            const double us = run(s, nwg, fold, false, true, pipe, bn);
            std::printf("%-24s nwg %d fold %d pipe %d bn %3d: %8.1f us %6.1f TFLOP/s\n", s.name, nwg, int(fold), int(pipe),
                        bn, us, flops / us / 1e6);
          }
  }
  return fails ? 1 : 0;
}
