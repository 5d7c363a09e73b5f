// The Hopper (sm_90a) prefill attention kernel: warpgroup MMA (wgmma) fed by the TMA engine, in
// FlashAttention-3's producer / consumer structure. What it computes is attention.cu's semantics; when
// it runs is the planner's choice (attention.cu: a cc 9.0 device, f16/bf16, head_dim 64 or 128, and
// ChooseMma taking its 128-row, one-block-a-SM tile; everywhere else the mma.sync kernel of
// attention_mma.cu). This file alone is compiled for sm_90a (CMake: opfuse_sm90a), since wgmma and
// setmaxnreg exist on no other target.
//
// Structure of a block (384 threads, one a SM):
//   * a producer warpgroup, of which one warp works: lane 0 issues the TMA loads of the block's Q rows
//     (128 rows, two consumer tiles) and of the K/V tiles (64 keys) into a ring of NS stages, each stage
//     with a `full` mbarrier (completes on the TMA's transaction bytes) and an `empty` one (each consumer
//     warp arrives once its wgmmas have read the stage);
//   * two consumer warpgroups of 64 query rows: S = Q K^T with both operands read from shared memory
//     (K-major, 128-byte swizzle: descriptor stride 1024 B between 8-row groups, +32 B a 16-element
//     K step), the online softmax in registers (the mma.sync kernel's: maximum over the raw scores,
//     one FMA and one ex2 a weight, the O rescale skipped when no maximum of the warp moved), then
//     O += P V with P from registers (the S accumulators repacked as the A fragment) and V read
//     transposed by the instruction from its row-major tile. No block barrier a tile.
// Tiles are 64 columns of the head (one 128-byte swizzle box); head_dim 128 is two boxes: two Q/K
// boxes summed over for the scores and two output accumulators of 64 columns, each against its own V
// box, so every descriptor has the one layout validated in dev/wgmma_tile.
// Row tiles: causal grids fold as the mma.sync kernel's (block x takes row tiles nq - 1 - x, then x),
// the second pass reusing the Q buffer after the consumers release it (`q_empty`).
// kv_attention: Q and the caches are 2-D tensor maps ([rows, heads * D]); sequence b's rows start at
// b * T and b * S, and it sees S_b = min(S, pos[b] + T) keys. A TMA box cannot stop at S_b as the
// cp.async loader's zero-fill does, and P = 0 does not neutralise a NaN in V (0 x NaN = NaN), so the
// producer warp zeroes the V rows past S_b of a pass's last tile in shared memory (then a proxy
// fence) and releases that tile through one extra barrier (`ready`); K rows past S_b only produce
// scores that the mask overwrites with -inf. Windows start the tiles at the first row's lowest
// visible key, so older cache rows are never loaded.
// Invariants the planner guarantees: scale_log2 > 0; q, k, v 16-byte aligned and contiguous
// ([rows, heads, D]); the tensor maps were encoded for exactly these pointers and shapes.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/cuda_check.h"
#include "kernels/attention_kernels.h"
#include "kernels/mma.cuh"
#include "kernels/sm90a/hopper_ptx.cuh"

namespace opfuse::kernels::attn {

namespace {

constexpr int kWgBox = 64;                     // rows and head columns of one TMA box / wgmma tile
constexpr int kWgTile = kWgBox * kWgBox * 2;   // its bytes (f16 / bf16)
constexpr int kWgStages = 3;                   // K/V ring depth
constexpr int kWgThreads = 384;                // producer + two consumer warpgroups

using namespace sm90a;  // NOLINT: the PTX wrappers (hopper_ptx.cuh)

#define OPFUSE_WG_D32 \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define OPFUSE_WG_OUT32(d)                                                                                     \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),   \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),  \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// d (64 x 64 f32, 32 a thread) = / += A (smem) B (smem), both K-major; scale_d 0 overwrites d.
template <typename T>
__device__ __forceinline__ void WgmmaSS(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " OPFUSE_WG_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : OPFUSE_WG_OUT32(d)
        : "l"(da), "l"(db), "r"(scale_d));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " OPFUSE_WG_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : OPFUSE_WG_OUT32(d)
        : "l"(da), "l"(db), "r"(scale_d));
  }
}
// d += A (registers: the m16n8k16 A fragment of this warp's 16 rows) B (smem, N-major: transposed).
template <typename T>
__device__ __forceinline__ void WgmmaRS(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " OPFUSE_WG_D32
                 ", {%32,%33,%34,%35}, %36, 1, 1, 1, 1;\n"
                 : OPFUSE_WG_OUT32(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
  } else {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " OPFUSE_WG_D32
                 ", {%32,%33,%34,%35}, %36, 1, 1, 1, 1;\n"
                 : OPFUSE_WG_OUT32(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
  }
}
#undef OPFUSE_WG_D32
#undef OPFUSE_WG_OUT32


// 2^x on the SFU, denormal results flushed to zero (softmax weights that small are zero in the sum).
__device__ __forceinline__ float Ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A thread's 32 score accumulators: 8 chunks of 8 keys (chunk i: keys n0 + 8i + (lane % 4) * 2 + {0, 1},
// values {row, row, row + 8, row + 8}) for rows qrow and qrow + 8 of its warp.
// Scores of keys past S, above the causal diagonal, or below the row's window bound wlo -> -inf.
__device__ __forceinline__ void MaskScores(float (&s)[32], int n0, int lane, int qrow, int S, int off, int causal, int wlo) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int key = n0 + 8 * i + (lane & 3) * 2 + e;
      if (key >= S || (causal && key > qrow + off) || key < wlo) s[4 * i + e] = -INFINITY;
      if (key >= S || (causal && key > qrow + 8 + off) || key < wlo + 8) s[4 * i + 2 + e] = -INFINITY;
    }
}

// One online-softmax step: the row maxima over the raw scores (scale_log2 > 0) into mrow (log2 units),
// each weight 2^(s * scale_log2 - mu) in place, the row sums into lrow; alpha is the factor the
// accumulators are rescaled by.
__device__ __forceinline__ void SoftmaxStep(float (&s)[32], float (&mrow)[2], float (&lrow)[2], float scale_log2,
                                            float (&alpha)[2]) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    mx[0] = fmaxf(mx[0], fmaxf(s[4 * i], s[4 * i + 1]));
    mx[1] = fmaxf(mx[1], fmaxf(s[4 * i + 2], s[4 * i + 3]));
  }
  float mu[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float m_new = fmaxf(mrow[r], mx[r] * scale_log2);
    mu[r] = m_new == -INFINITY ? 0.f : m_new;  // a row that has seen no key yet: weights 0, never NaN
    alpha[r] = Ex2(mrow[r] - mu[r]);
    mrow[r] = m_new;
  }
  float rs[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
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

// o *= alpha row-wise, skipped when no row maximum of the warp moved (alpha exactly 1: exact).
template <int NB>
__device__ __forceinline__ void Rescale(float (&o)[NB][32], const float (&alpha)[2]) {
  if (!__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      o[b][4 * i] *= alpha[0];
      o[b][4 * i + 1] *= alpha[0];
      o[b][4 * i + 2] *= alpha[1];
      o[b][4 * i + 3] *= alpha[1];
    }
}

// Pins accumulator registers around a wgmma batch (no moves of them across it), as CUTLASS's
// warpgroup_fence_operand does.
__device__ __forceinline__ void FenceOperand(float (&d)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <typename T, int HD>
__global__ void __launch_bounds__(kWgThreads, 1) AttnWgmmaKernel(const __grid_constant__ WgmmaParams p) {
  constexpr int NB = HD / kWgBox, NS = kWgStages, BN = kWgBox, BM = 2 * kWgBox, TILE = kWgTile;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // 1024-byte aligned base (the swizzle atom), then Q (2 consumer tiles x NB boxes), the K stages, the
  // V stages (NB boxes each), the barriers.
  const uint32_t s0 = (Smem32(smem_raw) + 1023) & ~1023u;
  const uint32_t sQ = s0, sK = sQ + 2 * NB * TILE, sV = sK + NS * NB * TILE, bars = sV + NS * NB * TILE;
  // full: the TMA's bytes landed; empty: every consumer warp is done with the stage; ready: the producer
  // warp has zeroed a pass's last tile's V rows past S_b — consumers wait on it instead of full there.
  const uint32_t q_full = bars, q_empty = bars + 8, k_full = bars + 16, empty = k_full + 8 * NS, ready = empty + 8 * NS;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int h = blockIdx.y, kvh = h / p.group, b = blockIdx.z;
  const int S = p.pos ? min(p.S, max(0, __ldg(p.pos + b) + p.T)) : p.S;  // this sequence's keys
  const int off = S - p.T;
  const int qrow0 = b * p.T, krow0 = b * p.S;  // this sequence's first row in the 2-D maps
  if (tid == 0) {
    MbarInit(q_full, 1);
    MbarInit(q_empty, 8);  // the consumers' 8 warps
    for (int i = 0; i < NS; ++i) {
      MbarInit(k_full + 8 * i, 1);
      MbarInit(empty + 8 * i, 8);
    }
    MbarInit(ready, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int nq = (p.T + BM - 1) / BM, bx = static_cast<int>(blockIdx.x);
  const int npass = p.fold && 2 * bx + 1 < nq ? 2 : 1;
  int it = 0;     // K/V tiles through the ring so far (the same count in every role)
  int tails = 0;  // tiles released through `ready` so far (consumers)
  for (int pass = 0; pass < npass; ++pass) {
    const int mt = p.fold ? (pass == 0 ? nq - 1 - bx : bx) : p.causal ? static_cast<int>(gridDim.x) - 1 - bx : bx;
    const int m0 = mt * BM;
    const int kv_end = p.causal ? min(S, max(0, m0 + BM + off)) : S;
    // Tiles start at kv_begin (a window's lowest visible key for this block's first row), so older
    // keys are never loaded; it need not be 64-aligned.
    const int kv_begin = p.window > 0 && p.causal ? min(kv_end, max(0, m0 + off + 1 - p.window)) : 0;
    const int ntiles = (kv_end - kv_begin + BN - 1) / BN;
    const int win_lo_last = p.window > 0 && p.causal ? m0 + BM + off - p.window : INT_MIN;
    if (wg == 0) {  // producer: warp 0 (lane 0 issues the copies, the warp zeroes and releases)
      if (warp == 0) {
        if (pass) MbarWait(q_empty, (pass - 1) & 1);
        if (lane == 0) {
          MbarExpect(q_full, 2 * NB * TILE);
#pragma unroll
          for (int c = 0; c < 2; ++c)
#pragma unroll
            for (int bi = 0; bi < NB; ++bi)
              Tma2d(sQ + (c * NB + bi) * TILE, &p.mq, h * HD + bi * kWgBox, qrow0 + m0 + c * kWgBox, q_full);
        }
        for (int j = 0; j < ntiles; ++j, ++it) {
          const int st = it % NS, ph = (it / NS) & 1, t0 = kv_begin + j * BN;
          MbarWait(empty + 8 * st, ph ^ 1);  // a fresh barrier passes parity 1 at once
          if (lane == 0) {
            MbarExpect(k_full + 8 * st, 2 * NB * TILE);
#pragma unroll
            for (int bi = 0; bi < NB; ++bi) {
              Tma2d(sK + (st * NB + bi) * TILE, &p.mk, kvh * HD + bi * kWgBox, krow0 + t0, k_full + 8 * st);
              Tma2d(sV + (st * NB + bi) * TILE, &p.mv, kvh * HD + bi * kWgBox, krow0 + t0, k_full + 8 * st);
            }
          }
          __syncwarp();
          if (t0 + BN > S) {  // the pass's last tile reaches past S: zero those V rows, then release it
            MbarWait(k_full + 8 * st, ph);
            // A swizzled box keeps row r in bytes [128 r, 128 r + 128): zero 16-byte units from row S - t0.
            for (int bi = 0; bi < NB; ++bi)
              for (int i = (S - t0) * 8 + lane; i < BN * 8; i += 32)
                asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(sV + (st * NB + bi) * TILE + i * 16),
                             "r"(0)
                             : "memory");
            ProxyFence();  // generic stores -> wgmma's reads
            __syncwarp();
            if (lane == 0) MbarArrive(ready);
          }
        }
      } else {
        it += ntiles;
      }
      continue;
    }
    // Consumers: warpgroup c = wg - 1 owns rows m0 + 64 c ..; this warp rows wrow0 .. wrow0 + 15.
    const int c = wg - 1, g0 = m0 + kWgBox * c, glast = min(g0 + kWgBox, p.T) - 1, wrow0 = g0 + warp * 16;
    const uint32_t sq = sQ + c * NB * TILE;
    MbarWait(q_full, pass & 1);
    float o[NB][32], mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
#pragma unroll
    for (int bi = 0; bi < NB; ++bi)
#pragma unroll
      for (int i = 0; i < 32; ++i) o[bi][i] = 0.f;
    for (int j = 0; j < ntiles; ++j, ++it) {
      const int st = it % NS, ph = (it / NS) & 1, n0 = kv_begin + j * BN;
      if (n0 + BN > S)
        MbarWait(ready, tails++ & 1);  // the producer zeroed its V rows past S
      else
        MbarWait(k_full + 8 * st, ph);
      if (g0 <= glast && !(p.causal && n0 > glast + off)) {  // warpgroup-uniform: a row here sees a key
        float s[32];
        WgFence();
#pragma unroll
        for (int bi = 0; bi < NB; ++bi)
#pragma unroll
          for (int kk = 0; kk < kWgBox / 16; ++kk)
            WgmmaSS<T>(s, DescSw128(sq + bi * TILE + kk * 32, 16, 1024),
                       DescSw128(sK + (st * NB + bi) * TILE + kk * 32, 16, 1024), bi > 0 || kk > 0);
        WgCommit();
        WgWait0();
        if (n0 + BN > S || (p.causal && n0 + BN - 1 > wrow0 + off) || n0 < win_lo_last) {
          const int qrow = wrow0 + lane / 4;
          const int wlo = p.window > 0 && p.causal ? qrow + off + 1 - p.window : INT_MIN;
          MaskScores(s, n0, lane, qrow, S, off, p.causal, wlo);
        }
        float alpha[2];
        SoftmaxStep(s, mrow, lrow, p.scale_log2, alpha);
        Rescale<NB>(o, alpha);
        // P's A fragments (the mma.sync m16n8k16 layout) for keys 16 kk .. 16 kk + 15.
        uint32_t a[4][4];
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const float* t = s + 8 * kk;
          a[kk][0] = Pack2<T>(t[0], t[1]);
          a[kk][1] = Pack2<T>(t[2], t[3]);
          a[kk][2] = Pack2<T>(t[4], t[5]);
          a[kk][3] = Pack2<T>(t[6], t[7]);
        }
#pragma unroll
        for (int bi = 0; bi < NB; ++bi) FenceOperand(o[bi]);
        WgFence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
          for (int bi = 0; bi < NB; ++bi)
            WgmmaRS<T>(o[bi], a[kk], DescSw128(sV + (st * NB + bi) * TILE + kk * 2048, 16, 1024));
        WgCommit();
        WgWait0();
#pragma unroll
        for (int bi = 0; bi < NB; ++bi) FenceOperand(o[bi]);
      }
      if (lane == 0) MbarArrive(empty + 8 * st);  // this warp is done with the stage
    }
    if (lane == 0) MbarArrive(q_empty);  // Q's buffer is free for the next pass
    // The normalised rows wrow0 + lane / 4 (+ 8) below T.
    const int64_t q_stride = static_cast<int64_t>(p.Hq) * HD;
    T* const orow = static_cast<T*>(p.o) + static_cast<int64_t>(qrow0) * q_stride + static_cast<int64_t>(h) * HD;
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = lrow[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      inv[r] = l > 0.f ? 1.f / l : 0.f;  // a row that saw no key is zeros
    }
    const int row = wrow0 + lane / 4;
#pragma unroll
    for (int bi = 0; bi < NB; ++bi)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int col = bi * kWgBox + 8 * i + (lane & 3) * 2;
        if (row < p.T)
          *reinterpret_cast<uint32_t*>(orow + static_cast<int64_t>(row) * q_stride + col) =
              Pack2<T>(o[bi][4 * i] * inv[0], o[bi][4 * i + 1] * inv[0]);
        if (row + 8 < p.T)
          *reinterpret_cast<uint32_t*>(orow + static_cast<int64_t>(row + 8) * q_stride + col) =
              Pack2<T>(o[bi][4 * i + 2] * inv[1], o[bi][4 * i + 3] * inv[1]);
      }
  }
}

constexpr size_t SmemBytes(int hd) {
  // alignment slack, Q (2 tiles), K and V stages (hd / 64 boxes each), barriers
  return 1024 + static_cast<size_t>(2 + 2 * kWgStages) * (hd / kWgBox) * kWgTile + 256;
}

// cuTensorMapEncodeTiled from the driver (no libcuda link: the runtime hands out the entry point);
// nullptr where no driver is installed.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiledFn EncodeTiled() {
  static const EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

// A [rows][cols] f16/bf16 row-major tensor as 64 x 64 boxes, 128-byte swizzle, zeros outside it.
Status EncodeMap(CUtensorMap* m, DType t, const void* base, int64_t cols, int64_t rows, const char* what) {
  const EncodeTiledFn encode = EncodeTiled();
  if (encode == nullptr) return Unavailable("attention: cuTensorMapEncodeTiled is not available (no CUDA driver)");
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {kWgBox, kWgBox}, elem[2] = {1, 1};
  const CUresult r = encode(m, t == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
                            const_cast<void*>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Internal(fmt::format("attention: cuTensorMapEncodeTiled failed for {} ({} x {}): CUresult {}", what, rows,
                                cols, static_cast<int>(r)));
  return Status::Ok();
}

template <typename T, int HD>
WgmmaInstance InstanceOf() {
  return {AttnWgmmaKernel<T, HD>, 2 * kWgBox, kWgThreads, static_cast<int>(SmemBytes(HD)), 1};
}

}  // namespace

StatusOr<WgmmaInstance> WgmmaInstanceFor(DType t, int64_t hd) {
  if ((t != DType::kBF16 && t != DType::kF16) || (hd != 64 && hd != 128))
    return Internal(fmt::format("attention: no Hopper tensor-core kernel for {} head_dim {}", DTypeName(t), hd));
  WgmmaInstance k = t == DType::kBF16 ? (hd == 64 ? InstanceOf<__nv_bfloat16, 64>() : InstanceOf<__nv_bfloat16, 128>())
                                      : (hd == 64 ? InstanceOf<__half, 64>() : InstanceOf<__half, 128>());
  const void* fn = reinterpret_cast<const void*>(k.fn);
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, k.smem_bytes);
  int occ = 0;
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k.fn, k.threads, static_cast<size_t>(k.smem_bytes));
  // Host-only planning (no device, or planning for a cc 9.0 target on another GPU, which has no image
  // of this kernel): the launch bounds' occupancy.
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorNoKernelImageForDevice ||
      e == cudaErrorInvalidDeviceFunction) {
    cudaGetLastError();
    return k;
  }
  OPFUSE_RETURN_IF_ERROR(cuda::CudaStatus(e, "attention: Hopper tensor-core kernel shared memory / occupancy"));
  if (occ < 1) return Internal("attention: the Hopper tensor-core block does not fit on this device");
  k.blocks_per_sm = occ;
  return k;
}

Status MakeWgmmaParams(const Dims& d, const Ptrs& ptr, bool causal, float scale_log2, bool fold, WgmmaParams* p) {
  *p = WgmmaParams{};
  p->o = ptr.o;
  p->T = static_cast<int>(d.T);
  p->S = static_cast<int>(d.S);
  p->Hq = static_cast<int>(d.Hq);
  p->Hkv = static_cast<int>(d.Hkv);
  p->group = static_cast<int>(d.group);
  p->causal = causal ? 1 : 0;
  p->scale_log2 = scale_log2;
  p->pos = ptr.pos;
  p->window = static_cast<int>(d.window);
  p->fold = fold ? 1 : 0;
  if (ptr.q == nullptr || ptr.k == nullptr || ptr.v == nullptr) return Status::Ok();  // sizing only: no maps
  const int64_t rows_q = d.B * d.T, rows_kv = d.B * d.S;
  OPFUSE_RETURN_IF_ERROR(EncodeMap(&p->mq, d.dtype, ptr.q, d.Hq * d.D, rows_q, "q"));
  OPFUSE_RETURN_IF_ERROR(EncodeMap(&p->mk, d.dtype, ptr.k, d.Hkv * d.D, rows_kv, "k"));
  OPFUSE_RETURN_IF_ERROR(EncodeMap(&p->mv, d.dtype, ptr.v, d.Hkv * d.D, rows_kv, "v"));
  return Status::Ok();
}

}  // namespace opfuse::kernels::attn
