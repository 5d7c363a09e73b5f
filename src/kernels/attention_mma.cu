// The tensor-core (mma.sync) flash-attention kernel; what it computes and when it runs:
// src/kernels/attention.cu (the planners) and attention.h.
#include <cmath>
#include <cstdint>

#include "kernels/attention_device.cuh"
#include "kernels/attention_kernels.h"
#include "kernels/mma.cuh"

namespace opfuse::kernels::attn {

namespace {

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}

// 2^x on the SFU, denormal results flushed to zero (softmax weights that small are zero in the sum).
__device__ __forceinline__ float Ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// One block: 4 warps, 64 query rows (16 a warp) against 64-key K and V tiles in shared memory (K of the
// next tile loaded during the softmax, V during Q K^T); registers are left to the compiler. The kernel
// is latency-bound, and the alternatives measured against it did not pay at the model's prefill
// lengths: a register cap for more blocks a SM (spills), two 16-row tiles a warp (half the blocks),
// 128-key tiles (docs/BENCHMARKS.md, "Prefill: TFLOP/s against the GEMM ceiling").
template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) AttnMmaKernel(MmaParams p) {
  constexpr int BM = 64, BN = 64;  // query rows / keys per tile
  constexpr int LD = HD + 8;       // padded shared row (elements): 16-byte shift per row
  constexpr int CPR = HD / 8;      // 16-byte chunks per row
  static_assert(BM * CPR % kThreads == 0 && BM == BN, "tile loader assumes this");
  __shared__ __align__(16) T sK[BN * LD];
  __shared__ __align__(16) T sV[BN * LD];  // holds the Q tile before the first V tile
  const T* tp = nullptr;                   // tag for the dtype overloads

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int mt = p.causal ? static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x) : blockIdx.x;
  const int m0 = mt * BM;
  const int h = blockIdx.y, kvh = h / p.group, b = blockIdx.z;
  const int S = p.pos ? min(p.S, max(0, __ldg(p.pos + b) + p.T)) : p.S;  // this sequence's keys
  const int off = S - p.T;
  const int64_t q_stride = static_cast<int64_t>(p.Hq) * HD, kv_stride = static_cast<int64_t>(p.Hkv) * HD;
  const int64_t q_off = static_cast<int64_t>(b) * p.T * q_stride;  // sequence b's first query row
  const T* qbase = static_cast<const T*>(p.q) + q_off + static_cast<int64_t>(h) * HD;
  const int64_t kv_off = static_cast<int64_t>(b) * p.S * kv_stride + static_cast<int64_t>(kvh) * HD;
  const T* kbase = static_cast<const T*>(p.k) + kv_off;
  const T* vbase = static_cast<const T*>(p.v) + kv_off;
  const int kv_end = p.causal ? min(S, max(0, m0 + BM + off)) : S;  // keys any row here sees
  const int ntiles = (kv_end + BN - 1) / BN;
  // With a window, keys below kv_begin (the first row's lower bound) are seen by no row here: the
  // tiles start at the one holding kv_begin, and its rows below kv_begin are zero-filled, never read.
  const int kv_begin = p.window > 0 && p.causal ? max(0, m0 + off + 1 - p.window) : 0;
  const int j0 = kv_begin / BN;
  const int win_lo_last = p.window > 0 && p.causal ? m0 + BM + off - p.window : INT_MIN;  // last row's bound

  // rows [row0, row0 + 64) of a [rows, heads, HD] tensor -> padded shared tile; rows outside
  // [first, nrows) -> 0.
  auto load_tile = [&](T* dst, const T* base, int64_t stride, int row0, int nrows, int first) {
#pragma unroll
    for (int i = 0; i < BM * CPR / kThreads; ++i) {
      const int idx = tid + i * kThreads;
      const int r = idx / CPR, c = idx - (idx / CPR) * CPR;
      const bool ok = row0 + r < nrows && row0 + r >= first;
      const T* src = ok ? base + static_cast<int64_t>(row0 + r) * stride + c * 8 : base;
      CpAsync16(dst + r * LD + c * 8, src, ok ? 16 : 0);
    }
  };

  load_tile(sV, qbase, q_stride, m0, p.T, 0);
  CpAsyncCommit();
  if (j0 < ntiles) load_tile(sK, kbase, kv_stride, j0 * BN, S, kv_begin);
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();
  // Q fragments (A operand, 16 rows x HD) of this warp: matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15).
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int kc = 0; kc < HD / 16; ++kc)
    LdMatrixX4(qf[kc], sV + (warp * 16 + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8);
  __syncthreads();  // the Q tile's buffer becomes the V buffer

  float oacc[HD / 8][4];
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) oacc[dt][0] = oacc[dt][1] = oacc[dt][2] = oacc[dt][3] = 0.f;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};  // rows g and g + 8 of the warp
  const int qrow = m0 + warp * 16 + (lane >> 2);                  // query row of c0/c1 (c2/c3: +8)

  for (int j = j0; j < ntiles; ++j) {
    const int n0 = j * BN;
    load_tile(sV, vbase, kv_stride, n0, S, kv_begin);
    CpAsyncCommit();
    CpAsyncWait<1>();  // K tile j has landed (V tile j may be in flight)
    __syncthreads();

    // S = Q K^T: 16 x 64 per warp, 8 n-tiles of 8 keys.
    float sacc[BN / 8][4];
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < HD / 16; ++kc) {
#pragma unroll
      for (int ntp = 0; ntp < BN / 16; ++ntp) {
        // matrices: (keys 0-7, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 0-7), (keys 8-15, d 8-15)
        uint32_t b[4];
        LdMatrixX4(b, sK + (ntp * 16 + ((lane >> 4) << 3) + (lane & 7)) * LD + kc * 16 + ((lane >> 3) & 1) * 8);
        Mma(sacc[2 * ntp], qf[kc], b[0], b[1], tp);
        Mma(sacc[2 * ntp + 1], qf[kc], b[2], b[3], tp);
      }
    }
    __syncthreads();  // every warp is done with sK
    if (j + 1 < ntiles) load_tile(sK, kbase, kv_stride, n0 + BN, S, kv_begin);
    CpAsyncCommit();  // (possibly empty) group, so the wait counts below stay uniform

    // Online softmax in the log2 domain (scale_log2 > 0, the planner's condition): the maximum is
    // taken over the raw scores, and each weight is 2^(s * scale_log2 - mu) in one FMA and one ex2.
    // Masking is needed only on the tile past S, crossing the causal diagonal of this block's first
    // row, or (window) below the last row's lower bound.
    const bool need_mask = (n0 + BN > S) || (p.causal && n0 + BN - 1 > m0 + off) || n0 < win_lo_last;
    const int wlo = p.window > 0 && p.causal ? qrow + off + 1 - p.window : INT_MIN;  // row qrow's bound
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float s0 = sacc[nt][e], s1 = sacc[nt][2 + e];
        if (need_mask) {
          const int key = n0 + nt * 8 + (lane & 3) * 2 + e;
          if (key >= S || (p.causal && key > qrow + off) || key < wlo) s0 = -INFINITY;
          if (key >= S || (p.causal && key > qrow + 8 + off) || key < wlo + 8) s1 = -INFINITY;
        }
        sacc[nt][e] = s0;
        sacc[nt][2 + e] = s1;
        mx[0] = fmaxf(mx[0], s0);
        mx[1] = fmaxf(mx[1], s1);
      }
    }
    float mu[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(mrow[r], mx[r] * p.scale_log2);
      mu[r] = m_new == -INFINITY ? 0.f : m_new;
      alpha[r] = Ex2(mrow[r] - mu[r]);
      mrow[r] = m_new;
    }
    float rs[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        sacc[nt][e] = Ex2(fmaf(sacc[nt][e], p.scale_log2, -mu[0]));
        sacc[nt][2 + e] = Ex2(fmaf(sacc[nt][2 + e], p.scale_log2, -mu[1]));
        rs[0] += sacc[nt][e];
        rs[1] += sacc[nt][2 + e];
      }
    }
    lrow[0] = lrow[0] * alpha[0] + rs[0];  // per-thread partial sums; the quad is summed at the end
    lrow[1] = lrow[1] * alpha[1] + rs[1];
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) {
      oacc[dt][0] *= alpha[0];
      oacc[dt][1] *= alpha[0];
      oacc[dt][2] *= alpha[1];
      oacc[dt][3] *= alpha[1];
    }

    CpAsyncWait<1>();  // V tile j has landed (K tile j + 1 may be in flight)
    __syncthreads();
    // O += P V: P's accumulators are the A fragments (keys 16*kc2 .. +15); V via ldmatrix.trans.
#pragma unroll
    for (int kc2 = 0; kc2 < BN / 16; ++kc2) {
      uint32_t a[4];
      a[0] = Pack2<T>(sacc[2 * kc2][0], sacc[2 * kc2][1]);
      a[1] = Pack2<T>(sacc[2 * kc2][2], sacc[2 * kc2][3]);
      a[2] = Pack2<T>(sacc[2 * kc2 + 1][0], sacc[2 * kc2 + 1][1]);
      a[3] = Pack2<T>(sacc[2 * kc2 + 1][2], sacc[2 * kc2 + 1][3]);
#pragma unroll
      for (int dtp = 0; dtp < HD / 16; ++dtp) {
        // matrices: (keys 0-7, d 0-7), (keys 8-15, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 8-15)
        uint32_t b[4];
        LdMatrixX4Trans(b, sV + (kc2 * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + dtp * 16 + (lane >> 4) * 8);
        Mma(oacc[2 * dtp], a, b[0], b[1], tp);
        Mma(oacc[2 * dtp + 1], a, b[2], b[3], tp);
      }
    }
    __syncthreads();  // every warp is done with sV before the next V tile lands in it
  }
  CpAsyncWait<0>();  // nothing is outstanding here; keeps the exit clean regardless

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
    lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
    inv[r] = lrow[r] > 0.f ? 1.f / lrow[r] : 0.f;
  }
  T* o = static_cast<T*>(p.o);
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) {
    const int col = dt * 8 + (lane & 3) * 2;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = qrow + 8 * r;
      if (row < p.T) {
        const uint32_t packed = Pack2<T>(oacc[dt][2 * r] * inv[r], oacc[dt][2 * r + 1] * inv[r]);
        *reinterpret_cast<uint32_t*>(o + q_off + (static_cast<int64_t>(row) * p.Hq + h) * HD + col) = packed;
      }
    }
  }
}

}  // namespace

MmaFn PickMma(DType t, int64_t hd) {
  if (t == DType::kBF16) return hd == 64 ? AttnMmaKernel<__nv_bfloat16, 64> : AttnMmaKernel<__nv_bfloat16, 128>;
  return hd == 64 ? AttnMmaKernel<__half, 64> : AttnMmaKernel<__half, 128>;
}

}  // namespace opfuse::kernels::attn
