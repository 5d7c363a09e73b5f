// Shared by the dev/ wgmma probes (wgmma_tile, wgmma_tma, wgmma_attn), built by hand with nvcc for
// sm_90a: the library's PTX wrappers (src/kernels/sm90a/hopper_ptx.cuh: shared-memory addresses, wgmma
// matrix descriptors, fences, mbarriers, 2-D TMA loads), the m64n64k16 bf16 wgmma with operands from
// shared memory or A from registers, and a host-side 2-D bf16 tensor map (driver entry point through
// probe_common.cuh's Entry, no libcuda link).
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "../src/kernels/sm90a/hopper_ptx.cuh"
#include "probe_common.cuh"

// The library's PTX wrappers (Smem32, Desc, DescSw128, wgmma fences, ProxyFence, mbarriers, Tma2d).
using namespace opfuse::kernels::sm90a;  // NOLINT

#define WGMMA_D32 \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define WGMMA_OUT32(d)                                                                                         \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),   \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),  \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// d (64 x 64 f32, 32 a thread) = / += A (smem) * B (smem), both K-major; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaSS(float (&d)[32], uint64_t da, uint64_t db, int scale_d = 1) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : WGMMA_OUT32(d)
      : "l"(da), "l"(db), "r"(scale_d));
}
// d += A (registers: the m16n8k16 A fragment of this warp's 16 rows) * B (smem, transposed: N-major).
__device__ __forceinline__ void WgmmaRS(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_D32 ", {%32,%33,%34,%35}, %36, 1, 1, 1, 1;\n"
               : WGMMA_OUT32(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// Two floats rounded to one packed bf16 pair, `lo` in the low half.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}


// A [rows][cols] bf16 row-major tensor as TMA boxes of box_rows x box_cols, 128-byte swizzle, zeros
// outside the tensor; exits on failure.
inline CUtensorMap TensorMap2dBf16(void* base, uint64_t cols, uint64_t rows, uint32_t box_cols, uint32_t box_rows,
                                   CUtensorMapL2promotion l2) {
  using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const EncodeFn encode = Entry<EncodeFn>("cuTensorMapEncodeTiled");
  CUtensorMap m;
  const cuuint64_t dims[2] = {cols, rows}, strides[1] = {cols * 2};
  const cuuint32_t box[2] = {box_cols, box_rows}, es[2] = {1, 1};
  const CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box, es,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, l2, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled: %d\n", int(r));
    std::exit(1);
  }
  return m;
}
