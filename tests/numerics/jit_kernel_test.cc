// Generated kernels: for every pattern and a set of generic groups, the kernel IR built from the
// group (1) emits CUDA that NVRTC compiles for sm_90, aligned and unaligned variants, and (2) run
// by the CPU interpreter equals the op-by-op CPU reference within per-dtype bounds, on fresh signed
// random inputs with poisoned outputs. This is how CI checks generated-kernel semantics with no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "codegen/cuda_emitter.h"
#include "codegen/kernel_interpreter.h"
#include "codegen/kernel_ir.h"
#include "jit/nvrtc_compiler.h"
#include "runtime/cpu/cpu_executor.h"

namespace opfuse {
namespace {

struct JitCase {
  const char* name;
  const char* text;
  Bindings bind;
};

// Relative error bounds of a fused kernel (f32 intermediates) vs op-by-op (intermediates stored in
// the graph dtype): a few ulps of the storage type.
double Bound(DType t) {
  switch (t) {
    case DType::kBF16: return 3e-2;
    case DType::kF16: return 5e-3;
    default: return 2e-5;
  }
}

const JitCase kCases[] = {
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
};

double RelErr(const HostTensor& out, const HostTensor& ref) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    double d = out.get(i) - ref.get(i);
    num += d * d;
    den += ref.get(i) * ref.get(i);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

std::vector<int> AllNodes(const Graph& g) {
  std::vector<int> n;
  for (size_t i = 0; i < g.nodes.size(); ++i) n.push_back(static_cast<int>(i));
  return n;
}

class JitKernelTest : public ::testing::TestWithParam<JitCase> {};

TEST_P(JitKernelTest, NvrtcCompilesAlignedAndUnaligned) {
  if (!jit::NvrtcAvailable()) GTEST_SKIP() << "built without NVRTC";
  auto g = ParseGraph(GetParam().text);
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto k = codegen::BuildKernel(*g, AllNodes(*g));
  ASSERT_TRUE(k.ok()) << k.status().message();
  for (bool aligned : {true, false}) {
    auto e = codegen::EmitCuda(*k, {aligned, 256});
    ASSERT_TRUE(e.ok()) << e.status().message();
    EXPECT_NE(e->source.find("// opfuse generated kernel " + e->function), std::string::npos);
    EXPECT_EQ(e->source.rfind("#include", 0), std::string::npos) << "generated source must be self-contained";
    if (!aligned) EXPECT_EQ(e->vec, 1);
    auto c = jit::CompileCuda(e->source, e->function, "sm_90");
    ASSERT_TRUE(c.ok()) << c.status().message() << "\n" << e->source;
    EXPECT_GT(c->cubin.size(), 1000u);
  }
}

TEST_P(JitKernelTest, InterpreterMatchesOpByOpReference) {
  auto g = ParseGraph(GetParam().text);
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto k = codegen::BuildKernel(*g, AllNodes(*g));
  ASSERT_TRUE(k.ok()) << k.status().message();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << "\n" << k->ToString());
  auto inputs = RandomInputs(*g, GetParam().bind, seed);
  CpuRunOptions opts;
  opts.bindings = GetParam().bind;
  auto ref = RunGraphCpu(*g, inputs, opts);
  ASSERT_TRUE(ref.ok()) << ref.status().message();

  std::vector<const HostTensor*> kin;
  for (const auto& t : k->inputs) kin.push_back(&inputs.at(t.name));
  std::vector<HostTensor> kout;
  for (const auto& o : k->outputs) {
    auto shape = BindShape(o.tensor.type.shape, GetParam().bind);
    ASSERT_TRUE(shape.ok());
    kout.emplace_back(o.tensor.type.dtype, *shape);
    Poison(kout.back());
  }
  std::vector<HostTensor*> kout_ptrs;
  for (auto& t : kout) kout_ptrs.push_back(&t);
  Status st = codegen::RunKernelCpu(*k, kin, kout_ptrs, GetParam().bind);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(k->outputs.size(), ref->size());
  for (size_t o = 0; o < k->outputs.size(); ++o) {
    const auto& name = k->outputs[o].tensor.name;
    const HostTensor& want = ref->at(name);
    ASSERT_EQ(kout[o].shape, want.shape) << name;
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_FALSE(std::isnan(kout[o].get(i)) && !std::isnan(want.get(i))) << name << ": element " << i << " not written";
    if (want.dtype == DType::kBool) {
      for (int64_t i = 0; i < want.numel(); ++i) ASSERT_EQ(kout[o].get(i), want.get(i)) << name << " at " << i;
      continue;
    }
    double err = RelErr(kout[o], want);
    EXPECT_LE(err, Bound(want.dtype)) << name << " (" << DTypeName(want.dtype) << ")";
    EXPECT_GT(err, -1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, JitKernelTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(JitKernel, LibraryAndViewOpsAreNotLowered) {
  auto g = ParseGraph("graph g\ninput a: f32[T, 64]\nparam b: f32[64, 32]\nc = matmul(a, b)\noutput c\n");
  ASSERT_TRUE(g.ok());
  auto k = codegen::BuildKernel(*g, std::vector<int>{0});
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(k.status().message().find("matmul is a library op"), std::string::npos) << k.status().message();
}

TEST(JitKernel, NameAndSpecialisation) {
  auto g = ParseGraph("graph g\ninput x: bf16[T, 2048]\ninput r: bf16[T, 2048]\nparam w: bf16[2048]\ny, s = add_rms_norm(x, r, w)\noutput y, s\n");
  ASSERT_TRUE(g.ok());
  auto k = codegen::BuildKernel(*g, std::vector<int>{0});
  ASSERT_TRUE(k.ok()) << k.status().message();
  EXPECT_EQ(k->name, "fz_add_rms_norm_bf16_h2048");
  EXPECT_EQ(k->symbols, std::vector<std::string>{"T"});  // the token count is an argument, not baked in
  auto e = codegen::EmitCuda(*k);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->vec, 8);  // 16-byte accesses of bf16
  EXPECT_TRUE(e->row_in_registers);
  EXPECT_NE(e->source.find("long long s_T"), std::string::npos);
}

}  // namespace
}  // namespace opfuse
