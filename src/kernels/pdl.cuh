// Programmatic dependent launch (PDL) hooks for library kernels (Hopper, sm_90+).
//
// Design note: the decode step is ~250 small kernels in one CUDA graph; between two of them the
// GPU drains one grid and ramps up the next (a few µs each, most of a small kernel's time). A
// kernel launched with the programmatic-serialization attribute (KernelLaunch::Pdl) may be
// scheduled while its predecessor still runs; it must then wait (PdlWait: griddepcontrol.wait,
// which returns once every earlier grid has completed and its memory is visible) before it reads
// or writes anything another kernel touches. Work that depends on nothing earlier — the GEMV's
// first weight loads — goes before the wait and overlaps the predecessor's tail. PdlAllowNext
// (griddepcontrol.launch_dependents) lets the next PDL kernel be scheduled once every block of
// this one has started; it promises nothing about memory, so it is safe anywhere. Both are no-ops
// when the kernel was launched without the attribute or the next kernel is not a PDL one.
// The instructions are the ones the JIT kernels use (codegen/device/device_common.cuh).
#pragma once
#include "codegen/device/device_common.cuh"

namespace opfuse::kernels {

__device__ __forceinline__ void PdlAllowNext() { fz::pdl_allow_next(); }
__device__ __forceinline__ void PdlWait() { fz::pdl_wait(); }
// Both, at the top of a kernel that has nothing to do before its inputs are ready.
__device__ __forceinline__ void PdlEnter() { fz::pdl_enter(); }

}  // namespace opfuse::kernels
