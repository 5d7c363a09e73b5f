// Shared JIT test cases: graphs whose every node forms one fused group, used by the CPU numerics
// test (tests/numerics/jit_kernel_test.cc) and the GPU test (tests/gpu/jit_gpu_test.cc).
#pragma once
#include <algorithm>
#include <cmath>
#include <ostream>

#include "codegen/kernel_ir.h"
#include "opfuse/graph.h"
#include "ir/host_tensor.h"

namespace opfuse::testing_cases {

struct JitCase {
  const char* name;
  const char* text;
  Bindings bind;
};
// GoogleTest prints parameters: show the case name, not the struct's bytes.
inline void PrintTo(const JitCase& c, std::ostream* os) { *os << c.name; }

// Relative error bounds of a fused kernel (f32 intermediates) vs op-by-op (intermediates stored in
// the graph dtype): a few ulps of the storage type.
inline double Bound(DType t) {
  switch (t) {
    case DType::kBF16: return 3e-2;
    case DType::kF16: return 5e-3;
    default: return 2e-5;
  }
}

inline const JitCase kJitCases[] = {
    {"rms_norm", "graph g\ninput x: bf16[T, 2048]\nparam w: bf16[2048]\ny = rms_norm(x, w) {eps=1e-5}\noutput y\n", {{"T", 5}}},
    {"rms_norm_noweight_f32", "graph g\ninput x: f32[T, 1000]\ny = rms_norm(x)\noutput y\n", {{"T", 3}}},
    {"add_rms_norm", "graph g\ninput x: bf16[T, 2048]\ninput r: bf16[T, 2048]\nparam w: bf16[2048]\ny, s = add_rms_norm(x, r, w) {eps=1e-5}\noutput y, s\n", {{"T", 4}}},
    {"add_rms_norm_wide", "graph g\ninput x: bf16[T, 16384]\ninput r: bf16[T, 16384]\nparam w: bf16[16384]\ny, s = add_rms_norm(x, r, w)\noutput y, s\n", {{"T", 2}}},
    {"layer_norm_odd", "graph g\ninput x: f32[T, 1001]\nparam w: f32[1001]\nparam b: f32[1001]\ny = layer_norm(x, w, b)\noutput y\n", {{"T", 3}}},
    {"softmax_scale_mask", "graph g\ninput x: f32[T, 77]\ninput m: f32[T, 77]\ny = softmax(x, m) {scale=0.125}\noutput y\n", {{"T", 6}}},
    {"softmax_causal_symbolic_width", "graph g\ninput x: f16[2, T, S]\ny = softmax(x) {causal=1}\noutput y\n", {{"T", 5}, {"S", 9}}},
    {"swiglu", "graph g\ninput g: bf16[T, 5632]\ninput u: bf16[T, 5632]\ny = swiglu(g, u)\noutput y\n", {{"T", 3}}},
    {"geglu_f16", "graph g\ninput g: f16[T, 1000]\ninput u: f16[T, 1000]\ny = geglu(g, u)\noutput y\n", {{"T", 3}}},
    {"rope", "graph g\ninput x: bf16[T, 4, 64]\ninput c: bf16[T, 1, 64]\ninput s: bf16[T, 1, 64]\ny = rope(x, c, s)\noutput y\n", {{"T", 5}}},
    {"generic_pointwise_chain",
     "graph g\ninput x: f32[T, 333]\nparam b: f32[333]\nk = constant() {value=0.5}\ne = exp(x)\nm = mul(e, k)\ny = add(m, b)\nz = tanh(y)\noutput z\n", {{"T", 4}}},
    {"generic_silu_mul", "graph g\ninput a: bf16[T, 5632]\ninput u: bf16[T, 5632]\ns = silu(a)\ny = mul(s, u)\noutput y\n", {{"T", 3}}},
    {"generic_row_softmax",
     "graph g\ninput x: bf16[T, 512]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\ny = div(e, s)\noutput y\n", {{"T", 6}}},
    {"generic_where_compare",
     "graph g\ninput x: f32[T, 64]\ninput y: f32[T, 64]\nc = less_than(x, y)\nz = where(c, x, y)\nw = abs(z)\noutput w, c\n", {{"T", 3}}},
    {"generic_general_broadcast", "graph g\ninput x: f32[T, 3, 8]\ninput y: f32[3, 1]\nz = mul(x, y)\nw = exp(z)\noutput w\n", {{"T", 4}}},
    {"generic_row_scalar_input", "graph g\ninput x: bf16[T, 64]\ninput y: bf16[T, 1]\nz = add(x, y)\nw = relu(z)\noutput w\n", {{"T", 5}}},
    {"generic_mean_row_output",
     "graph g\ninput x: f32[T, 256]\nm = mean(x)\ny = sub(x, m)\nq = mul(y, y)\noutput m, q\n", {{"T", 3}}},
    {"generic_cast_chain", "graph g\ninput x: bf16[T, 96]\nf = cast(x) {dtype=f32}\ne = exp2(f)\nh = cast(e) {dtype=f16}\noutput h\n", {{"T", 2}}},
    // bf16 h2048: the prefill function launders its weight and bias packs each row
    // (kMaxHoistedChannelFloats). Appended: tests address the cases above by index.
    {"layer_norm_bf16", "graph g\ninput x: bf16[T, 2048]\nparam w: bf16[2048]\nparam b: bf16[2048]\ny = layer_norm(x, w, b)\noutput y\n", {{"T", 5}}},
    // RoPE's tables and rotate_half partner load as packs (emitter v9): f32 tables beside bf16 x (32-byte
    // table packs), a half width that is not a multiple of the pack (the partner stays per element), and a
    // row kernel with a row-contiguous broadcast input ([T, 1, C] beside [T, 4, C]), symbolic width too.
    {"rope_f32_tables", "graph g\ninput x: bf16[T, 8, 128]\ninput c: f32[T, 1, 128]\ninput s: f32[T, 1, 128]\ny = rope(x, c, s)\noutput y\n", {{"T", 3}}},
    {"rope_odd_half", "graph g\ninput x: bf16[T, 2, 24]\ninput c: bf16[T, 1, 24]\ninput s: bf16[T, 1, 24]\ny = rope(x, c, s)\noutput y\n", {{"T", 5}}},
    {"generic_row_contiguous_reduce", "graph g\ninput x: bf16[T, 4, 256]\ninput y: bf16[T, 1, 256]\nm = mul(x, y)\nmx = max(m)\nq = sub(m, mx)\noutput q\n", {{"T", 3}}},
    // ... and at an odd width with enough rows for the prefill function (>= 4 x SMs): window mode, the
    // broadcast input loaded element by element at each row's shifted columns.
    {"generic_row_contiguous_window", "graph g\ninput x: bf16[T, 2, 4001]\ninput y: bf16[T, 1, 4001]\nm = mul(x, y)\nmx = max(m)\nq = sub(m, mx)\noutput q\n", {{"T", 270}}},
    {"generic_row_contiguous_symbolic", "graph g\ninput x: f16[T, 2, S]\ninput y: f16[T, 1, S]\nm = mul(x, y)\nmx = max(m)\nq = sub(m, mx)\noutput q\n", {{"T", 3}, {"S", 40}}},
    // narrow rows (a row group of 8 threads at both shapes: one function) at a decode row count above
    // a decode-sized block's rows: every row of the function's compiled block must be launched.
    {"generic_row_narrow_logsumexp", "graph g\ninput x: bf16[T, 20]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\nl = log(s)\ny = add(l, m)\noutput y\n", {{"T", 17}}},
    // rows past the register path at a static width: the looped kernel (kLoopedRowThreads threads, several
    // vectors per thread per step, a partial last step): odd width (1-element vectors), f32 4-element
    // vectors, two 16-byte inputs with two outputs.
    {"generic_wide_logsumexp", "graph g\ninput x: bf16[T, 20011]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\nl = log(s)\ny = add(l, m)\noutput y\n", {{"T", 3}}},
    {"layer_norm_wide_f32", "graph g\ninput x: f32[T, 40000]\nparam w: f32[40000]\nparam b: f32[40000]\ny = layer_norm(x, w, b)\noutput y\n", {{"T", 2}}},
    // a prefill row group of 96 threads (3072 bf16: 384 vectors, 4 per thread): the block holds whole row groups only
    {"rms_norm_tpr96", "graph g\ninput x: bf16[T, 3072]\nparam w: bf16[3072]\ny = rms_norm(x, w)\noutput y\n", {{"T", 7}}},
    {"add_rms_norm_very_wide", "graph g\ninput x: bf16[T, 70000]\ninput r: bf16[T, 70000]\nparam w: bf16[70000]\ny, s = add_rms_norm(x, r, w)\noutput y, s\n", {{"T", 2}}},
    // odd widths (1-element vectors): the prefill function with per-column weight and bias, the decode
    // function with early stores kept as packs, a row scalar output, f32, and the split function over
    // an odd vocabulary width (many vectors per thread)
    {"layer_norm_odd_prefill", "graph g\ninput x: bf16[T, 3251]\nparam w: bf16[3251]\nparam b: bf16[3251]\ny = layer_norm(x, w, b)\noutput y\n", {{"T", 600}}},
    {"add_rms_norm_odd_decode", "graph g\ninput x: bf16[T, 4999]\ninput r: bf16[T, 4999]\nparam w: bf16[4999]\ny, s = add_rms_norm(x, r, w)\noutput y, s\n", {{"T", 3}}},
    {"logsumexp_odd_prefill", "graph g\ninput x: bf16[T, 863]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\nl = log(s)\ny = add(l, m)\noutput y\n", {{"T", 600}}},
    {"softmax_odd_f32", "graph g\ninput x: f32[T, 1001]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\ny = div(e, s)\noutput y\n", {{"T", 7}}},
    {"softmax_odd_split", "graph g\ninput x: bf16[T, 147823]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\ny = div(e, s)\noutput y\n", {{"T", 3}}},
    // many rows past the register path: one or two blocks per row
    {"rms_norm_split_many", "graph g\ninput x: bf16[T, 32000]\nparam w: bf16[32000]\ny = rms_norm(x, w)\noutput y\n", {{"T", 300}}},
};

// The kernel of a graph whose every node forms one fused group (how each case is written).
inline StatusOr<codegen::Kernel> WholeGraphKernel(const Graph& g) {
  std::vector<int> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) nodes.push_back(static_cast<int>(i));
  return codegen::BuildKernel(g, nodes);
}

// ||out - ref|| / ||ref|| over all elements.
inline double RelErr(const HostTensor& out, const HostTensor& ref) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    double d = out.get(i) - ref.get(i);
    num += d * d;
    den += ref.get(i) * ref.get(i);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace opfuse::testing_cases
