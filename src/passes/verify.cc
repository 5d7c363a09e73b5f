// Pass `verify`: the graph is well formed before anything touches it — names, arity, dangling
// values, cycles, unbound symbols and declared-vs-inferred types (VerifyAndInfer's checks). It
// works on a scratch copy so that verification alone never changes the graph; writing the
// inferred types back is infer_shapes' job.
#include "passes/pass.h"

namespace opfuse {

Status Verify(Graph& g, const PassContext& ctx) {
  (void)ctx;
  Graph scratch = g;
  return VerifyAndInfer(scratch);
}

}  // namespace opfuse
