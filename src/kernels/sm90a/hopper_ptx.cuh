// Hopper (sm_90a) PTX wrappers shared by the library's TMA + wgmma kernel
// (src/kernels/sm90a/attention_wgmma.cu) and the dev/ wgmma probes (dev/wgmma_common.cuh), so the
// probes time exactly the instructions the library issues: shared-memory addresses, wgmma matrix
// descriptors, wgmma fences, the generic-to-async proxy fence, mbarriers and 2-D TMA loads. The
// element-typed wgmma instructions themselves stay with their users (the library's are templated on
// bf16 / f16, the probes' are bf16 only).
#pragma once
#include <cuda.h>

#include <cstdint>

namespace opfuse::kernels::sm90a {

// The 32-bit shared-memory address of generic pointer `p`.
__device__ __forceinline__ uint32_t Smem32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// wgmma matrix descriptor: start address >> 4 (bits 0-13), leading byte offset >> 4 (16-29), stride
// byte offset >> 4 (32-45); no swizzle, or (DescSw128) the 128-byte swizzle (mode 1 in bits 62-63).
__device__ __forceinline__ uint64_t Desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((saddr & 0x3FFFF) >> 4) | (uint64_t((lbo & 0x3FFFF) >> 4) << 16) | (uint64_t((sbo & 0x3FFFF) >> 4) << 32);
}
__device__ __forceinline__ uint64_t DescSw128(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return Desc(saddr, lbo, sbo) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void WgFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgWait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void WgWait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
// Generic-proxy writes to shared memory (stores, cp.async) made visible to wgmma / TMA (async proxy).
__device__ __forceinline__ void ProxyFence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void MbarInit(uint32_t b, int count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(b), "r"(count));
}
__device__ __forceinline__ void MbarWait(uint32_t b, int parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT_%=:\nmbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n@!p bra WAIT_%=;\n}\n" ::"r"(b),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void MbarArrive(uint32_t b) {
  asm volatile("mbarrier.arrive.shared.b64 _, [%0];\n" ::"r"(b) : "memory");
}
__device__ __forceinline__ void MbarExpect(uint32_t b, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n" ::"r"(b), "r"(bytes) : "memory");
}
// The box of `map` at (x = column, y = row) into shared memory at dst, completing on mbarrier bar.
__device__ __forceinline__ void Tma2d(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(map), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

}  // namespace opfuse::kernels::sm90a
