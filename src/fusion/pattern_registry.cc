// The list of fusion patterns in matching order (why this order: patterns.h).
#include "fusion/patterns.h"

namespace opfuse::fusion {

const std::vector<PatternDef>& AllPatterns() {
  static const std::vector<PatternDef> kPatterns = {
      MakeLayerNormPattern(), MakeAddRmsNormPattern(), MakeRmsNormPattern(), MakeSoftmaxPattern(),
      MakeRopePattern(),      MakeSwigluPattern(),     MakeGegluPattern(),
  };
  return kPatterns;
}

const PatternDef* PatternForOp(OpKind op) {
  for (const auto& p : AllPatterns())
    if (p.op == op) return &p;
  return nullptr;
}

}  // namespace opfuse::fusion
