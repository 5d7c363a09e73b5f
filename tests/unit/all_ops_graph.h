// A graph built with GraphBuilder that uses every op of ops.def once or more, with representative
// attributes of every kind (int, float incl. inf/nan, string, dim list with symbols and -1).
// Shared by the text-format round-trip and builder tests; AllOpsCovered() lets a test fail when
// ops.def gains a row that this graph does not exercise.
#pragma once
#include <cmath>
#include <limits>
#include <set>

#include "opfuse/graph.h"

namespace opfuse::testing {

inline StatusOr<Graph> BuildAllOpsGraph() {
  GraphBuilder b("all_ops");
  const Dim T = Dim::Sym("T"), S = Dim::Sym("S");
  int x = b.Input("x", DType::kF32, {T, 64});
  int y = b.Input("y", DType::kF32, {T, 64});
  int cond = b.Input("cond", DType::kBool, {T, 64});
  int ids = b.Input("ids", DType::kI64, {T});
  int xi = b.Input("xi", DType::kI32, {T, 64});
  int q = b.Input("q", DType::kBF16, {T, 4, 16});
  int k = b.Input("k", DType::kBF16, {S, 2, 16});
  int v = b.Input("v", DType::kBF16, {S, 2, 16});
  int w = b.Param("w", DType::kF32, {64});
  int bias = b.Param("bias", DType::kF32, {64});
  int wm = b.Param("wm", DType::kF32, {64, 32});
  int wt = b.Param("wt", DType::kF32, {32, 64});
  int bm = b.Param("bm", DType::kF32, {32});
  int table = b.Param("table", DType::kF16, {100, 64});
  std::vector<int> outs;
  // unary
  for (OpKind op : {OpKind::kNeg, OpKind::kAbs, OpKind::kExp, OpKind::kExp2, OpKind::kLog, OpKind::kLog2,
                    OpKind::kSqrt, OpKind::kRsqrt, OpKind::kRecip, OpKind::kSin, OpKind::kCos, OpKind::kTanh,
                    OpKind::kSigmoid, OpKind::kSilu, OpKind::kGelu, OpKind::kGeluTanh, OpKind::kRelu})
    outs.push_back(b.Op(op, {x}));
  outs.push_back(b.Neg({xi}));
  outs.push_back(b.Cast({x}, {{"dtype", std::string("bf16")}}));
  outs.push_back(b.Cast({xi}, {{"dtype", std::string("f32")}}));
  // binary and where
  for (OpKind op : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kMaximum, OpKind::kMinimum,
                    OpKind::kPow, OpKind::kMod, OpKind::kLessThan, OpKind::kLessEqual, OpKind::kGreaterThan,
                    OpKind::kGreaterEqual, OpKind::kEqual, OpKind::kNotEqual})
    outs.push_back(b.Op(op, {x, y}));
  outs.push_back(b.Mod({xi, xi}));
  outs.push_back(b.Where({cond, x, y}));
  // broadcasting against a weak f32 scalar constant and a row vector
  int half = b.Constant(0.5);
  outs.push_back(b.Mul({x, half}));
  outs.push_back(b.Add({x, w}));
  // reductions
  for (OpKind op : {OpKind::kSum, OpKind::kMax, OpKind::kMean, OpKind::kArgmax}) outs.push_back(b.Op(op, {x}));
  // composites
  outs.push_back(b.RmsNorm({x, w}, {{"eps", 1e-5}}));
  outs.push_back(b.RmsNorm({x}));
  auto two = b.OpN(OpKind::kAddRmsNorm, {x, y, w}, {{"eps", 1e-6}});
  outs.insert(outs.end(), two.begin(), two.end());
  outs.push_back(b.LayerNorm({x, w, bias}, {{"eps", 1e-5}}));
  outs.push_back(b.Softmax({x}, {{"scale", 0.125}, {"causal", int64_t{1}}}));
  outs.push_back(b.Softmax({x, y}));
  outs.push_back(b.Swiglu({x, y}));
  outs.push_back(b.Geglu({x, y}));
  int cos = b.Input("cos_table", DType::kF32, {T, 64});
  int sin = b.Input("sin_table", DType::kF32, {T, 64});
  outs.push_back(b.Rope({x, cos, sin}));
  // library
  outs.push_back(b.Matmul({x, wm}));
  outs.push_back(b.Matmul({x, wt, bm}, {{"transpose_b", int64_t{1}}}));
  outs.push_back(b.Attention({q, k, v}, {{"causal", int64_t{1}}, {"scale", 0.25}}));
  outs.push_back(b.Embedding({table, ids}));
  {  // kv_attention: its caches are state inputs that only it reads
    const Dim B = Dim::Sym("B"), L = Dim::Sym("L");
    int kq = b.Input("kv_q", DType::kF16, {B, T, 8, 16});
    int kk = b.Input("kv_k", DType::kF16, {B, T, 2, 16});
    int kv = b.Input("kv_v", DType::kF16, {B, T, 2, 16});
    int kc = b.Input("kv_k_cache", DType::kF16, {B, L, 2, 16});
    int vc = b.Input("kv_v_cache", DType::kF16, {B, L, 2, 16});
    int pos = b.Input("kv_pos", DType::kI32, {B});
    outs.push_back(b.KvAttention({kq, kk, kv, kc, vc, pos}, {{"scale", 0.25}}));
  }
  // collectives (world 1: the identity; a tensor-parallel rank's graph has world > 1)
  outs.push_back(b.AllReduce({x}, {{"world", int64_t{1}}}));
  outs.push_back(b.AllGather({x}, {{"world", int64_t{1}}, {"axis", int64_t{-1}}}));
  // views
  outs.push_back(b.Reshape({x}, {{"shape", DimList{T, 8, -1}}}));
  outs.push_back(b.Transpose({x}, {{"perm", DimList{1, 0}}}));
  outs.push_back(b.Slice({x}, {{"axis", int64_t{1}}, {"start", int64_t{0}}, {"end", int64_t{-32}}}));
  outs.push_back(b.Concat({x, y, x}, {{"axis", int64_t{-1}}}));
  // sources: every attribute value form
  outs.push_back(b.Constant(-std::numeric_limits<double>::infinity(), DType::kF16));
  outs.push_back(b.Constant(std::numeric_limits<double>::quiet_NaN()));
  outs.push_back(b.Constant(1e-310));  // a subnormal double must print and read back
  outs.push_back(b.Op(OpKind::kConstant, {}, {{"value", int64_t{-3}}, {"dtype", std::string("i32")}}));
  for (int o : outs) b.Output(o);
  return b.Build();
}

inline std::set<OpKind> OpsUsed(const Graph& g) {
  std::set<OpKind> used;
  for (const auto& n : g.nodes) used.insert(n.op);
  return used;
}

}  // namespace opfuse::testing
