// opfuse generated kernel fz_swiglu_bf16_w5632_v8
// fuses: swiglu(g, u)
// emitter v6; iteration space [1, 5632] (pointwise), 0 passes, vec 8
// 256 threads per block, one vector per thread
//   in0  g bf16[1, 5632] [full]
//   in1  u bf16[1, 5632] [full]
//   out0 y bf16[1, 5632] [full]
// (the emitter's preamble goes in front: bash dev/kernel_ab/build_variant.sh THIS_FILE OUT.cubin)
extern "C" __global__ void __launch_bounds__(256) swi_v8(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    fz_bf16* __restrict__ out0) {
  const long long C = 5632LL;
  const long long R = 1LL * 1LL;
  const long long NV = R * C / 8;
  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < NV; v += (long long)gridDim.x * blockDim.x) {
    const long long i0 = v * 8;
    float x0[8];
    fz_load<8>(in0, i0, x0);
    float x1[8];
    fz_load<8>(in1, i0, x1);
    float o0[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float e0 = x0[j];
      const float e1 = x1[j];
      const float e2 = __fdividef(e0, 1.0f + __expf(-e0));
      const float e3 = (e2 * e1);
      o0[j] = e3;
    }
    fz_store<8, fz_bf16>(out0, i0, o0);
  }
}
extern "C" __global__ void __launch_bounds__(256) swi_v4(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    fz_bf16* __restrict__ out0) {
  const long long C = 5632LL;
  const long long R = 1LL * 1LL;
  const long long NV = R * C / 4;
  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < NV; v += (long long)gridDim.x * blockDim.x) {
    const long long i0 = v * 4;
    float x0[4];
    fz_load<4>(in0, i0, x0);
    float x1[4];
    fz_load<4>(in1, i0, x1);
    float o0[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float e0 = x0[j];
      const float e1 = x1[j];
      const float e2 = __fdividef(e0, 1.0f + __expf(-e0));
      const float e3 = (e2 * e1);
      o0[j] = e3;
    }
    fz_store<4, fz_bf16>(out0, i0, o0);
  }
}
extern "C" __global__ void __launch_bounds__(256) swi_v2(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    fz_bf16* __restrict__ out0) {
  const long long C = 5632LL;
  const long long R = 1LL * 1LL;
  const long long NV = R * C / 2;
  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < NV; v += (long long)gridDim.x * blockDim.x) {
    const long long i0 = v * 2;
    float x0[2];
    fz_load<2>(in0, i0, x0);
    float x1[2];
    fz_load<2>(in1, i0, x1);
    float o0[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float e0 = x0[j];
      const float e1 = x1[j];
      const float e2 = __fdividef(e0, 1.0f + __expf(-e0));
      const float e3 = (e2 * e1);
      o0[j] = e3;
    }
    fz_store<2, fz_bf16>(out0, i0, o0);
  }
}
extern "C" __global__ void __launch_bounds__(256) swi_v1(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    fz_bf16* __restrict__ out0) {
  const long long C = 5632LL;
  const long long R = 1LL * 1LL;
  const long long NV = R * C / 1;
  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < NV; v += (long long)gridDim.x * blockDim.x) {
    const long long i0 = v * 1;
    float x0[1];
    fz_load<1>(in0, i0, x0);
    float x1[1];
    fz_load<1>(in1, i0, x1);
    float o0[1];
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const float e0 = x0[j];
      const float e1 = x1[j];
      const float e2 = __fdividef(e0, 1.0f + __expf(-e0));
      const float e3 = (e2 * e1);
      o0[j] = e3;
    }
    fz_store<1, fz_bf16>(out0, i0, o0);
  }
}
extern "C" __global__ void __launch_bounds__(256) swi_n8(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    fz_bf16* __restrict__ out0) {
  const int C = 5632;
  const int R = 1;
  const int NV = R * C / 8;
  {
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= NV) return;
    const int i0 = v * 8;
    float x0[8];
    fz_load<8>(in0, i0, x0);
    float x1[8];
    fz_load<8>(in1, i0, x1);
    float o0[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float e0 = x0[j];
      const float e1 = x1[j];
      const float e2 = __fdividef(e0, 1.0f + __expf(-e0));
      const float e3 = (e2 * e1);
      o0[j] = e3;
    }
    fz_store<8, fz_bf16>(out0, i0, o0);
  }
}
extern "C" __global__ void __launch_bounds__(256) swi_n4(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    fz_bf16* __restrict__ out0) {
  const int C = 5632;
  const int R = 1;
  const int NV = R * C / 4;
  {
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= NV) return;
    const int i0 = v * 4;
    float x0[4];
    fz_load<4>(in0, i0, x0);
    float x1[4];
    fz_load<4>(in1, i0, x1);
    float o0[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float e0 = x0[j];
      const float e1 = x1[j];
      const float e2 = __fdividef(e0, 1.0f + __expf(-e0));
      const float e3 = (e2 * e1);
      o0[j] = e3;
    }
    fz_store<4, fz_bf16>(out0, i0, o0);
  }
}
extern "C" __global__ void __launch_bounds__(256) swi_n2(
    const fz_bf16* __restrict__ in0,
    const fz_bf16* __restrict__ in1,
    fz_bf16* __restrict__ out0) {
  const int C = 5632;
  const int R = 1;
  const int NV = R * C / 2;
  {
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= NV) return;
    const int i0 = v * 2;
    float x0[2];
    fz_load<2>(in0, i0, x0);
    float x1[2];
    fz_load<2>(in1, i0, x1);
    float o0[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float e0 = x0[j];
      const float e1 = x1[j];
      const float e2 = __fdividef(e0, 1.0f + __expf(-e0));
      const float e3 = (e2 * e1);
      o0[j] = e3;
    }
    fz_store<2, fz_bf16>(out0, i0, o0);
  }
}
