// Graph texts shared by the fuse_matmul pass tests (tests/passes/fuse_matmul_test.cc) and the GPU
// GEMV tests (tests/gpu/gemv_test.cc).
#pragma once
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace opfuse::testing_graphs {

// A decoder-like block of width h over M rows, norms written as primitives (fuse_patterns finds
// them): rms_norm(x) -> q [h] and k [h/8] (with biases when qk_bias); add_rms_norm(x, r) -> gate/up
// [11h/4] + SwiGLU, its sum s1 also an output; rms_norm(r) -> one `head`-row matmul (an LM head).
// `up_first`: the up projection is written before the gate (the GEMV must still take gate first).
inline std::string NormedBlock(const char* dt, int64_t h, int64_t head, bool qk_bias, bool up_first = false) {
  return fmt::format(R"(graph normed
input x: {0}[M, {1}]
input r: {0}[M, {1}]
param n1: {0}[{1}]
param n2: {0}[{1}]
param n3: {0}[{1}]
param wq: {0}[{1}, {1}]
param wk: {0}[{2}, {1}]
{5}param wg: {0}[{3}, {1}]
param wu: {0}[{3}, {1}]
param head: {0}[{4}, {1}]
eps = constant() {{value=1e-05}}
sq = mul(x, x)
ms = mean(sq)
mse = add(ms, eps)
inv = rsqrt(mse)
xn = mul(x, inv)
h = mul(xn, n1)
q = matmul(h, wq{6}) {{transpose_b=1}}
k = matmul(h, wk{7}) {{transpose_b=1}}
s1 = add(x, r)
sq2 = mul(s1, s1)
ms2 = mean(sq2)
mse2 = add(ms2, eps)
inv2 = rsqrt(mse2)
xn2 = mul(s1, inv2)
h2 = mul(xn2, n2)
{8}sg = silu(g)
act = mul(sg, u)
sq3 = mul(r, r)
ms3 = mean(sq3)
mse3 = add(ms3, eps)
inv3 = rsqrt(mse3)
xn3 = mul(r, inv3)
h3 = mul(xn3, n3)
logits = matmul(h3, head) {{transpose_b=1}}
output q, k, act, logits, s1
)",
                     dt, h, h / 8, h * 11 / 4, head,
                     qk_bias ? fmt::format("param bq: {0}[{1}]\nparam bk: {0}[{2}]\n", dt, h, h / 8) : "",
                     qk_bias ? ", bq" : "", qk_bias ? ", bk" : "",
                     up_first ? "u = matmul(h2, wu) {transpose_b=1}\ng = matmul(h2, wg) {transpose_b=1}\n"
                              : "g = matmul(h2, wg) {transpose_b=1}\nu = matmul(h2, wu) {transpose_b=1}\n");
}

}  // namespace opfuse::testing_graphs
