// wgmma_tile: scratch probe (dev/, not part of the build) for the first building block of an
// FA3-class prefill attention kernel (issue 32): one warpgroup computes a 64 x 64 score tile
// S = Q K^T with wgmma.mma_async (both operands from shared memory, K-major, no swizzle) and a
// 64 x 64 output tile O = P V (P from registers in the mma.sync A-fragment layout, V from shared
// memory, N-major, transposed by the instruction). Question it answers: the shared-memory layout and
// the descriptor fields (leading / stride byte offsets of the core matrices) that give the right
// product — every candidate assignment is run and checked against a CPU reference, so one device
// call tells which one holds.
//
// Layouts in shared memory (bf16, core matrix = 8 rows x 16 contiguous bytes):
//   Q, K (K-major: head_dim contiguous): element (r, k) at (r/8)*1024 + (k/8)*128 + (r%8)*16 + (k%8)*2
//   V (N-major: head_dim contiguous, keys are the reduction): element (key, d) at
//     (d/8)*128 + (key/8)*1024 + (key%8)*16 + (d%8)*2
// Descriptor: start address >> 4 (bits 0-13), leading byte offset >> 4 (16-29), stride byte offset
// >> 4 (32-45), swizzle none (62-63 = 0).
//
// Answer (H200, both checked against the CPU reference, max |err| ~1e-6): with no swizzle the leading
// byte offset is the distance between core matrices adjacent along K (the reduction dimension) and
// the stride byte offset the distance along M/N, for the K-major operands (Q, K: LBO 128, SBO 1024)
// and for the transposed N-major V (LBO 1024, SBO 128) alike; P in registers takes the mma.sync
// m16n8k16 A-fragment layout, and the accumulators come back in the m16n8 C layout per warp (rows
// warp*16 + lane/4 and + 8). The other assignments give wrong products, or fault when the offsets
// reach past the tile (so run one candidate a process: argv mode lbo sbo). wgmma needs sm_90a code.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a dev/wgmma_tile/wgmma_tile.cu -o build/wgmma_tile
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "../wgmma_common.cuh"

namespace {

constexpr int N = 64;  // rows, keys, head_dim

// S = Q K^T (mode 0) or O = P V with P = bf16(Q as a 64x64 matrix of weights) (mode 1); out [64][64] f32.
__global__ void TileKernel(const __nv_bfloat16* q, const __nv_bfloat16* kv, float* out, int mode, uint32_t lbo,
                           uint32_t sbo) {
  __shared__ __align__(1024) __nv_bfloat16 sA[N * N];
  __shared__ __align__(1024) __nv_bfloat16 sB[N * N];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int i = tid; i < N * N; i += 128) {
    const int r = i / N, k = i % N;
    sA[((r / 8) * 1024 + (k / 8) * 128 + (r % 8) * 16 + (k % 8) * 2) / 2] = q[i];
    if (mode == 0)
      sB[((r / 8) * 1024 + (k / 8) * 128 + (r % 8) * 16 + (k % 8) * 2) / 2] = kv[i];  // K[key r][d k]
    else
      sB[((k / 8) * 128 + (r / 8) * 1024 + (r % 8) * 16 + (k % 8) * 2) / 2] = kv[i];  // V[key r][d k]
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  WgFence();
  if (mode == 0) {
    for (int kk = 0; kk < N / 16; ++kk)  // 16 of head_dim a step = two core matrices along K
      WgmmaSS(d, Desc(Smem32(sA + kk * 128), lbo, sbo), Desc(Smem32(sB + kk * 128), lbo, sbo));
  } else {
    // P's A fragment for keys 16*kk..+15 of this warp's rows w*16 + g, + 8 (g = lane / 4):
    // a0 = (g, 2c..2c+1), a1 = (g+8, 2c..), a2 = (g, 2c+8..), a3 = (g+8, 2c+8..), c = lane % 4.
    const int g = lane / 4, c = lane % 4, r0 = warp * 16 + g;
    for (int kk = 0; kk < N / 16; ++kk) {
      auto P = [&](int r, int k) { return __bfloat162float(q[r * N + k]); };
      const int k0 = kk * 16 + 2 * c;
      const uint32_t a[4] = {PackBf16(P(r0, k0), P(r0, k0 + 1)), PackBf16(P(r0 + 8, k0), P(r0 + 8, k0 + 1)),
                             PackBf16(P(r0, k0 + 8), P(r0, k0 + 9)), PackBf16(P(r0 + 8, k0 + 8), P(r0 + 8, k0 + 9))};
      WgmmaRS(d, a, Desc(Smem32(sB + kk * 16 * 8 * 8), lbo, sbo));  // keys 16*kk: two 8-key core rows (2 x 1024 B)
    }
  }
  WgCommit();
  WgWait0();
  // Accumulator layout: row w*16 + lane/4 (+8 for d[4i+2..3]), col 8i + (lane%4)*2 (+1).
  const int row = warp * 16 + lane / 4;
  for (int i = 0; i < N / 8; ++i) {
    const int col = 8 * i + (lane % 4) * 2;
    out[row * N + col] = d[4 * i];
    out[row * N + col + 1] = d[4 * i + 1];
    out[(row + 8) * N + col] = d[4 * i + 2];
    out[(row + 8) * N + col + 1] = d[4 * i + 3];
  }
}

}  // namespace

int main(int argc, char** argv) {
  // argv: [mode lbo sbo] to run one candidate (a wrong one can fault and poison the context).
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<__nv_bfloat16> hq(N * N), hk(N * N);
  for (auto& x : hq) x = __float2bfloat16(u(rng));
  for (auto& x : hk) x = __float2bfloat16(u(rng));
  __nv_bfloat16 *q, *k;
  float* o;
  CK(cudaMalloc(&q, N * N * 2));
  CK(cudaMalloc(&k, N * N * 2));
  CK(cudaMalloc(&o, N * N * 4));
  CK(cudaMemcpy(q, hq.data(), N * N * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(k, hk.data(), N * N * 2, cudaMemcpyHostToDevice));
  auto f = [](__nv_bfloat16 x) { return double(__bfloat162float(x)); };
  std::vector<double> s_ref(N * N), o_ref(N * N);
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < N; ++c) {
      double a = 0, b = 0;
      for (int i = 0; i < N; ++i) {
        a += f(hq[r * N + i]) * f(hk[c * N + i]);  // S[r][key c] = sum_d Q[r][d] K[c][d]
        b += f(hq[r * N + i]) * f(hk[i * N + c]);  // O[r][d c] = sum_key P[r][key] V[key][c]
      }
      s_ref[r * N + c] = a;
      o_ref[r * N + c] = b;
    }
  std::vector<std::array<uint32_t, 3>> cand = {{0, 128, 1024}, {1, 1024, 128}};  // the assignments that hold
  if (argc == 4) cand = {{uint32_t(std::atoi(argv[1])), uint32_t(std::atoi(argv[2])), uint32_t(std::atoi(argv[3]))}};
  int good = 0;
  for (const auto& mc : cand) {
      const int mode = int(mc[0]);
      const uint32_t c[2] = {mc[1], mc[2]};
      CK(cudaMemset(o, 0xFF, N * N * 4));
      TileKernel<<<1, 128>>>(q, k, o, mode, c[0], c[1]);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      std::vector<float> h(N * N);
      CK(cudaMemcpy(h.data(), o, N * N * 4, cudaMemcpyDeviceToHost));
      double err = 0;
      for (int i = 0; i < N * N; ++i) {
        const double e = std::fabs(h[i] - (mode ? o_ref[i] : s_ref[i]));
        err = std::isnan(e) ? INFINITY : std::max(err, e);
      }
      const bool ok = err < 1e-2;
      good += ok;
      std::printf("%s lbo %4u sbo %4u: max|err| %.3g %s\n", mode ? "PV (RS, B transposed)" : "QK^T (SS)        ", c[0],
                  c[1], err, ok ? "OK" : "");
    }
  std::printf("%d candidate(s) correct\n", good);
  return good ? 0 : 1;
}
