// The pipeline as one readable list, and its runner (see pipeline.h).
//
// Order matters and is the whole design: types must be known before anything rewrites; disabled
// composite ops are decomposed before pattern matching so that their primitives are treated like
// any traced graph; patterns claim their subgraphs before the generic grouper sees the rest; the
// scheduler only judges groups that exist. Later stages (codegen, memory planning) append here.
#include "passes/pipeline.h"

#include <fmt/format.h>

namespace opfuse {

const std::vector<PassEntry>& Pipeline() {
  static const std::vector<PassEntry> kPipeline = {
      {"verify", Verify, false, "structural checks: names, arity, cycles, symbols, types"},
      {"infer_shapes", InferShapes, false, "shape/dtype inference; checks --shape bindings"},
      {"decompose", Decompose, true, "composite ops whose pattern is disabled -> primitives"},
      {"fuse_patterns", FusePatterns, true, "rewrite SwiGLU, GeGLU, (Add+)RMSNorm, LayerNorm, Softmax, RoPE"},
      {"fuse_generic", FuseGeneric, true, "group elementwise chains and elementwise->reduction->elementwise"},
      {"fuse_matmul", FuseMatmul, true, "decode GEMV: sibling matmuls of one input, matmul -> swiglu epilogue"},
      {"fuse_collective", FuseCollective, true, "all_reduce -> add_rms_norm as one group on the communicator"},
      {"schedule", Schedule, false, "apply config limits to each group; pick unfused/library/jit"},
  };
  return kPipeline;
}

std::vector<std::string> PassesToRun(const FusionConfig& config) {
  std::vector<std::string> out;
  for (const auto& p : Pipeline())
    if (!(p.can_disable && config.IsDisabled(p.name))) out.push_back(p.name);
  return out;
}

Status RunPipeline(Graph& g, const PassContext& ctx, const AfterPassFn& after_each) {
  for (const auto& p : Pipeline()) {
    if (p.can_disable && ctx.config.IsDisabled(p.name)) {
      ctx.Note(p.name, "pass", FusionDecision::No("skipped: disabled by OPFUSE_DISABLE"));
      continue;
    }
    Graph before;
    if (p.can_disable && ctx.config.fallback_on_error) before = g;
    Status s = p.fn(g, ctx);
    if (s.ok() && ctx.config.debug) {
      // Debug mode: every pass must leave a valid graph behind.
      s = VerifyAndInfer(g);
      if (!s.ok()) s = Internal(fmt::format("after pass {}: graph no longer verifies: {}", p.name, s.message()));
    }
    if (!s.ok()) {
      if (!(p.can_disable && ctx.config.fallback_on_error)) return s;
      g = std::move(before);
      ctx.Note(p.name, "pass", FusionDecision::No("failed and rolled back (fallback_on_error): " + s.message()));
      continue;
    }
    if (after_each) after_each(p.name, g);
  }
  return Status::Ok();
}

}  // namespace opfuse
