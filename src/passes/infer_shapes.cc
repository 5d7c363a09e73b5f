// Pass `infer_shapes`: fills every value's dtype and shape (symbolic dims stay symbols) and checks
// the --shape bindings against the graph: binding a symbol the graph does not have is a user error
// (most likely a typo), reported with the symbols that exist. Bindings are only used to judge
// sizes (schedule's min_tensor_elements); the graph itself stays symbolic.
#include <algorithm>

#include <fmt/format.h>

#include "passes/pass.h"

namespace opfuse {

Status InferShapes(Graph& g, const PassContext& ctx) {
  OPFUSE_RETURN_IF_ERROR(VerifyAndInfer(g));
  const auto syms = g.Symbols();
  for (const auto& [sym, value] : ctx.bindings) {
    if (std::find(syms.begin(), syms.end(), sym) != syms.end()) continue;
    std::string have;
    for (const auto& s : syms) have += (have.empty() ? "" : ", ") + s;
    return InvalidArgument(fmt::format("--shape {}={}: graph '{}' has no symbol '{}' ({})", sym, value, g.name, sym,
                                       have.empty() ? "it has no symbolic dims" : "symbols: " + have));
  }
  return Status::Ok();
}

}  // namespace opfuse
