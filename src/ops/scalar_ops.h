// Scalar semantics of every elementwise op, in one place: the CPU reference, the kernel-IR
// interpreter (src/codegen) and the CUDA emitter all read this file, so a fused kernel computes
// exactly what the op-by-op path computes. Float math is f32 (f16/bf16 inputs are widened).
#pragma once
#include <cmath>

#include "opfuse/graph.h"

namespace opfuse {

// erfc form: 1 + erf(z) cancels for z << 0 (x < -3 loses ~1e-3 relative); erfc(-z) does not.
inline float GeluErf(float x) { return 0.5f * x * std::erfc(-x * 0.70710678118654752f); }
inline float GeluTanhF(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
inline float SigmoidF(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Unary op on a float (the f32 compute type). Integer inputs of neg/abs/relu go through
// ScalarUnaryInt.
inline float ScalarUnary(OpKind op, float x) {
  switch (op) {
    case OpKind::kNeg: return -x;
    case OpKind::kAbs: return std::fabs(x);
    case OpKind::kExp: return std::exp(x);
    case OpKind::kExp2: return std::exp2(x);
    case OpKind::kLog: return std::log(x);
    case OpKind::kLog2: return std::log2(x);
    case OpKind::kSqrt: return std::sqrt(x);
    case OpKind::kRsqrt: return 1.0f / std::sqrt(x);
    case OpKind::kRecip: return 1.0f / x;
    case OpKind::kSin: return std::sin(x);
    case OpKind::kCos: return std::cos(x);
    case OpKind::kTanh: return std::tanh(x);
    case OpKind::kSigmoid: return SigmoidF(x);
    case OpKind::kSilu: return x * SigmoidF(x);
    case OpKind::kGelu: return GeluErf(x);
    case OpKind::kGeluTanh: return GeluTanhF(x);
    case OpKind::kRelu: return x > 0.0f ? x : 0.0f;
    case OpKind::kCast: return x;
    default: return std::nanf("");
  }
}

inline int64_t ScalarUnaryInt(OpKind op, int64_t x) {
  switch (op) {
    case OpKind::kNeg: return -x;
    case OpKind::kAbs: return x < 0 ? -x : x;
    case OpKind::kRelu: return x > 0 ? x : 0;
    default: return x;
  }
}

// Binary op in f32; comparisons return 0/1.
inline float ScalarBinary(OpKind op, float a, float b) {
  switch (op) {
    case OpKind::kAdd: return a + b;
    case OpKind::kSub: return a - b;
    case OpKind::kMul: return a * b;
    case OpKind::kDiv: return a / b;
    case OpKind::kMaximum: return std::fmax(a, b);
    case OpKind::kMinimum: return std::fmin(a, b);
    case OpKind::kPow: return std::pow(a, b);
    case OpKind::kMod: {  // floored, like Python: result has the sign of b
      float r = std::fmod(a, b);
      return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
    }
    case OpKind::kLessThan: return a < b;
    case OpKind::kLessEqual: return a <= b;
    case OpKind::kGreaterThan: return a > b;
    case OpKind::kGreaterEqual: return a >= b;
    case OpKind::kEqual: return a == b;
    case OpKind::kNotEqual: return a != b;
    default: return std::nanf("");
  }
}

inline int64_t ScalarBinaryInt(OpKind op, int64_t a, int64_t b) {
  switch (op) {
    case OpKind::kAdd: return a + b;
    case OpKind::kSub: return a - b;
    case OpKind::kMul: return a * b;
    case OpKind::kDiv: return b == 0 ? 0 : a / b;  // C truncation; division by zero yields 0
    case OpKind::kMaximum: return a > b ? a : b;
    case OpKind::kMinimum: return a < b ? a : b;
    case OpKind::kMod: {
      if (b == 0) return 0;
      int64_t r = a % b;
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
    case OpKind::kLessThan: return a < b;
    case OpKind::kLessEqual: return a <= b;
    case OpKind::kGreaterThan: return a > b;
    case OpKind::kGreaterEqual: return a >= b;
    case OpKind::kEqual: return a == b;
    case OpKind::kNotEqual: return a != b;
    default: return 0;
  }
}

// CUDA C expression templates for the emitter: $0, $1, $2 are the f32 operands. Activations use the
// fast forms the library kernels use (src/kernels/glu.cu): exp2 is one MUFU.EX2 (fz_exp2, ~2 ulp,
// flushes results below 2^-126), sigmoid/silu divide with __fdividef (~2 ulp; exp(-x) = inf gives
// x * 0 = 0) — an IEEE divide is ~10 instructions per element.
// nullptr: the op has no scalar CUDA lowering.
inline const char* CudaScalarExpr(OpKind op) {
  switch (op) {
    case OpKind::kNeg: return "(-$0)";
    case OpKind::kAbs: return "fabsf($0)";
    case OpKind::kExp: return "__expf($0)";
    case OpKind::kExp2: return "fz_exp2($0)";
    case OpKind::kLog: return "__logf($0)";
    case OpKind::kLog2: return "log2f($0)";
    case OpKind::kSqrt: return "sqrtf($0)";
    case OpKind::kRsqrt: return "rsqrtf($0)";
    case OpKind::kRecip: return "(1.0f / $0)";
    case OpKind::kSin: return "sinf($0)";
    case OpKind::kCos: return "cosf($0)";
    case OpKind::kTanh: return "tanhf($0)";
    case OpKind::kSigmoid: return "__fdividef(1.0f, 1.0f + __expf(-$0))";
    case OpKind::kSilu: return "__fdividef($0, 1.0f + __expf(-$0))";
    // torch's formula (and Triton's): 1 + erf. erfcf(-x/√2) keeps the far negative tail's relative
    // accuracy (the CPU reference, GeluErf above, does) but costs about twice as much, and in a fused
    // geglu the activation is the critical path (with erfcf the JIT's geglu 512 x 5632 read slower than
    // torch.compile's; docs/BENCHMARKS.md). It differs from GeluErf by at most |x| * 3e-8 absolute (the
    // rounding of 1 + erf), which matters only where |gelu| < 1e-4 (x < -4).
    case OpKind::kGelu: return "(0.5f * $0 * (1.0f + erff($0 * 0.70710678118654752f)))";
    case OpKind::kGeluTanh: return "(0.5f * $0 * (1.0f + tanhf(0.7978845608028654f * ($0 + 0.044715f * $0 * $0 * $0))))";
    case OpKind::kRelu: return "fmaxf($0, 0.0f)";
    case OpKind::kCast: return "($0)";
    case OpKind::kAdd: return "($0 + $1)";
    case OpKind::kSub: return "($0 - $1)";
    case OpKind::kMul: return "($0 * $1)";
    case OpKind::kDiv: return "($0 / $1)";
    case OpKind::kMaximum: return "fmaxf($0, $1)";
    case OpKind::kMinimum: return "fminf($0, $1)";
    case OpKind::kPow: return "powf($0, $1)";
    case OpKind::kMod: return "fz_fmod_floor($0, $1)";
    case OpKind::kLessThan: return "(float)($0 < $1)";
    case OpKind::kLessEqual: return "(float)($0 <= $1)";
    case OpKind::kGreaterThan: return "(float)($0 > $1)";
    case OpKind::kGreaterEqual: return "(float)($0 >= $1)";
    case OpKind::kEqual: return "(float)($0 == $1)";
    case OpKind::kNotEqual: return "(float)($0 != $1)";
    case OpKind::kWhere: return "($0 != 0.0f ? $1 : $2)";
    default: return nullptr;
  }
}

}  // namespace opfuse
