// A user's CUDA kernel as an `opfuse eval` candidate (docs/eval.md "Candidate ABI").
//
// The .cu file is device code only, compiled with NVRTC (src/jit/nvrtc_compiler.h) for the device's
// arch and loaded with the runtime's library API. It defines
//   extern "C" __global__ void opfuse_eval_kernel(<inputs...>, <outputs...>)
// one pointer per problem input then per output, in the problem's order (`opfuse eval list`), and
//   extern "C" __constant__ unsigned int opfuse_eval_launch[7] =
//       {grid_x, grid_y, grid_z, block_x, block_y, block_z, dynamic_shared_bytes};
// (problems have static shapes, so a static launch configuration suffices). The harness launches
// it once per call on its own stream; it never sees the host. A missing symbol, a launch array of
// another size or a zero dimension is a compile ("create") error of the candidate, never a crash.
// Built with OPFUSE_CUDA only.
#pragma once
#include <string>

#include "bench/cuda/op_runner.h"
#include "bench/op_suite.h"

namespace opfuse::bench {

inline constexpr const char* kEvalKernelName = "opfuse_eval_kernel";
inline constexpr const char* kEvalLaunchName = "opfuse_eval_launch";

// Compiles and loads `source` (label: the file name, for errors and the report) for the current
// device. InvalidArgument with the NVRTC log for a compile error or an ABI violation.
StatusOr<CandidateKernel> LoadCandidate(const std::string& source, const std::string& label, const OpCase& c);

}  // namespace opfuse::bench
