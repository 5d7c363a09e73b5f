// The pattern registry: every fusion pattern, in the order fuse_patterns tries them.
//
// One file per pattern (pattern_<name>.cc) defines Make<Name>Pattern(); pattern_registry.cc lists
// them. The order matters where one pattern contains another: LayerNorm before RMSNorm (an RMSNorm
// tree matches the tail of a LayerNorm with x := x - mean), Add+RMSNorm before RMSNorm (it needs
// the norm still in primitives or as a lone rms_norm op).
#pragma once
#include <vector>

#include "fusion/pattern.h"

namespace opfuse::fusion {

PatternDef MakeLayerNormPattern();
PatternDef MakeAddRmsNormPattern();
PatternDef MakeRmsNormPattern();
PatternDef MakeSoftmaxPattern();
PatternDef MakeRopePattern();
PatternDef MakeSwigluPattern();
PatternDef MakeGegluPattern();

// All patterns, in matching order. Pattern names are kill-switch names.
const std::vector<PatternDef>& AllPatterns();
// The pattern whose rewrite produces `op` (a composite op), or nullptr.
const PatternDef* PatternForOp(OpKind op);

// Shared sub-trees (pattern_rms_norm.cc): x * rsqrt(mean(x*x) + eps), the normalised value
// before the weight, with x bound to `x` and eps to "eps". x*x may be written pow(x, 2).
Pat RmsNormCore(const Pat& x);
// The same core over the value bound to `name` (x * rsqrt(mean(x*x) + eps) with x = name).
Pat RmsNormCoreOver(const Pat& x, const std::string& name);
// The half-precision form eager frameworks trace (LlamaRMSNorm): cast(core over cast(x) to f32) back
// to x's dtype, bound as "x" (input), "x32" (the f32 copy) and "n" (the cast back).
Pat RmsNormUpcast(const Pat& x);
// For those variants' builds: x32 is f32 and n has x's dtype; else why says what differs.
bool RmsNormUpcastTypesOk(const Graph& g, const Binding& b, std::string* why);

}  // namespace opfuse::fusion
