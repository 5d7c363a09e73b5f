// opfuse generated kernel fz_add_rms_norm_bf16_h4096_v8
// fuses: add_rms_norm(x, residual, weight)
// emitter v6; iteration space [T, 4096] (row kernel, row held in registers), 1 pass, vec 8
// prefill fz_add_rms_norm_bf16_h4096_v8: 256 threads x 2 vectors per row, 1 rows per block; decode fz_add_rms_norm_bf16_h4096_v8_decode: 512 threads x 2 vectors of 4, 1 rows per block
//   in0  x bf16[T, 4096] [full]
//   in1  residual bf16[T, 4096] [full]
//   in2  weight bf16[4096] [channel]
//   out0 y bf16[T, 4096] [full]
//   out1 h bf16[T, 4096] [full]
// (the emitter's preamble goes in front: bash dev/kernel_ab/build_variant.sh THIS_FILE OUT.cubin)
#define KEEP 0
#define WLATE 1
#define WSRC wl
extern "C" __global__ void __launch_bounds__(512) h7_wl(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    const fz_bf16* __restrict__ in2,
    fz_bf16* __restrict__ out0,
    fz_bf16* __restrict__ out1,
    long long s_T) {
  const int C = (int)(4096LL);
  const int R = (int)(1LL * s_T);
  constexpr int TPR = 512, VPT = 2;  // threads per row, vectors per thread
  constexpr int rpb = 1;  // one row group per block (blockDim.x == TPR)
  const int t = threadIdx.x;
  // per-column inputs, the same for every row: loaded once, before the rows and their reductions
#if !WLATE
  fz_pack<fz_bf16, 4> wr2[VPT];
#pragma unroll
  for (int it = 0; it < VPT; ++it) {
    const int c0 = ((int)it * TPR + t) * 4;
    if (true) {
      wr2[it].load(in2, c0);
    }
  }
#endif
  __shared__ float smem[64];
  int phase = 0;
  (void)smem;
  (void)phase;
  const unsigned long long pol = fz_evict_first();  // the rows are read once
  for (int r0 = (int)blockIdx.x * rpb; r0 < R; r0 += (int)gridDim.x * rpb) {
    constexpr bool valid = true;  // the loop bound checked the row
    (void)valid;
    const int r = r0;
    fz_pack<fz_bf16, 4> xr0[VPT];
    fz_pack<fz_bf16, 4> xr1[VPT];
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const int c0 = ((int)it * TPR + t) * 4;
      if (true) {
        xr0[it].load_ef(in0, (r) * C + (c0), pol);
        xr1[it].load_ef(in1, (r) * C + (c0), pol);
      }
    }
    const float e7 = (float)C;
    const float e9 = 1e-05f;
    // outputs that need no reduction, stored before the first one
#if KEEP
    fz_pack<fz_bf16, 4> sv1[VPT];
#endif
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const int c0 = ((int)it * TPR + t) * 4;
      if (true) {
        float x0[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x0[j] = xr0[it].get(j);
        float x1[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x1[j] = xr1[it].get(j);
        float o1[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = c0 + j;
          (void)c;
          const float e0 = x0[j];
          const float e1 = x1[j];
          const float e3 = (e0 + e1);
          o1[j] = e3;
        }
#if KEEP
        sv1[it].w[0] = fz_cvt2<fz_bf16>::pack(o1[0], o1[1]); sv1[it].w[1] = fz_cvt2<fz_bf16>::pack(o1[2], o1[3]);
        *reinterpret_cast<uint2*>(out1 + r * C + c0) = make_uint2(sv1[it].w[0], sv1[it].w[1]);
#else
        fz_store<4, fz_bf16>(out1, r * C + c0, o1);
#endif
      }
    }
    float acc6 = 0.0f;
    // pass 1: 1 reduction
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const int c0 = ((int)it * TPR + t) * 4;
      if (true) {
        float x0[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x0[j] = xr0[it].get(j);
        float x1[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x1[j] = xr1[it].get(j);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = c0 + j;
          (void)c;
          const float e0 = x0[j];
          const float e1 = x1[j];
          const float e3 = (e0 + e1);
          const float e4 = fz_round<fz_bf16>(e3);
          const float e5 = (e4 * e4);
          acc6 += e5;
        }
      }
    }
    acc6 = fz_row_reduce<TPR, false>(acc6, smem, phase);
    const float e6 = acc6;
    const float e8 = (e6 / e7);
    const float e10 = (e8 + e9);
    const float e11 = rsqrtf(e10);
    // epilogue
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const int c0 = ((int)it * TPR + t) * 4;
      if (true) {
#if WLATE
        fz_pack<fz_bf16, 4> wl; wl.load(in2, c0);
#endif
        float x2[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x2[j] = WSRC.get(j);
#if KEEP
        const fz_pack<fz_bf16, 4>& rl1 = sv1[it];
#else
        fz_pack<fz_bf16, 4> rl1;
        rl1.load(out1, r * C + c0);
#endif
        float o0[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = c0 + j;
          (void)c;
          const float e2 = x2[j];
          const float e4 = rl1.get(j);
          const float e12 = (e4 * e11);
          const float e13 = (e12 * e2);
          o0[j] = e13;
        }
        fz_store<4, fz_bf16>(out0, r * C + c0, o0);
      }
    }
  }
}
#undef KEEP
#undef WLATE
#undef WSRC
#define KEEP 1
#define WLATE 1
#define WSRC wl
extern "C" __global__ void __launch_bounds__(512) h7_keep_wl(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    const fz_bf16* __restrict__ in2,
    fz_bf16* __restrict__ out0,
    fz_bf16* __restrict__ out1,
    long long s_T) {
  const int C = (int)(4096LL);
  const int R = (int)(1LL * s_T);
  constexpr int TPR = 512, VPT = 2;  // threads per row, vectors per thread
  constexpr int rpb = 1;  // one row group per block (blockDim.x == TPR)
  const int t = threadIdx.x;
  // per-column inputs, the same for every row: loaded once, before the rows and their reductions
#if !WLATE
  fz_pack<fz_bf16, 4> wr2[VPT];
#pragma unroll
  for (int it = 0; it < VPT; ++it) {
    const int c0 = ((int)it * TPR + t) * 4;
    if (true) {
      wr2[it].load(in2, c0);
    }
  }
#endif
  __shared__ float smem[64];
  int phase = 0;
  (void)smem;
  (void)phase;
  const unsigned long long pol = fz_evict_first();  // the rows are read once
  for (int r0 = (int)blockIdx.x * rpb; r0 < R; r0 += (int)gridDim.x * rpb) {
    constexpr bool valid = true;  // the loop bound checked the row
    (void)valid;
    const int r = r0;
    fz_pack<fz_bf16, 4> xr0[VPT];
    fz_pack<fz_bf16, 4> xr1[VPT];
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const int c0 = ((int)it * TPR + t) * 4;
      if (true) {
        xr0[it].load_ef(in0, (r) * C + (c0), pol);
        xr1[it].load_ef(in1, (r) * C + (c0), pol);
      }
    }
    const float e7 = (float)C;
    const float e9 = 1e-05f;
    // outputs that need no reduction, stored before the first one
#if KEEP
    fz_pack<fz_bf16, 4> sv1[VPT];
#endif
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const int c0 = ((int)it * TPR + t) * 4;
      if (true) {
        float x0[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x0[j] = xr0[it].get(j);
        float x1[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x1[j] = xr1[it].get(j);
        float o1[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = c0 + j;
          (void)c;
          const float e0 = x0[j];
          const float e1 = x1[j];
          const float e3 = (e0 + e1);
          o1[j] = e3;
        }
#if KEEP
        sv1[it].w[0] = fz_cvt2<fz_bf16>::pack(o1[0], o1[1]); sv1[it].w[1] = fz_cvt2<fz_bf16>::pack(o1[2], o1[3]);
        *reinterpret_cast<uint2*>(out1 + r * C + c0) = make_uint2(sv1[it].w[0], sv1[it].w[1]);
#else
        fz_store<4, fz_bf16>(out1, r * C + c0, o1);
#endif
      }
    }
    float acc6 = 0.0f;
    // pass 1: 1 reduction
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const int c0 = ((int)it * TPR + t) * 4;
      if (true) {
        float x0[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x0[j] = xr0[it].get(j);
        float x1[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x1[j] = xr1[it].get(j);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = c0 + j;
          (void)c;
          const float e0 = x0[j];
          const float e1 = x1[j];
          const float e3 = (e0 + e1);
          const float e4 = fz_round<fz_bf16>(e3);
          const float e5 = (e4 * e4);
          acc6 += e5;
        }
      }
    }
    acc6 = fz_row_reduce<TPR, false>(acc6, smem, phase);
    const float e6 = acc6;
    const float e8 = (e6 / e7);
    const float e10 = (e8 + e9);
    const float e11 = rsqrtf(e10);
    // epilogue
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const int c0 = ((int)it * TPR + t) * 4;
      if (true) {
#if WLATE
        fz_pack<fz_bf16, 4> wl; wl.load(in2, c0);
#endif
        float x2[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x2[j] = WSRC.get(j);
#if KEEP
        const fz_pack<fz_bf16, 4>& rl1 = sv1[it];
#else
        fz_pack<fz_bf16, 4> rl1;
        rl1.load(out1, r * C + c0);
#endif
        float o0[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = c0 + j;
          (void)c;
          const float e2 = x2[j];
          const float e4 = rl1.get(j);
          const float e12 = (e4 * e11);
          const float e13 = (e12 * e2);
          o0[j] = e13;
        }
        fz_store<4, fz_bf16>(out0, r * C + c0, o0);
      }
    }
  }
}
#undef KEEP
#undef WLATE
#undef WSRC
#define KEEP 1
#define WLATE 0
#define WSRC wr2[it]
extern "C" __global__ void __launch_bounds__(512) h7_keep(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    const fz_bf16* __restrict__ in2,
    fz_bf16* __restrict__ out0,
    fz_bf16* __restrict__ out1,
    long long s_T) {
  const int C = (int)(4096LL);
  const int R = (int)(1LL * s_T);
  constexpr int TPR = 512, VPT = 2;  // threads per row, vectors per thread
  constexpr int rpb = 1;  // one row group per block (blockDim.x == TPR)
  const int t = threadIdx.x;
  // per-column inputs, the same for every row: loaded once, before the rows and their reductions
#if !WLATE
  fz_pack<fz_bf16, 4> wr2[VPT];
#pragma unroll
  for (int it = 0; it < VPT; ++it) {
    const int c0 = ((int)it * TPR + t) * 4;
    if (true) {
      wr2[it].load(in2, c0);
    }
  }
#endif
  __shared__ float smem[64];
  int phase = 0;
  (void)smem;
  (void)phase;
  const unsigned long long pol = fz_evict_first();  // the rows are read once
  for (int r0 = (int)blockIdx.x * rpb; r0 < R; r0 += (int)gridDim.x * rpb) {
    constexpr bool valid = true;  // the loop bound checked the row
    (void)valid;
    const int r = r0;
    fz_pack<fz_bf16, 4> xr0[VPT];
    fz_pack<fz_bf16, 4> xr1[VPT];
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const int c0 = ((int)it * TPR + t) * 4;
      if (true) {
        xr0[it].load_ef(in0, (r) * C + (c0), pol);
        xr1[it].load_ef(in1, (r) * C + (c0), pol);
      }
    }
    const float e7 = (float)C;
    const float e9 = 1e-05f;
    // outputs that need no reduction, stored before the first one
#if KEEP
    fz_pack<fz_bf16, 4> sv1[VPT];
#endif
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const int c0 = ((int)it * TPR + t) * 4;
      if (true) {
        float x0[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x0[j] = xr0[it].get(j);
        float x1[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x1[j] = xr1[it].get(j);
        float o1[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = c0 + j;
          (void)c;
          const float e0 = x0[j];
          const float e1 = x1[j];
          const float e3 = (e0 + e1);
          o1[j] = e3;
        }
#if KEEP
        sv1[it].w[0] = fz_cvt2<fz_bf16>::pack(o1[0], o1[1]); sv1[it].w[1] = fz_cvt2<fz_bf16>::pack(o1[2], o1[3]);
        *reinterpret_cast<uint2*>(out1 + r * C + c0) = make_uint2(sv1[it].w[0], sv1[it].w[1]);
#else
        fz_store<4, fz_bf16>(out1, r * C + c0, o1);
#endif
      }
    }
    float acc6 = 0.0f;
    // pass 1: 1 reduction
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const int c0 = ((int)it * TPR + t) * 4;
      if (true) {
        float x0[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x0[j] = xr0[it].get(j);
        float x1[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x1[j] = xr1[it].get(j);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = c0 + j;
          (void)c;
          const float e0 = x0[j];
          const float e1 = x1[j];
          const float e3 = (e0 + e1);
          const float e4 = fz_round<fz_bf16>(e3);
          const float e5 = (e4 * e4);
          acc6 += e5;
        }
      }
    }
    acc6 = fz_row_reduce<TPR, false>(acc6, smem, phase);
    const float e6 = acc6;
    const float e8 = (e6 / e7);
    const float e10 = (e8 + e9);
    const float e11 = rsqrtf(e10);
    // epilogue
#pragma unroll
    for (int it = 0; it < VPT; ++it) {
      const int c0 = ((int)it * TPR + t) * 4;
      if (true) {
#if WLATE
        fz_pack<fz_bf16, 4> wl; wl.load(in2, c0);
#endif
        float x2[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x2[j] = WSRC.get(j);
#if KEEP
        const fz_pack<fz_bf16, 4>& rl1 = sv1[it];
#else
        fz_pack<fz_bf16, 4> rl1;
        rl1.load(out1, r * C + c0);
#endif
        float o0[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = c0 + j;
          (void)c;
          const float e2 = x2[j];
          const float e4 = rl1.get(j);
          const float e12 = (e4 * e11);
          const float e13 = (e12 * e2);
          o0[j] = e13;
        }
        fz_store<4, fz_bf16>(out0, r * C + c0, o0);
      }
    }
  }
}
#undef KEEP
#undef WLATE
#undef WSRC
