// Library kernels: the hand-written CUDA kernels of the CUDA backend (src/kernels/*.cu).
//
// Design: every op of ops.def that runs on the GPU without the JIT has a library kernel here —
// each elementwise / broadcast / reduction op on its own (the never-fuse path, so it must be
// decent: 16-byte vectors, several loads in flight, grid from the SM count), the views as copy
// kernels, embedding gather, attention, and hand-tuned fused kernels for the composite ops
// (rms_norm, add_rms_norm, layer_norm, softmax, swiglu, geglu, rope). Matmul is cuBLASLt
// (runtime/cuda/cublaslt_matmul.h) and is planned by the executor, not here.
//
// The executor asks for launches once per (bindings, pointers): PlanLibraryNode returns the
// pre-resolved KernelLaunch records (usually one) for a node on concrete shapes and device
// pointers. It never launches anything itself. A node this file cannot run — an op without a
// library kernel, an unsupported dtype — is Unimplemented with the reason, so the executor can
// say why it fell back (never a silent fallback).
//
// Family files, one per op family, each with a design note on top:
//   elementwise.cu  unary, broadcast binary, compare, where, cast
//   reduction.cu    sum / max / mean / argmax over the last axis
//   view.cu         transpose / slice / concat copies (reshape is an alias, done by the executor)
//   embedding.cu    row gather
//   norm.cu         rms_norm, add_rms_norm (sum as 2nd output, may alias the residual), layer_norm
//   softmax.cu      softmax (scale, causal, additive mask)
//   glu.cu          swiglu, geglu act-and-mul
//   rope.cu         rotary embedding (rotate_half convention)
//   attention.cu    attention (causal, scale, GQA)
// Tensors are contiguous row-major. Built with OPFUSE_CUDA only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "opfuse/graph.h"
#include "cuda/device.h"
#include "cuda/launch.h"
#include "kernels/attention_plan.h"
#include "kernels/tensor_ref.h"

namespace opfuse::kernels {

// Facts about the run a node's planner cannot see from the node itself (the executor's plan).
struct LibraryPlanOptions {
  // kv_attention: no kernel of the same run writes pos or the caches, so the decode kernel may read
  // them before its PDL wait (AttentionPlanOptions::early_reads).
  bool early_reads = false;
};

// Launches that compute node `n` (op + attrs) from `in` into `out` (shapes already bound and
// checked by the executor; outputs allocated). Unimplemented("<op>: <why>") when no library
// kernel covers the case.
StatusOr<std::vector<cuda::KernelLaunch>> PlanLibraryNode(const Node& n, const std::vector<TensorRef>& in,
                                                          const std::vector<TensorRef>& out,
                                                          const cuda::DeviceInfo& dev,
                                                          const LibraryPlanOptions& opts = {});

// Whether PlanLibraryNode has a kernel for `op` at all (dtype/shape limits may still refuse).
bool HasLibraryKernel(OpKind op);

// Per-family planners (each .cu file defines its own; PlanLibraryNode dispatches on the op).
StatusOr<std::vector<cuda::KernelLaunch>> PlanElementwise(const Node& n, const std::vector<TensorRef>& in,
                                                          const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev);
StatusOr<std::vector<cuda::KernelLaunch>> PlanReduction(const Node& n, const std::vector<TensorRef>& in,
                                                        const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev);
StatusOr<std::vector<cuda::KernelLaunch>> PlanView(const Node& n, const std::vector<TensorRef>& in,
                                                   const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev);
StatusOr<std::vector<cuda::KernelLaunch>> PlanEmbedding(const Node& n, const std::vector<TensorRef>& in,
                                                        const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev);
StatusOr<std::vector<cuda::KernelLaunch>> PlanNorm(const Node& n, const std::vector<TensorRef>& in,
                                                   const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev);
StatusOr<std::vector<cuda::KernelLaunch>> PlanSoftmax(const Node& n, const std::vector<TensorRef>& in,
                                                      const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev);
StatusOr<std::vector<cuda::KernelLaunch>> PlanGlu(const Node& n, const std::vector<TensorRef>& in,
                                                  const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev);
StatusOr<std::vector<cuda::KernelLaunch>> PlanRope(const Node& n, const std::vector<TensorRef>& in,
                                                   const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev);
// Attention may take a 4th TensorRef in `in`: f32 scratch (any dtype/shape; its byte size counts) for
// split-K decode, sized by AttentionWorkspaceBytes (0: the plan uses none). It must stay reserved
// while the node's launches run. Without it the plan is single-pass (correct, slower for long-S
// decode). See src/kernels/attention.h.
StatusOr<std::vector<cuda::KernelLaunch>> PlanAttention(const Node& n, const std::vector<TensorRef>& in,
                                                        const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev);

// kv_attention (src/kernels/attention.h): in = q, k, v, k_cache, v_cache, pos [, scratch]; writes
// the caches in place, reads pos on the device. AttentionWorkspaceBytes also sizes its scratch.
// `early_reads`: LibraryPlanOptions::early_reads.
StatusOr<std::vector<cuda::KernelLaunch>> PlanKvAttention(const Node& n, const std::vector<TensorRef>& in,
                                                          const std::vector<TensorRef>& out, const cuda::DeviceInfo& dev,
                                                          bool early_reads = false);

}  // namespace opfuse::kernels
