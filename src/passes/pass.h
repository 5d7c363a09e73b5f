// The pass interface: every pass is a named free function `Status Pass(Graph&, const PassContext&)`.
//
// A pass rewrites the graph in place and says why it did what it did: fusion verdicts live on the
// graph's FusionGroups, and everything else worth explaining (a pattern blocked by an escaping
// interior value, a composite op that could not be decomposed, a pass skipped after an error) is
// appended to the context's note log, which `opfuse explain` prints. The log is `mutable` because
// the context is otherwise read-only input (config, shape bindings) shared by all passes.
#pragma once
#include <string>
#include <vector>

#include "opfuse/config.h"
#include "opfuse/graph.h"
#include "scheduler/should_fuse.h"

namespace opfuse {

struct PassNote {
  std::string pass;     // which pass wrote it
  std::string subject;  // what it is about: "rms_norm at 'h'", "softmax 'p'"
  FusionDecision decision;
  std::string ToString() const { return pass + ": " + subject + ": " + decision.ToString(); }
};

struct PassContext {
  FusionConfig config;
  Bindings bindings;                     // from --shape SYM=VAL; may be empty or partial
  mutable std::vector<PassNote> notes;   // appended to by passes
  // The measured profile the schedule pass consults (null: config rules only); not owned.
  const scheduler::ProfileDb* profile = nullptr;
  // The variant requested for every fused group (the executor's option): kAuto keeps should_fuse's
  // pick; otherwise the schedule pass applies the request where the group can run it and says in
  // FusionChoice::substitution what it ran instead where not (a matmul group has no JIT form, a
  // generic group no library kernel).
  Variant variant = Variant::kAuto;
  // With variant kJit: groups of one op that are not fused run as a one-node JIT kernel too
  // (benchmarking the JIT on single ops); the executor runs the op's library kernel where the JIT
  // cannot lower it.
  bool jit_single_ops = false;
  // Written by the schedule pass: should_fuse's full answer for each group, parallel to g.groups.
  mutable std::vector<scheduler::FusionChoice> choices;

  void Note(std::string pass, std::string subject, FusionDecision d) const {
    notes.push_back({std::move(pass), std::move(subject), std::move(d)});
  }
};

using PassFn = Status (*)(Graph& g, const PassContext& ctx);

// The passes, in pipeline order (pipeline.cc lists them; each lives in its own file).
Status Verify(Graph& g, const PassContext& ctx);        // verify.cc
Status InferShapes(Graph& g, const PassContext& ctx);   // infer_shapes.cc
Status Decompose(Graph& g, const PassContext& ctx);     // decompose.cc
Status FusePatterns(Graph& g, const PassContext& ctx);  // fuse_patterns.cc
Status FuseGeneric(Graph& g, const PassContext& ctx);   // fuse_generic.cc
Status FuseMatmul(Graph& g, const PassContext& ctx);    // fuse_matmul.cc
Status FuseCollective(Graph& g, const PassContext& ctx);  // fuse_collective.cc
Status Schedule(Graph& g, const PassContext& ctx);      // schedule.cc

}  // namespace opfuse
