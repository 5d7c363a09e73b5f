// Kernel IR: what one generated kernel computes, independent of CUDA.
//
// A fused group becomes a Kernel over an iteration space [R, C]: C is the last dim of the group's
// widest output (static when the graph says so — kernels are specialised on it), R the product of
// the leading dims (usually symbolic: a kernel argument, so a new token count never recompiles).
// The body is an SSA list of scalar expressions in f32:
//   element-level exprs (one value per (r, c)) and row-level exprs (one per row: reductions and
//   what is computed from them only). A reduction folds an element-level expr over c.
// Reductions are ordered into passes by their depth (softmax: max, then sum of exp(x - max)), then
// an epilogue writes the outputs. A kernel with no reduction is a pointwise kernel.
// Two consumers read this IR: the CUDA emitter (cuda_emitter.cc) and the CPU interpreter
// (kernel_interpreter.cc), which is how CI checks generated-kernel semantics without a GPU.
#pragma once
#include <string>
#include <vector>

#include "opfuse/graph.h"

namespace opfuse::codegen {

// How an input (or output) is indexed relative to the [R, C] iteration space.
enum class Access {
  kFull,       // same shape as the iteration space: r * C + c
  kChannel,    // broadcast over rows, [.., C]: c
  kRowScalar,  // one value per row, [..., 1]: r
  kScalar,     // one value: 0
  kGeneral,    // numpy broadcasting on other dims: per-dim strides from the n-d coordinate
};
const char* AccessName(Access a);

struct KernelTensor {
  std::string name;    // graph value name
  int graph_value = -1;
  TensorType type;
  Access access = Access::kFull;
  // kGeneral only: for each dim of the iteration space's n-d shape, whether this tensor varies
  // along it (false = broadcast, stride 0). Right-aligned to the iteration shape.
  std::vector<bool> varies;
};

enum class ExprKind {
  kLoad,        // input[in] at the element (or row for row-level)
  kLoadRotHalf, // rotate_half(input[in]) along c: c < C/2 ? -x[c + C/2] : x[c - C/2]
  kConst,       // constant
  kOp,          // elementwise op (scalar_ops.h) over args
  kRound,       // round to `dtype` and back to f32 (models storing an intermediate)
  kReduce,      // row reduction (op = kSum | kMax) of args[0] over c
  kCausal,      // args[0] where c <= (r % tq) + (C - tq), else -inf;  tq = dims[-2] of iteration space
  kCols,        // C as a float (mean = sum / C when C is symbolic)
};

struct Expr {
  ExprKind kind = ExprKind::kConst;
  OpKind op = OpKind::kAdd;
  std::vector<int> args;
  int input = -1;
  double constant = 0;
  DType dtype = DType::kF32;  // kRound target
  bool row_level = false;     // one value per row
  int depth = 0;              // reductions this expression depends on (pass number it is ready after)
};

struct KernelOutput {
  KernelTensor tensor;
  int expr = -1;
};

struct Kernel {
  std::string name;                 // fz_<contents>_<dtype>_w<C>
  std::string summary;              // "rms_norm(x, w)" etc., for the source's opening comment
  std::vector<std::string> ops;     // fused graph ops, in order
  Shape space;                      // the n-d iteration shape (its last dim is C)
  std::vector<KernelTensor> inputs;
  std::vector<KernelOutput> outputs;
  std::vector<Expr> exprs;
  int num_passes = 0;               // reduction depth; 0 = pointwise
  std::vector<std::string> symbols; // symbolic dims of `space`, passed as kernel arguments

  const Dim& cols() const { return space.back(); }
  bool is_row() const { return num_passes > 0; }
  std::string ToString() const;     // readable dump, for --debug and tests
};

// Lowers the nodes of a fusion group of `g` to a Kernel. Unimplemented (with the reason) when the
// group has something the JIT does not lower (library/view ops, integer math, argmax, ...).
StatusOr<Kernel> BuildKernel(const Graph& g, const FusionGroup& group);
// Same, for an explicit node list (tests, single ops).
StatusOr<Kernel> BuildKernel(const Graph& g, const std::vector<int>& nodes);

}  // namespace opfuse::codegen
