// GEMV: the decode-size matmul of the CUDA backend (a few rows of activations times a weight
// matrix), with horizontal fusion (several weights that read the same activations, one launch)
// and a SwiGLU epilogue (gate and up rows dotted in one pass, silu(gate) * up written).
//
// Why: at decode the matmul is C[M,N] = A[M,K] · Wᵀ with M = batch (1…kGemvMaxRows) and W a Hugging Face
// Linear weight [N,K] in bf16/f16 — pure weight streaming (N·K·2 bytes, about 2 FLOP per byte).
// cuBLASLt stays well below the copy bandwidth there (docs/BENCHMARKS.md) and costs one
// launch per matmul; the Llama layer has seven of them. The kernel design is in gemv.cu.
//
// Use: the executor plans a matmul step with PlanGemv when GemvSupported says yes (the reason
// otherwise goes to the launch name / fallback list), and a fused matmul group
// (passes/fuse_matmul.cc: "matmul:siblings", "matmul:swiglu") as one GemvArgs with its segments.
// Built with OPFUSE_CUDA only.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/gemv_args.h"
#include "cuda/device.h"
#include "cuda/launch.h"

namespace opfuse::kernels {

// The one launch computing every segment. `args` must pass GemvSupported.
StatusOr<cuda::KernelLaunch> PlanGemv(const GemvArgs& args, const cuda::DeviceInfo& dev);

}  // namespace opfuse::kernels
