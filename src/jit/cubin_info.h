// Facts read from a CUBIN without a driver or GPU: the registers per thread of each kernel, from
// the EIATTR_REGCOUNT attributes of the ELF file's ".nv.info" section (what ptxas -v reports).
// Used to check the occupancy of generated kernels in CI (a prefill row kernel whose registers
// cut its resident threads per SM streams slower: docs/BENCHMARKS.md, bench ops).
#pragma once
#include <map>
#include <string>
#include <string_view>

#include "opfuse/status.h"

namespace opfuse::jit {

// Kernel name -> registers per thread. InvalidArgument, naming what is wrong, for anything that is
// not a little-endian ELF64 file with in-bounds sections and attributes; NotFound when it has no
// ".nv.info" section.
StatusOr<std::map<std::string, int>> CubinRegisterCounts(std::string_view cubin);

// Threads of `threads_per_block` that fit on one SM of compute capability 9.0 with `registers` per
// thread: 64 K registers, allocated per warp in units of 256, at most 32 blocks and 2048 threads
// (shared memory not counted: the row kernels use 256 bytes).
int ResidentThreadsSm90(int registers, int threads_per_block);

}  // namespace opfuse::jit
