// Host dispatch over the scalar math table (scalar_math.def, expanded in scalar_math.h): OpKind ->
// fz::op_<name> for the CPU reference and the kernel-IR interpreter, and the call text the CUDA
// emitter writes. Float math is f32 (f16/bf16 inputs are widened).
#pragma once
#include <cmath>
#include <cstdint>

#include "opfuse/graph.h"
#include "ops/scalar_math.h"

namespace opfuse {

// Op -> fz::op_<name> of scalar_math.h, for the CPU reference and the kernel-IR interpreter.
// Unary ops on a float (the f32 compute type); integer inputs of neg/abs/relu go through
// ScalarUnaryInt. Ops outside the table give NaN (float) or the input (int).
inline float ScalarUnary(OpKind op, float x) {
  switch (op) {
#define OPFUSE_SCALAR_UNARY_F(K, name, fexpr) case OpKind::k##K: return fz::op_##name(x);
#define OPFUSE_SCALAR_UNARY_FI(K, name, fexpr, iexpr) case OpKind::k##K: return fz::op_##name(x);
#include "ops/scalar_math.def"
    default: return std::nanf("");
  }
}

inline int64_t ScalarUnaryInt(OpKind op, int64_t x) {
  switch (op) {
#define OPFUSE_SCALAR_UNARY_FI(K, name, fexpr, iexpr) case OpKind::k##K: return fz::iop_##name(x);
#include "ops/scalar_math.def"
    default: return x;
  }
}

// Binary op in f32; comparisons return 0/1.
inline float ScalarBinary(OpKind op, float a, float b) {
  switch (op) {
#define OPFUSE_SCALAR_BINARY_F(K, name, fexpr) case OpKind::k##K: return fz::op_##name(a, b);
#define OPFUSE_SCALAR_BINARY_FI(K, name, fexpr, iexpr) case OpKind::k##K: return fz::op_##name(a, b);
#define OPFUSE_SCALAR_COMPARE(K, name, expr) case OpKind::k##K: return fz::op_##name(a, b) ? 1.0f : 0.0f;
#include "ops/scalar_math.def"
    default: return std::nanf("");
  }
}

inline int64_t ScalarBinaryInt(OpKind op, int64_t a, int64_t b) {
  switch (op) {
#define OPFUSE_SCALAR_BINARY_FI(K, name, fexpr, iexpr) case OpKind::k##K: return fz::iop_##name(a, b);
#define OPFUSE_SCALAR_COMPARE(K, name, expr) case OpKind::k##K: return fz::iop_##name(a, b) ? 1 : 0;
#include "ops/scalar_math.def"
    default: return 0;
  }
}

// The CUDA C expression the JIT emits for an op: $0, $1, $2 are the f32 operands, and fz::op_<name>
// is the same function the library kernels call (the JIT preamble embeds scalar_math.h). where is
// a select on the f32 condition. nullptr: the op has no scalar CUDA lowering.
inline const char* CudaScalarExpr(OpKind op) {
  switch (op) {
#define OPFUSE_SCALAR_UNARY_F(K, name, fexpr) case OpKind::k##K: return "fz::op_" #name "($0)";
#define OPFUSE_SCALAR_UNARY_FI(K, name, fexpr, iexpr) case OpKind::k##K: return "fz::op_" #name "($0)";
#define OPFUSE_SCALAR_BINARY_F(K, name, fexpr) case OpKind::k##K: return "fz::op_" #name "($0, $1)";
#define OPFUSE_SCALAR_BINARY_FI(K, name, fexpr, iexpr) case OpKind::k##K: return "fz::op_" #name "($0, $1)";
#define OPFUSE_SCALAR_COMPARE(K, name, expr) case OpKind::k##K: return "(float)fz::op_" #name "($0, $1)";
#include "ops/scalar_math.def"
    case OpKind::kWhere: return "($0 != 0.0f ? $1 : $2)";
    default: return nullptr;
  }
}

}  // namespace opfuse
