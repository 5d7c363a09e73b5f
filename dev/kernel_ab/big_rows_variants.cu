// Row-kernel shapes for rms_norm bf16 at 16384 x 2048 (session 12, issue 4): the JIT prefill function
// (t64x4, 2 rows per block) reaches 88 % of the 1 GiB copy event-timed, 95 % in place; softmax on the
// same bytes (t128x2) is 0.6 us faster in place. Same body as the emitted kernel (emitter v7), shape
// as template parameters, plus a plain 16-byte copy of the same bytes (the in-place ceiling at this
// size). Arguments (x, w, y, rows) for the rms_rows variants (rows % RPB == 0), (x, w, y) for
// rms_t128x2_2r (16384 rows), (x, y, n) for the copies.
// Build: bash dev/kernel_ab/build_variant.sh dev/kernel_ab/big_rows_variants.cu build/kab/big_rows.cubin
//   rms_t64x4_r2   the emitted shape: 64 threads x 4 vectors per row, 2 rows per block (grid R / 2)
//   rms_t128x2     softmax's shape: 128 threads x 2 vectors, 1 row per block (grid R)
//   rms_t128x2_r2  the same, 2 rows per 256-thread block (grid R / 2)
//   rms_t256x1     256 threads x 1 vector (grid R)
//   rms_t32x8_r4   one warp per row, 8 vectors each, 4 rows per block (grid R / 4)
//   rms_t64x4      64-thread blocks, one row each; rms_t64x4_r4: 4 rows per 256-thread block
//   rms_t64x4_r2_{ef,nc,l2p,cs}  the emitted shape with evict-first row loads, ld.global.nc.L1::no_allocate,
//                  ld.global.L2::256B (prefetch hint), or st.global.cs stores; rms_t32x8_r2: a warp per row, 2 rows per block
//   (the same kernels on a persistent grid: fewer blocks than rows, the row loop walks the rest)
//   rms_t128x2_2r  128 threads x 2 vectors, each block two rows in turn with both rows' loads issued
//                  first (16 rows' worth of loads in flight per warp pair; grid R / 2)
//   copy_v1        16-byte copy, one vector per thread (grid n / 8 / 256, blocks of 256)
//   copy_v2        two vectors per thread, half the grid apart
constexpr int kC = 2048;

template <int TPR, int VPT, int RPB, int LOAD = 0, bool CS = false>
__device__ __forceinline__ void rms_rows(const fz_bf16* __restrict__ in0, const fz_bf16* __restrict__ in1,
                                         fz_bf16* __restrict__ out0, int rows) {
  const long long C = kC, R = rows;
  const int g = threadIdx.x / TPR, t = threadIdx.x - g * TPR;
  fz_pack<fz_bf16, 8> wr1[VPT];
#pragma unroll
  for (int it = 0; it < VPT; ++it) wr1[it].load(in1, ((long long)it * TPR + t) * 8);
  __shared__ float smem[64];
  int phase = 0;
  const unsigned long long pol = fz_evict_first();
  for (long long r0 = (long long)blockIdx.x * RPB; r0 < R; r0 += (long long)gridDim.x * RPB) {
    const long long r = r0 + g;  // R % RPB == 0
    fz_pack<fz_bf16, 8> xr0[VPT];
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const fz_bf16* p = in0 + r * C + ((long long)it * TPR + t) * 8;
      if constexpr (LOAD == 1) xr0[it].load_ef(p, 0, pol);
      else if constexpr (LOAD == 2)
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(xr0[it].w[0]), "=r"(xr0[it].w[1]), "=r"(xr0[it].w[2]), "=r"(xr0[it].w[3]) : "l"(p));
      else if constexpr (LOAD == 3)
        asm volatile("ld.global.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(xr0[it].w[0]), "=r"(xr0[it].w[1]), "=r"(xr0[it].w[2]), "=r"(xr0[it].w[3]) : "l"(p));
      else xr0[it].load(p, 0);
    }
    float acc = 0.0f;
#pragma unroll
    for (int it = 0; it < VPT; ++it)
#pragma unroll
      for (int j = 0; j < 8; ++j) { const float e = xr0[it].get(j); acc += e * e; }
    acc = fz_row_reduce<TPR, false>(acc, smem, phase);
    const float inv = rsqrtf(acc / (float)C + 1e-05f);
#pragma unroll
    for (int it = 0; it < VPT; ++it) xr0[it].launder();
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      float o[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = (xr0[it].get(j) * inv) * wr1[it].get(j);
      fz_bf16* q = out0 + r * C + ((long long)it * TPR + t) * 8;
      if constexpr (CS) {
        unsigned u[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) u[k] = fz_cvt2<fz_bf16>::pack(o[2 * k], o[2 * k + 1]);
        asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(q), "r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3]) : "memory");
      } else {
        fz_store<8, fz_bf16>(q, 0, o);
      }
    }
  }
}

#define RMS(name, TPR, VPT, RPB, ...)                                                                        \
  extern "C" __global__ void __launch_bounds__(TPR * RPB) name(const fz_bf16* __restrict__ x,                 \
                                                               const fz_bf16* __restrict__ w, fz_bf16* __restrict__ y, \
                                                               int rows) {                                   \
    rms_rows<TPR, VPT, RPB __VA_OPT__(,) __VA_ARGS__>(x, w, y, rows);                                          \
  }
RMS(rms_t64x4_r2, 64, 4, 2)
RMS(rms_t128x2, 128, 2, 1)
RMS(rms_t128x2_r2, 128, 2, 2)
RMS(rms_t256x1, 256, 1, 1)
RMS(rms_t32x8_r4, 32, 8, 4)
RMS(rms_t64x4, 64, 4, 1)
RMS(rms_t64x4_r4, 64, 4, 4)
RMS(rms_t64x4_r2_ef, 64, 4, 2, 1)
RMS(rms_t64x4_r2_nc, 64, 4, 2, 2)
RMS(rms_t64x4_r2_l2p, 64, 4, 2, 3)
RMS(rms_t64x4_r2_cs, 64, 4, 2, 0, true)
RMS(rms_t32x8_r2, 32, 8, 2)
RMS(rms_t32x8_r1, 32, 8, 1)

extern "C" __global__ void __launch_bounds__(128) rms_t128x2_2r(const fz_bf16* __restrict__ in0, const fz_bf16* __restrict__ in1,
                                                                fz_bf16* __restrict__ out0) {
  constexpr int TPR = 128, VPT = 2;
  const long long C = kC;
  const int t = threadIdx.x;
  fz_pack<fz_bf16, 8> wr[VPT];
#pragma unroll
  for (int it = 0; it < VPT; ++it) wr[it].load(in1, ((long long)it * TPR + t) * 8);
  __shared__ float smem[64];
  int phase = 0;
  const long long ra = 2LL * blockIdx.x, rb = ra + 1;
  fz_pack<fz_bf16, 8> xa[VPT], xb[VPT];
#pragma unroll
  for (int it = 0; it < VPT; ++it) xa[it].load(in0, ra * C + ((long long)it * TPR + t) * 8);
#pragma unroll
  for (int it = 0; it < VPT; ++it) xb[it].load(in0, rb * C + ((long long)it * TPR + t) * 8);
  float sa = 0.0f, sb = 0.0f;
#pragma unroll
  for (int it = 0; it < VPT; ++it)
#pragma unroll
    for (int j = 0; j < 8; ++j) { const float e = xa[it].get(j); sa += e * e; }
  sa = fz_row_reduce<TPR, false>(sa, smem, phase);
  const float ia = rsqrtf(sa / (float)C + 1e-05f);
#pragma unroll
  for (int it = 0; it < VPT; ++it) {
    float o[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = (xa[it].get(j) * ia) * wr[it].get(j);
    fz_store<8, fz_bf16>(out0, ra * C + ((long long)it * TPR + t) * 8, o);
  }
#pragma unroll
  for (int it = 0; it < VPT; ++it)
#pragma unroll
    for (int j = 0; j < 8; ++j) { const float e = xb[it].get(j); sb += e * e; }
  sb = fz_row_reduce<TPR, false>(sb, smem, phase);
  const float ib = rsqrtf(sb / (float)C + 1e-05f);
#pragma unroll
  for (int it = 0; it < VPT; ++it) {
    float o[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = (xb[it].get(j) * ib) * wr[it].get(j);
    fz_store<8, fz_bf16>(out0, rb * C + ((long long)it * TPR + t) * 8, o);
  }
}

extern "C" __global__ void __launch_bounds__(256) copy_v1(const uint4* __restrict__ x, uint4* __restrict__ y, int n) {
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v < n / 8) y[v] = x[v];
}
extern "C" __global__ void __launch_bounds__(256) copy_v2(const uint4* __restrict__ x, uint4* __restrict__ y, int n) {
  const int half = n / 16, v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v < half) {
    const uint4 a = x[v], b = x[v + half];
    y[v] = a;
    y[v + half] = b;
  }
}
// bench ops' copy (src/bench/cuda/bench_kernels.cu Copy16Kernel): grid-stride, 4 vectors in flight per
// thread; launched there on 8 x SMs blocks of 256 (the 1 GiB ceiling and the same-size copy).
extern "C" __global__ void __launch_bounds__(256) copy_p4(const uint4* __restrict__ src, uint4* __restrict__ dst, int n8) {
  const long long n = n8 / 8;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}
