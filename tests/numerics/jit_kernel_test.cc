// Generated kernels: for every pattern and a set of generic groups, the kernel IR built from the
// group (1) emits CUDA that NVRTC compiles for sm_90, aligned and unaligned variants, and (2) run
// by the CPU interpreter equals the op-by-op CPU reference within per-dtype bounds, on fresh signed
// random inputs with poisoned outputs. This is how CI checks generated-kernel semantics with no GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "codegen/cuda_emitter.h"
#include "codegen/kernel_interpreter.h"
#include "codegen/kernel_ir.h"
#include "jit/cubin_info.h"
#include "jit/nvrtc_compiler.h"
#include "runtime/cpu/cpu_executor.h"
#include "target/launch_shape.h"
#include "jit_cases.h"

namespace opfuse {
namespace {

using testing_cases::RelErr;


using testing_cases::Bound;
using testing_cases::JitCase;

class JitKernelTest : public ::testing::TestWithParam<JitCase> {};

// The case's whole-graph kernel emitted for aligned (first) and unaligned (second) pointers.
void EmitAlignedAndUnaligned(const JitCase& c, std::vector<codegen::EmittedKernel>* out) {
  auto g = ParseGraph(c.text);
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto k = testing_cases::WholeGraphKernel(*g);
  ASSERT_TRUE(k.ok()) << k.status().message();
  for (bool aligned : {true, false}) {
    auto e = codegen::EmitCuda(*k, {aligned, 256});
    ASSERT_TRUE(e.ok()) << e.status().message();
    out->push_back(std::move(*e));
  }
}

TEST_P(JitKernelTest, NvrtcCompilesAlignedAndUnaligned) {
  if (!jit::NvrtcAvailable()) GTEST_SKIP() << "built without NVRTC";
  std::vector<codegen::EmittedKernel> emitted;
  ASSERT_NO_FATAL_FAILURE(EmitAlignedAndUnaligned(GetParam(), &emitted));
  for (size_t i = 0; i < emitted.size(); ++i) {
    const auto& e = emitted[i];
    EXPECT_NE(e.source.find("// opfuse generated kernel " + e.function), std::string::npos);
    EXPECT_EQ(e.source.rfind("#include", 0), std::string::npos) << "generated source must be self-contained";
    if (i == 1) {  // unaligned
      EXPECT_EQ(e.vec, 1);
    }
    auto c = jit::CompileCuda(e.source, e.function, "sm_90");
    ASSERT_TRUE(c.ok()) << c.status().message() << "\n" << e.source;
    EXPECT_GT(c->cubin.size(), 1000u);
  }
}

// Generated kernels never tag L2 lines evict_last: such lines survive an L2 flush into the next timed
// call, and bench ops' timing (src/bench/cuda/timing.h) leaves tags alone, while tools/bench_peer.py
// undoes those torch.compile's kernels leave (L2Tags). Evict-first hints are fine.
TEST_P(JitKernelTest, EmittedSourceNeverTagsEvictLast) {
  std::vector<codegen::EmittedKernel> emitted;
  ASSERT_NO_FATAL_FAILURE(EmitAlignedAndUnaligned(GetParam(), &emitted));
  for (const auto& e : emitted) {
    EXPECT_EQ(e.source.find("evict_last"), std::string::npos) << e.source;
    EXPECT_EQ(e.source.find("evict_unchanged"), std::string::npos) << e.source;
  }
}

TEST_P(JitKernelTest, InterpreterMatchesOpByOpReference) {
  auto g = ParseGraph(GetParam().text);
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto k = testing_cases::WholeGraphKernel(*g);
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
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, JitKernelTest, ::testing::ValuesIn(testing_cases::kJitCases),
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

// Occurrences of `what` in `s` (emitted-source checks).
size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// The kernel of a one-group graph, emitted with `o`.
StatusOr<codegen::EmittedKernel> EmitGraph(const std::string& graph, const codegen::EmitOptions& o) {
  OPFUSE_ASSIGN_OR_RETURN(Graph g, ParseGraph(graph));
  OPFUSE_ASSIGN_OR_RETURN(codegen::Kernel k, codegen::BuildKernel(g, std::vector<int>{0}));
  return codegen::EmitCuda(k, o);
}

// Graph text fused whole (every node one kernel: testing_cases::WholeGraphKernel) and emitted with `o`.
StatusOr<codegen::EmittedKernel> EmitWholeGraph(const std::string& graph, const codegen::EmitOptions& o) {
  OPFUSE_ASSIGN_OR_RETURN(Graph g, ParseGraph(graph));
  OPFUSE_ASSIGN_OR_RETURN(codegen::Kernel k, testing_cases::WholeGraphKernel(g));
  return codegen::EmitCuda(k, o);
}

// The source from the decode function's definition on (the prefill function and preamble before it).
std::string DecodeSource(const codegen::EmittedKernel& e) {
  const size_t at = e.source.find(e.decode_function + "(");
  return at == std::string::npos ? std::string() : e.source.substr(at);
}

// The prefill function alone: from its definition to the decode function's, or to the end where the
// decode shape is the prefill one (a single function).
std::string PrefillSource(const codegen::EmittedKernel& e) {
  const size_t at = e.source.find(e.function + "(");
  if (at == std::string::npos) return std::string();
  const size_t end = e.decode_function == e.function ? std::string::npos : e.source.find(e.decode_function + "(");
  return e.source.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// The decode function's VPT and vector (from its source: "constexpr int TPR = .., VPT = ..;" and its
// packs "fz_pack<T, N>", or 1 where it loads element by element).
int DecodeVpt(const std::string& decode) {
  const size_t at = decode.find("VPT = ");
  return at == std::string::npos ? 0 : std::stoi(decode.substr(at + 6));
}
int DecodeVec(const std::string& decode) {
  const size_t at = decode.find("fz_pack<");
  if (at == std::string::npos) return 1;
  return std::stoi(decode.substr(decode.find(", ", at) + 2));
}

// The emitted source compiles with NVRTC for `arch` (nothing to check in a build without NVRTC).
void ExpectCompiles(const std::string& source, const std::string& function, const char* arch = "sm_90") {
  if (!jit::NvrtcAvailable()) return;
  auto cu = jit::CompileCuda(source, function, arch);
  EXPECT_TRUE(cu.ok()) << arch << ": " << cu.status().message() << "\n" << source;
}

// The pointwise decode function drops its bounds check only where a static shape's vectors fill blocks
// of 256 (and so of 128) exactly: the launcher's grid then covers them with no thread left over.
TEST(JitKernel, PointwiseDecodeExactGridHasNoGuard) {
  struct Case {
    int rows, cols;
    bool guard;
  };
  // bf16, 2 elements per vector: 8 x 5632 = 22528 vectors = 88 x 256; 3 x 5632 = 8448 = 33 x 256;
  // 1 x 4000 = 2000 vectors (not a multiple of 128); 5 x 96 = 240 vectors
  const Case cases[] = {{8, 5632, false}, {3, 5632, false}, {1, 4000, true}, {5, 96, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} x {}", c.rows, c.cols));
    auto e = EmitGraph(fmt::format("graph g\ninput a: bf16[{0}, {1}]\ninput b: bf16[{0}, {1}]\ny = swiglu(a, b)\noutput y\n",
                                   c.rows, c.cols),
                       codegen::EmitOptions{});
    ASSERT_TRUE(e.ok()) << e.status().message();
    ASSERT_EQ(e->decode_vec, 2);
    const std::string decode = DecodeSource(*e);
    EXPECT_EQ(decode.find("if (v >= NV) return;") != std::string::npos, c.guard) << decode;
    EXPECT_EQ(decode.find("covers the vectors exactly") != std::string::npos, !c.guard) << decode;
    ExpectCompiles(e->source, e->function);
  }
}

// The functions the launcher takes at decode sizes start with the PDL prologue (the executor launches
// exactly those with the attribute): the decode function, and the prefill function only where it is
// the sole function (looped rows); a prefill function beside a decode one has none. Row, pointwise
// and looped kernels, aligned and not; the prologue compiles for sm_90 and, as no-ops, for sm_80.
TEST(JitKernel, PdlPrologueOpensTheDecodeSizeFunctions) {
  struct Case {
    const char* graph;
    bool sole_function;
  };
  const Case cases[] = {
      {"graph g\ninput x: bf16[T, 2048]\nparam w: bf16[2048]\ny = rms_norm(x, w) {eps=1e-05}\noutput y\n", false},
      {"graph g\ninput a: bf16[8, 5632]\ninput b: bf16[8, 5632]\ny = swiglu(a, b)\noutput y\n", false},
      {"graph g\ninput x: f32[T, 100000]\ny = softmax(x)\noutput y\n", true},  // looped row kernel
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.graph);
    for (bool aligned : {true, false}) {
      codegen::EmitOptions o;
      o.aligned = aligned;
      auto e = EmitGraph(c.graph, o);
      ASSERT_TRUE(e.ok()) << e.status().message();
      const bool separate = !e->decode_function.empty() && e->decode_function != e->function;
      if (aligned) {
        ASSERT_EQ(separate, !c.sole_function) << e->source;
      }
      EXPECT_EQ(e->PdlIn(e->function), !separate);
      if (separate) {
        EXPECT_TRUE(e->PdlIn(e->decode_function));
      }
      const size_t prologues = Count(e->source, ") {\n  fz::pdl_enter();");
      EXPECT_EQ(prologues, 1u) << e->source;  // the decode function, or the sole one
      if (separate) {
        EXPECT_NE(DecodeSource(*e).find(") {\n  fz::pdl_enter();"), std::string::npos);
        EXPECT_EQ(PrefillSource(*e).find("fz::pdl_enter();"), std::string::npos);
      }
      if (aligned)
        for (const char* arch : {"sm_90", "sm_80"}) ExpectCompiles(e->source, e->function, arch);
    }
  }
}

// add_rms_norm's sum needs no reduction: in the decode function it is stored right after the row's
// loads and its stored packs are kept and read again by the reduction and the epilogue (the x /
// residual packs are not converted again); in the prefill function it is stored in the epilogue from
// the packs. Both dtypes compile.
TEST(JitKernel, EarlyStoreAndReload) {
  for (const char* dt : {"bf16", "f32"}) {
    SCOPED_TRACE(dt);
    const std::string graph = fmt::format("graph g\ninput x: {0}[512, 4096]\ninput r: {0}[512, 4096]\nparam w: {0}[4096]\n"
                                          "y, s = add_rms_norm(x, r, w)\noutput y, s\n", dt);
    auto e = EmitGraph(graph, {});
    ASSERT_TRUE(e.ok()) << e.status().message();
    ASSERT_TRUE(e->row_in_registers);
    // early stores only in a decode function of its own (bf16: t512x2 of 8-byte packs beside the prefill t256x2)
    const size_t functions = e->decode_function == e->function ? 1 : 2;
    const size_t early_fns = functions == 2 ? 1 : 0;
    if (std::string(dt) == "bf16") {
      EXPECT_EQ(functions, 2u) << e->source;
    }
    EXPECT_EQ(Count(e->source, "stored before the first one"), early_fns) << e->source;
    EXPECT_EQ(Count(e->source, "sv1[it].store(out1, r * C + c0)"), early_fns) << e->source;
    // the kept sum is read by pass 1 and the epilogue; the packs of x only by the early loop there
    // (pass 1 + epilogue where the sum is stored late: the prefill function)
    EXPECT_EQ(Count(e->source, "= sv1[it].get(j)"), 2 * early_fns) << e->source;
    EXPECT_EQ(Count(e->source, "= xr0[it].get(j)"), 2 * functions - early_fns) << e->source;
    if (functions == 2) {
      EXPECT_EQ(Count(PrefillSource(*e), "stored before the first one"), 0u);
      EXPECT_EQ(Count(DecodeSource(*e), "stored before the first one"), 1u);
    }
    ExpectCompiles(e->source, e->function);
  }
}

// The decode function's own habits (measured against torch.compile's kernels, docs/BENCHMARKS.md's
// history): 32-bit indices, evict-first row loads, no guards where the row group covers the row
// exactly, and for add_rms_norm 4096 bf16 (a 512-thread group, one 16-byte vector each) two 8-byte
// packs per thread with the weight loaded in the epilogue. The prefill function keeps 64-bit indices,
// plain loads and its weight loaded before the rows; a width the group does not cover exactly keeps
// its guards.
TEST(JitKernel, DecodeFunctionHabits) {
  const char* arn = "graph g\ninput x: bf16[T, 4096]\ninput r: bf16[T, 4096]\nparam w: bf16[4096]\ny, s = add_rms_norm(x, r, w)\noutput y, s\n";
  auto emitted = EmitGraph(arn, {});
  ASSERT_TRUE(emitted.ok()) << emitted.status().message();
  const codegen::EmittedKernel& e = *emitted;
  ASSERT_NE(e.decode_function, e.function);
  const std::string decode = DecodeSource(e);
  ASSERT_FALSE(decode.empty());
  const std::string prefill = PrefillSource(e);
  EXPECT_NE(prefill.find("const long long C = 4096LL;"), std::string::npos);
  EXPECT_NE(decode.find("const int C = (int)(4096LL);"), std::string::npos) << decode;
  EXPECT_EQ(Count(decode, "long long r0"), 0u);
  EXPECT_EQ(Count(prefill, "].load_ef(in"), 0u);
  EXPECT_EQ(Count(prefill, "fz::evict_first()"), 0u);
  EXPECT_EQ(Count(decode, "].load_ef(in"), 2u) << decode;
  EXPECT_EQ(Count(decode, "fz::evict_first()"), 1u);
  EXPECT_EQ(Count(decode, "c0 < C"), 0u) << decode;  // 512 threads x 8 elements cover 4096 exactly
  EXPECT_EQ(e.decode_threads, 512);
  EXPECT_EQ(Count(decode, "fz_pack<fz_bf16, 4> xr0[VPT]"), 1u) << decode;  // two 8-byte packs per thread
  EXPECT_EQ(Count(decode, "fz_pack<fz_bf16, 8> xr0[VPT]"), 0u) << decode;
  EXPECT_EQ(Count(decode, "wr2[it].load(in2"), 0u) << decode;  // the weight: in the epilogue
  EXPECT_EQ(Count(decode, "fz_load<4>(in2, c0, x2)"), 1u) << decode;
  EXPECT_EQ(Count(prefill, "wr2[it].load(in2"), 1u) << prefill;  // the weight: before the rows
  ExpectCompiles(e.source, e.function);
  // 4000 columns: 500 vectors of 8 over a 512-thread group, so the decode function keeps its guards
  auto odd = EmitGraph("graph g\ninput x: bf16[T, 4000]\nparam w: bf16[4000]\ny = rms_norm(x, w)\noutput y\n", {});
  ASSERT_TRUE(odd.ok()) << odd.status().message();
  const std::string odd_decode = DecodeSource(*odd);
  EXPECT_GT(Count(odd_decode, "c0 < C"), 0u) << odd_decode;
}

// The prefill function launders its per-column packs at the top of each row where their f32 copies
// would exceed kMaxHoistedChannelFloats (layer_norm's weight and bias: ptxas sm_90 then gives the
// h2048 kernel 80 registers instead of 127); rms_norm's one weight stays as it was; never in the
// decode function (no row loop).
TEST(JitKernel, ChannelPacksLaunderedWhereTheyWouldBeHoisted) {
  struct Case {
    const char* graph;
    size_t launders;
  };
  const char* ln = "graph g\ninput x: bf16[T, 2048]\nparam w: bf16[2048]\nparam b: bf16[2048]\n"
                   "y = layer_norm(x, w, b) {eps=1e-05}\noutput y\n";
  const char* rms = "graph g\ninput x: bf16[T, 2048]\nparam w: bf16[2048]\ny = rms_norm(x, w)\noutput y\n";
  for (const Case& c : {Case{ln, 1}, Case{rms, 0}}) {
    SCOPED_TRACE(c.graph);
    auto e = EmitGraph(c.graph, {});
    ASSERT_TRUE(e.ok()) << e.status().message();
    ASSERT_TRUE(e->row_in_registers);
    ASSERT_NE(e->decode_function, e->function);
    const std::string decode = DecodeSource(*e);
    const std::string prefill = PrefillSource(*e);
    EXPECT_EQ(Count(prefill, "not once before the loop"), c.launders) << prefill;
    EXPECT_EQ(Count(decode, "not once before the loop"), 0u) << decode;
    if (c.launders) {  // after the loop header, before the row's loads
      const size_t loop = prefill.find("for (long long r0"), l = prefill.find("[it].launder(); }"),
                   row = prefill.find("xr0[it].load(in0");
      EXPECT_LT(loop, l);
      EXPECT_LT(l, row);
      EXPECT_NE(prefill.find("wr1[it].launder(); wr2[it].launder();"), std::string::npos) << prefill;
    }
    ExpectCompiles(e->source, e->function);
  }
}

// The prefill function of a row kernel without per-column inputs (softmax) has no row loop — its
// grid covers the row groups, and a loop kept its state live (more registers, fewer resident blocks) —
// while the norms' (a weight loaded before the row) keep the grid-stride loop, which measured faster.
TEST(JitKernel, PrefillRowLoopOnlyWithPerColumnInputs) {
  struct Case {
    const char* graph;
    bool loop;
  };
  const char* sm = "graph g\ninput x: bf16[T, 4096]\ny = softmax(x)\noutput y\n";
  const char* rms = "graph g\ninput x: bf16[T, 4096]\nparam w: bf16[4096]\ny = rms_norm(x, w)\noutput y\n";
  for (const Case& c : {Case{sm, false}, Case{rms, true}}) {
    SCOPED_TRACE(c.graph);
    auto e = EmitGraph(c.graph, {});
    ASSERT_TRUE(e.ok()) << e.status().message();
    ASSERT_TRUE(e->row_in_registers);
    const std::string prefill = PrefillSource(*e);
    ASSERT_FALSE(prefill.empty());
    EXPECT_EQ(prefill.find("gridDim.x * rpb") != std::string::npos, c.loop) << prefill;
    EXPECT_EQ(prefill.find("if (r0 >= R) return;") != std::string::npos, !c.loop) << prefill;
    ExpectCompiles(e->source, e->function);
  }
}

// RoPE's [T, 1, D] tables load as packs at the row's offset (no 64-bit remainder by T per access), and
// rotate_half's partner as one pack from the other half, in the prefill and decode functions; where the
// half width is not a multiple of the pack the partner stays per element. A row kernel's [T, 1, C]
// broadcast input loads as packs too. (Per-element table and partner loads left the JIT's RoPE well
// behind the library kernel; docs/BENCHMARKS.md, issue 4.)
TEST(JitKernel, RowContiguousBroadcastAndRotHalfLoadAsPacks) {
  struct Case {
    const char* graph;
    std::vector<std::string> present, absent;
  };
  const Case cases[] = {
      {"graph g\ninput x: bf16[16384, 32, 64]\ninput c: bf16[16384, 1, 64]\ninput s: bf16[16384, 1, 64]\ny = rope(x, c, s)\noutput y\n",
       {"fz_load<8>(in1, ", "fz_load<8>(in2, ", "float xh0[8];", "(c0 < C / 2 ? -xh0[j] : xh0[j])", "fz_load<2>(in1, ", "float xh0[2];"},
       {"% 16384", "fz_f32(in1[", "fz_f32(in0["}},
      {"graph g\ninput x: bf16[T, 2, 24]\ninput c: bf16[T, 1, 24]\ninput s: bf16[T, 1, 24]\ny = rope(x, c, s)\noutput y\n",
       {"fz_load<8>(in1, ", "(c < C / 2 ? -fz_f32(in0[", "float xh0[2];"}, {"float xh0[8]", "% s_T"}},  // decode packs of 2 divide 12
      {"graph g\ninput x: bf16[T, 4, 256]\ninput y: bf16[T, 1, 256]\nm = mul(x, y)\nmx = max(m)\nq = sub(m, mx)\noutput q\n",
       {"fz_load<8>(in1, ", "constexpr int TPR"}, {"fz_f32(in1["}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.graph);
    auto g = ParseGraph(c.graph);
    ASSERT_TRUE(g.ok()) << g.status().message();
    auto k = testing_cases::WholeGraphKernel(*g);
    ASSERT_TRUE(k.ok()) << k.status().message();
    auto e = codegen::EmitCuda(*k, codegen::EmitOptions{});
    ASSERT_TRUE(e.ok()) << e.status().message();
    for (const auto& p : c.present) EXPECT_NE(e->source.find(p), std::string::npos) << p << "\n" << e->source;
    for (const auto& a : c.absent) EXPECT_EQ(e->source.find(a), std::string::npos) << a << "\n" << e->source;
    ExpectCompiles(e->source, e->function);
  }
}

// Softmax's 2^(z - max) is computed once per element: kept as f32 (ce<e>[VPT][vec]) from the sum's pass
// to the epilogue, which scales it by the row's 1 / sum, in the prefill and the decode function, with a
// mask too: one exponential per element. Nothing without a MUFU op under a pass's value is kept
// (layer_norm's centred x).
TEST(JitKernel, PassValuesWithAnExponentialAreKeptForTheEpilogue) {
  struct Case {
    const char* graph;
    size_t exp2_per_function, kept_per_function;
  };
  const char* sm = "graph g\ninput x: bf16[T, 2048]\ny = softmax(x)\noutput y\n";
  const char* masked = "graph g\ninput x: bf16[T, 2048]\ninput m: bf16[T, 2048]\ny = softmax(x, m) {scale=0.125}\noutput y\n";
  const char* ln = "graph g\ninput x: bf16[T, 2048]\nparam w: bf16[2048]\nparam b: bf16[2048]\n"
                   "y = layer_norm(x, w, b) {eps=1e-05}\noutput y\n";
  for (const Case& c : {Case{sm, 1, 1}, Case{masked, 1, 1}, Case{ln, 0, 0}}) {
    SCOPED_TRACE(c.graph);
    auto e = EmitGraph(c.graph, {});
    ASSERT_TRUE(e.ok()) << e.status().message();
    ASSERT_TRUE(e->row_in_registers);
    // one function where the decode shape is the prefill one (the masked softmax)
    const std::string prefill = PrefillSource(*e);
    ASSERT_FALSE(prefill.empty());
    std::vector<std::string> bodies{prefill};
    if (e->decode_function != e->function) bodies.push_back(DecodeSource(*e));
    for (const std::string& body : bodies) {
      EXPECT_EQ(Count(body, "fz::op_exp2("), c.exp2_per_function) << body;
      EXPECT_EQ(Count(body, "// kept for the passes after this one"), c.kept_per_function) << body;
      if (c.kept_per_function) {  // assigned in the pass, read in the epilogue
        EXPECT_LT(body.find("[it][j] = e"), body.find("// epilogue")) << body;
        EXPECT_GT(body.find("= ce"), body.find("// epilogue")) << body;
      }
    }
    ExpectCompiles(e->source, e->function);
  }
}

// EmitOptions::prefill_row_words sets the prefill row group: rms_norm
// bf16 h2048 (256 vectors of 4 registers) is t64x4 by the rule (16), t128x2 at 8 and t32x8 at 32; the
// decode function does not change.
TEST(JitKernel, PrefillRowWordsSetsThePrefillRowGroup) {
  const char* rms = "graph g\ninput x: bf16[T, 2048]\nparam w: bf16[2048]\ny = rms_norm(x, w)\noutput y\n";
  std::string decode0;
  for (auto [words, tpr, vpt] : {std::tuple{0, 64, 4}, std::tuple{8, 128, 2}, std::tuple{32, 32, 8}}) {
    SCOPED_TRACE(fmt::format("words {}", words));
    codegen::EmitOptions o;
    o.prefill_row_words = words;
    auto e = EmitGraph(rms, o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    const std::string decode = DecodeSource(*e);
    const std::string prefill = PrefillSource(*e);
    EXPECT_NE(prefill.find(fmt::format("constexpr int TPR = {}, VPT = {};", tpr, vpt)), std::string::npos) << prefill;
    if (words == 0) decode0 = decode;
    EXPECT_EQ(decode, decode0);
  }
}

// The register counts read from NVRTC's cubin: present for both functions of a row kernel, plausible,
// and the reader refuses what is not a well-formed cubin (truncated, not ELF) with a reason.
TEST(JitKernel, CubinRegisterCounts) {
  if (!jit::NvrtcAvailable()) GTEST_SKIP() << "built without NVRTC";
  auto e = EmitGraph("graph g\ninput x: bf16[T, 2048]\nparam w: bf16[2048]\ny = rms_norm(x, w)\noutput y\n", {});
  ASSERT_TRUE(e.ok()) << e.status().message();
  auto c = jit::CompileCuda(e->source, e->function, "sm_90");
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto regs = jit::CubinRegisterCounts(c->cubin);
  ASSERT_TRUE(regs.ok()) << regs.status().message();
  ASSERT_TRUE(regs->count(e->function)) << e->function;
  ASSERT_TRUE(regs->count(e->decode_function)) << e->decode_function;
  for (const auto& [name, n] : *regs) {
    EXPECT_GE(n, 8) << name;
    EXPECT_LE(n, 255) << name;
  }
  for (size_t cut : {size_t{0}, size_t{3}, size_t{63}, c->cubin.size() / 2}) {
    auto bad = jit::CubinRegisterCounts(std::string_view(c->cubin).substr(0, cut));
    EXPECT_FALSE(bad.ok()) << "cut at " << cut;
  }
  std::string not_elf = c->cubin;
  not_elf[1] = 'X';
  EXPECT_EQ(jit::CubinRegisterCounts(not_elf).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(jit::ResidentThreadsSm90(64, 128), 1024);
  EXPECT_EQ(jit::ResidentThreadsSm90(80, 128), 768);
  EXPECT_EQ(jit::ResidentThreadsSm90(127, 128), 512);
  EXPECT_EQ(jit::ResidentThreadsSm90(32, 256), 2048);
}

// Occupancy of the prefill row functions at bench ops' widths: each keeps at least 768 resident
// threads per SM (24 warps). With 512 (layer_norm bf16 h2048 before its per-column packs were
// laundered each row, kMaxHoistedChannelFloats) the JIT layer_norm 16384 x 2048 was slower than the
// library's (docs/BENCHMARKS.md's history).
// Resident threads per SM (compute capability 9.0) of `graph`'s prefill row function, by the
// registers NVRTC gave it; `what` names the function, its registers and block.
StatusOr<int> PrefillResidentThreads(const std::string& graph, std::string* what) {
  OPFUSE_ASSIGN_OR_RETURN(codegen::EmittedKernel e, EmitGraph(graph, {}));
  if (!e.row_in_registers) return InvalidArgument("not a register-path row kernel: " + graph);
  OPFUSE_ASSIGN_OR_RETURN(jit::NvrtcOutput c, jit::CompileCuda(e.source, e.function, "sm_90"));
  OPFUSE_ASSIGN_OR_RETURN(auto regs, jit::CubinRegisterCounts(c.cubin));
  if (!regs.count(e.function)) return NotFound("no register count for " + e.function);
  const int n = regs.at(e.function);
  *what = fmt::format("{}: {} registers x {} threads per block", e.function, n, e.threads);
  return jit::ResidentThreadsSm90(n, e.threads);
}

std::string LayerNormGraph(const char* dt, int h) {
  return fmt::format("graph g\ninput x: {0}[16384, {1}]\nparam w: {0}[{1}]\nparam b: {0}[{1}]\n"
                     "y = layer_norm(x, w, b)\noutput y\n", dt, h);
}

TEST(JitKernel, PrefillRowFunctionsKeepEnoughThreadsResident) {
  if (!jit::NvrtcAvailable()) GTEST_SKIP() << "built without NVRTC";
  std::string what;
  for (const char* dt : {"bf16", "f32"})
    for (int h : {2048, 4096}) {
      const std::vector<std::string> graphs = {
          fmt::format("graph g\ninput x: {0}[16384, {1}]\ny = softmax(x) {{scale=0.125}}\noutput y\n", dt, h),
          fmt::format("graph g\ninput x: {0}[16384, {1}]\nparam w: {0}[{1}]\ny = rms_norm(x, w)\noutput y\n", dt, h),
          fmt::format("graph g\ninput x: {0}[16384, {1}]\ninput r: {0}[16384, {1}]\nparam w: {0}[{1}]\n"
                      "y, s = add_rms_norm(x, r, w)\noutput y, s\n", dt, h),
          LayerNormGraph(dt, h)};
      for (const std::string& graph : graphs) {
        auto threads = PrefillResidentThreads(graph, &what);
        ASSERT_TRUE(threads.ok()) << threads.status().message();
        EXPECT_GE(*threads, 768) << what;
      }
    }
}

// Pointwise kernels over vectors wider than 4 bytes get a decode function of 4-byte packs (no loop,
// 32-bit indices, compiled for kPointwiseDecodeWideThreads) for tiny tensors; none where the vector
// already is that narrow.
TEST(JitKernel, PointwiseDecodeFunction) {
  struct Case {
    const char* graph;
    bool aligned;
    int vec, decode_vec;
  };
  const Case cases[] = {
      {"graph g\ninput a: bf16[T, 5632]\ninput b: bf16[T, 5632]\ny = swiglu(a, b)\noutput y\n", true, 8, 2},
      {"graph g\ninput a: f32[T, 64]\ninput b: f32[T, 64]\ny = add(a, b)\noutput y\n", true, 4, 1},
      // a flat kernel's vector does not depend on the width (FlatPointwiseVectorsAtAnyWidth)
      {"graph g\ninput a: bf16[T, 6]\ninput b: bf16[T, 6]\ny = mul(a, b)\noutput y\n", true, 8, 2},
      {"graph g\ninput a: f32[T, 6]\nparam b: f32[6]\ny = add(a, b)\noutput y\n", true, 2, 1},
      {"graph g\ninput a: bf16[T, 6]\nparam b: bf16[6]\ny = add(a, b)\noutput y\n", true, 2, 0},
      {"graph g\ninput a: bf16[T, 64]\ninput b: bf16[T, 64]\ny = mul(a, b)\noutput y\n", false, 1, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} aligned {}", c.graph, c.aligned));
    codegen::EmitOptions o;
    o.aligned = c.aligned;
    auto e = EmitGraph(c.graph, o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    EXPECT_FALSE(e->row);
    EXPECT_EQ(e->vec, c.vec);
    EXPECT_EQ(e->decode_vec, c.decode_vec);
    if (c.decode_vec == 0) {
      EXPECT_TRUE(e->decode_function.empty());
      EXPECT_EQ(e->source.find("_decode("), std::string::npos) << e->source;
      continue;
    }
    EXPECT_EQ(e->decode_function, e->function + "_decode");
    EXPECT_EQ(e->decode_threads, codegen::kPointwiseDecodeWideThreads);
    const std::string decode = DecodeSource(*e);
    EXPECT_NE(e->source.find(fmt::format("__launch_bounds__({}) {}(", codegen::kPointwiseDecodeWideThreads, e->decode_function)),
              std::string::npos)
        << e->source;
    EXPECT_NE(decode.find("if (v >= NV) return;"), std::string::npos) << decode;  // symbolic T: bounds checked
    EXPECT_NE(decode.find(fmt::format("const int i0 = v * {};", c.decode_vec)), std::string::npos) << decode;
    EXPECT_EQ(decode.find("long long v"), std::string::npos) << decode;
    ExpectCompiles(e->source, e->function);
  }
}

// A flat pointwise kernel (every operand full-shape or scalar: no row or column needed) reads 16-byte
// vectors from an aligned base at any width, the last vector masked where the element count may not
// fill it (a symbolic row count, or a static count that is not a multiple); a per-column operand keeps
// the width's vector (its columns must line up with the row's), unaligned pointers 1-element ones.
TEST(JitKernel, FlatPointwiseVectorsAtAnyWidth) {
  struct Case {
    const char* graph;
    bool aligned;
    int vec;
    bool masked;
  };
  const Case cases[] = {
      {"graph g\ninput a: bf16[T, 4999]\ninput b: bf16[T, 4999]\ny = swiglu(a, b)\noutput y\n", true, 8, true},
      {"graph g\ninput a: bf16[3, 4999]\ninput b: bf16[3, 4999]\ny = geglu(a, b)\noutput y\n", true, 8, true},
      {"graph g\ninput a: bf16[8, 4999]\ny = silu(a)\noutput y\n", true, 8, false},  // 39992 = 4999 x 8 elements
      {"graph g\ninput a: f32[T, 37379]\ninput b: f32[T, 37379]\ny = mul(a, b)\noutput y\n", true, 4, true},
      {"graph g\ninput a: bf16[T, 4999]\ninput b: bf16[T, 4999]\ny = swiglu(a, b)\noutput y\n", false, 1, false},
      {"graph g\ninput a: bf16[T, 4999]\nparam b: bf16[4999]\ny = add(a, b)\noutput y\n", true, 1, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} aligned {}", c.graph, c.aligned));
    codegen::EmitOptions o;
    o.aligned = c.aligned;
    auto e = EmitGraph(c.graph, o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    EXPECT_FALSE(e->row);
    EXPECT_EQ(e->vec, c.vec);
    const std::string main = e->source.substr(e->source.find(e->function + "("));
    EXPECT_EQ(main.find("the last vector masked") != std::string::npos, c.masked) << main;
    EXPECT_EQ(main.find(fmt::format("fz_load_cols<{}>(", c.vec)) != std::string::npos, c.masked) << main;
    EXPECT_EQ(main.find(fmt::format("fz_store_cols<{}, ", c.vec)) != std::string::npos, c.masked) << main;
    ExpectCompiles(e->source, e->function);
  }
}

// Register-path rows whose starts are off the 16-byte grid (odd widths, aligned bases) compute in
// window mode in the prefill function: 16-byte vectors of each row's aligned window (the row shift sh
// per row, the first and last vector loaded, reduced and stored column by column, a per-column operand
// element by element). Not the decode function (the width's own vectors) — except where those form no
// row group (wider than 1024 x 8 of them): then the prefill function serves both. Not rows of fewer than
// kMinWindowVectors window vectors, not kernels that keep f32 values between passes (softmax); aligned
// widths and unaligned pointers keep their vectors. Every source compiles for sm_90 and sm_80.
TEST(JitKernel, RegisterWindowModeAtOddWidths) {
  struct Case {
    const char* graph;
    bool aligned;
    int vec;  // the prefill function's
    bool window;
  };
  const char* lse = "m = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\nl = log(s)\ny = add(l, m)\noutput y\n";
  const std::string lse_odd = fmt::format("graph g\ninput x: bf16[T, 5323]\n{}", lse);
  const std::string lse_f32 = fmt::format("graph g\ninput x: f32[T, 1201]\n{}", lse);  // 301 window vectors of 4
  const std::string lse_narrow = fmt::format("graph g\ninput x: f32[T, 1001]\n{}", lse);  // 251
  const Case cases[] = {
      {"graph g\ninput x: bf16[T, 4999]\nparam w: bf16[4999]\ny = rms_norm(x, w)\noutput y\n", true, 8, true},
      {"graph g\ninput x: bf16[T, 4999]\nparam w: bf16[4999]\ny = rms_norm(x, w)\noutput y\n", false, 1, false},
      {"graph g\ninput x: bf16[T, 4096]\nparam w: bf16[4096]\ny = rms_norm(x, w)\noutput y\n", true, 8, false},
      {"graph g\ninput x: bf16[T, 1531]\nparam w: bf16[1531]\ny = rms_norm(x, w)\noutput y\n", true, 1, false},  // 193 vectors
      {"graph g\ninput x: bf16[T, 3251]\nparam w: bf16[3251]\nparam b: bf16[3251]\ny = layer_norm(x, w, b)\noutput y\n", true, 8, true},
      {"graph g\ninput x: bf16[T, 4999]\ninput r: bf16[T, 4999]\nparam w: bf16[4999]\ny, s = add_rms_norm(x, r, w)\noutput y, s\n",
       true, 8, true},
      {lse_odd.c_str(), true, 8, true},
      {lse_f32.c_str(), true, 4, true},
      {lse_narrow.c_str(), true, 1, false},
      {"graph g\ninput x: bf16[T, 4999]\ny = softmax(x)\noutput y\n", true, 1, false},  // keeps its exponentials
      // 14325 and 25101 columns: no decode row group of 1-element vectors, one windowed function
      {"graph g\ninput x: f16[T, 14325]\nparam w: f16[14325]\ny = rms_norm(x, w)\noutput y\n", true, 8, true},
      {"graph g\ninput x: bf16[T, 25101]\nparam w: bf16[25101]\ny = rms_norm(x, w)\noutput y\n", true, 8, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} aligned {}", c.graph, c.aligned));
    codegen::EmitOptions o;
    o.aligned = c.aligned;
    auto e = EmitGraph(c.graph, o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    ASSERT_TRUE(e->row_in_registers);
    EXPECT_EQ(e->vec, c.vec);
    EXPECT_EQ(e->source.find("window mode (16-byte vectors") != std::string::npos, c.window) << e->source;
    const std::string prefill = PrefillSource(*e), decode = DecodeSource(*e);
    EXPECT_EQ(prefill.find(" sh = ") != std::string::npos, c.window) << prefill;
    EXPECT_EQ(prefill.find("].load_edge(in0, ") != std::string::npos, c.window) << prefill;
    // one aligned load at the edges only up to target::kRegisterRowWords words of row data a thread, else column by column
    EXPECT_EQ(prefill.find(fmt::format(" <= {}) {{", target::kRegisterRowWords)) != std::string::npos, c.window) << prefill;
    EXPECT_EQ(prefill.find("} else if (VPT * ") != std::string::npos, c.window) << prefill;
    EXPECT_EQ(prefill.find("].load_cols(in0, ") != std::string::npos, c.window) << prefill;
    EXPECT_EQ(prefill.find("if (c >= 0 && c < C) acc") != std::string::npos, c.window) << prefill;
    if (c.window && prefill.find("out0[r]") == std::string::npos) {  // a full-shape output: masked at the edges
      EXPECT_NE(prefill.find(fmt::format("fz_store_cols<{}, ", c.vec)), std::string::npos) << prefill;
    }
    // a separate decode function in the width's own vectors where they form a row group (at most
    // 1024 threads of 8), else the windowed prefill function for both; either covers the row
    const int64_t cols = std::stoll(std::string(c.graph).substr(std::string(c.graph).find(", ") + 2));
    if (c.window && e->decode_function != e->function) {
      EXPECT_LE(cols, 1024 * 8);
      EXPECT_EQ(decode.find(" sh = "), std::string::npos) << decode;
      EXPECT_EQ(decode.find("load_cols"), std::string::npos) << decode;
    } else if (c.window) {
      EXPECT_GT(cols, 1024 * 8);
    }
    if (e->decode_function != e->function) {  // the decode row group covers the row: TPR x VPT x its vector
      EXPECT_GE(int64_t{e->decode_threads / e->decode_rows_per_block} * DecodeVpt(decode) * DecodeVec(decode), cols) << decode;
    }
    ExpectCompiles(e->source, e->function);
    ExpectCompiles(e->source, e->function, "sm_80");
  }
  // the weight of a window-mode rms_norm: element by element inside the row, guarded at its edges
  auto e = EmitGraph(cases[0].graph, {});
  ASSERT_TRUE(e.ok());
  const std::string prefill = PrefillSource(*e);
  EXPECT_NE(prefill.find("fz_load_elems<8>(in1, c0, c0 + 8 < C, x1);"), std::string::npos) << prefill;
  EXPECT_NE(prefill.find("fz_load_cols<8>(in1, c0, c0, C, x1);"), std::string::npos) << prefill;
}

// A kernel that writes per-row values only (a row reduction) holds 32 registers of row data per
// thread in its prefill function (8 vectors of 16-bit packs), a row-to-row kernel fewer.
TEST(JitKernel, RowReductionsHoldMoreOfTheRowPerThread) {
  auto lse = EmitGraph("graph g\ninput x: bf16[T, 11008]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\nl = log(s)\n"
                       "y = add(l, m)\noutput y\n", {});
  ASSERT_TRUE(lse.ok()) << lse.status().message();
  EXPECT_EQ(lse->vectors_per_thread, 8);
  EXPECT_EQ(lse->threads_per_row, 192);  // 1376 vectors over 8 a thread, whole warps
  auto sm = EmitGraph("graph g\ninput x: bf16[T, 11008]\ny = softmax(x)\noutput y\n", {});
  ASSERT_TRUE(sm.ok()) << sm.status().message();
  EXPECT_EQ(sm->vectors_per_thread, 2);
}

}  // namespace
}  // namespace opfuse

namespace opfuse {
namespace {

// Every thread of a register-path function's block belongs to a whole row group: its block is
// rows_per_block x threads_per_row threads exactly, at every width (a row group of 96 in a block of
// 128 left 32 threads reading and writing past their row: rms_norm bf16 x 3072 at prefill). Seeded
// random widths, aligned and not, plus model sizes; decode functions: the whole row group too.
TEST(JitKernel, RegisterRowBlocksHoldWholeRowGroups) {
  std::mt19937 rng(30);
  std::vector<int64_t> widths = {96 * 8, 3072, 1536, 2560, 3584, 5120, 6144, 8192, 4864, 8960, 11008, 14336, 768, 1280, 1792};
  std::uniform_int_distribution<int64_t> w(1, 20000);
  for (int i = 0; i < 120; ++i) widths.push_back(w(rng));
  int checked = 0;
  for (int64_t cols : widths)
    for (const char* dt : {"bf16", "f32"})
      for (bool norm : {true, false}) {
        const std::string graph = norm ? fmt::format("graph g\ninput x: {0}[T, {1}]\nparam w: {0}[{1}]\ny = rms_norm(x, w)\noutput y\n", dt, cols)
                                       : fmt::format("graph g\ninput x: {0}[T, {1}]\ny = softmax(x)\noutput y\n", dt, cols);
        auto e = EmitGraph(graph, {});
        ASSERT_TRUE(e.ok()) << graph << e.status().message();
        if (!e->row_in_registers) continue;
        SCOPED_TRACE(graph);
        ASSERT_GT(e->threads_per_row, 0);
        EXPECT_EQ(e->rows_per_block * e->threads_per_row, e->threads);
        EXPECT_EQ(e->decode_threads % e->decode_rows_per_block, 0);
        const int decode_tpr = e->decode_threads / e->decode_rows_per_block;
        EXPECT_EQ(decode_tpr * e->decode_rows_per_block, e->decode_threads);
        ++checked;
      }
  EXPECT_GT(checked, 300);  // most widths take the register path
}

// Rows past the register path at a static width, on a target with clusters: a split function beside
// the looped one, compiled for the plan target::PlanRowSplit gives (the library's split rule; the
// cluster size and block are the launch's), with a cluster reduction per row reduction, the PDL
// prologue, and no split function without clusters or for a symbolic width. It compiles for sm_90
// within its launch bound.
TEST(JitKernel, SplitFunctionForRowsPastTheRegisterPath) {
  struct Case {
    const char* graph;
    int64_t cols;
    bool aligned;
    int vec, vec_bytes, words, reductions;
    int split_vec = 0;  // the split function's window vector (0: no window mode, `vec` over the row)
  };
  const char* lse = "graph g\ninput x: bf16[T, 169249]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\nl = log(s)\ny = add(l, m)\noutput y\n";
  const Case cases[] = {
      // odd width, aligned pointers: 1-element vectors for the looped function, the split in window
      // mode (8-element vectors over the row's aligned window, one 4-word pack each)
      {lse, 169249, true, 1, 16, 4, 2, 8},
      // unaligned pointers: 1-element vectors (one register each), many per thread
      {lse, 169249, false, 1, 2, 1, 2},
      // softmax keeps exp(x - max) as f32 for the epilogue: 4 + 4 words per 4-element f32 vector
      {"graph g\ninput x: f32[T, 100000]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\ny = div(e, s)\noutput y\n", 100000, true, 4,
       16, 8, 2},
      {"graph g\ninput x: bf16[T, 70000]\ninput r: bf16[T, 70000]\nparam w: bf16[70000]\ny, s = add_rms_norm(x, r, w)\noutput y, s\n",
       70000, true, 8, 16, 8, 1},
      // an odd-width softmax (aligned pointers): window mode, 4 words of pack + 8 kept f32 a vector
      {"graph g\ninput x: bf16[T, 100003]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\ny = div(e, s)\noutput y\n", 100003, true, 1,
       16, 12, 2, 8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.graph << (c.aligned ? "aligned" : "unaligned"));
    auto g = ParseGraph(c.graph);
    ASSERT_TRUE(g.ok()) << g.status().message();
    auto k = testing_cases::WholeGraphKernel(*g);
    ASSERT_TRUE(k.ok()) << k.status().message();
    codegen::EmitOptions o;
    o.aligned = c.aligned;
    auto plain = codegen::EmitCuda(*k, o);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    EXPECT_TRUE(plain->split_function.empty());
    o.clusters = true;
    auto e = codegen::EmitCuda(*k, o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    ASSERT_FALSE(e->row_in_registers);
    ASSERT_EQ(e->vec, c.vec);
    ASSERT_EQ(e->split_function, e->function + "_split");
    auto want = c.split_vec > 0 ? target::PlanRowSplit(c.cols + c.split_vec - 1, c.split_vec, c.vec_bytes, c.words, 64)
                                : target::PlanRowSplit(c.cols, c.vec, c.vec_bytes, c.words, 64);
    ASSERT_TRUE(want.has_value());
    EXPECT_EQ(e->split_vpt, want->vpt);
    EXPECT_EQ(e->split_min_blocks, want->min_blocks);
    EXPECT_EQ(e->split_window_vec, c.split_vec);
    // 16-byte vectors, window mode too: the split at any row count
    EXPECT_EQ(e->split_many_rows, c.vec_bytes >= 16);
    if (c.split_vec > 0) {  // window mode: the row's shift
      EXPECT_NE(e->source.find("- sh;"), std::string::npos);
    }
    const std::string split = e->source.substr(e->source.find(e->split_function + "("));
    EXPECT_NE(e->source.find(fmt::format("__launch_bounds__({}) {}(", target::kRowSplitMaxThreads, e->split_function)),
              std::string::npos) << e->source;
    EXPECT_EQ(Count(split, "fz::cluster_reduce<"), static_cast<size_t>(c.reductions)) << split;
    EXPECT_NE(split.find(fmt::format("constexpr int VPT = {};", want->vpt)), std::string::npos) << split;
    EXPECT_NE(split.find("fz::pdl_enter();"), std::string::npos);
    EXPECT_TRUE(e->PdlIn(e->split_function));
    if (jit::NvrtcAvailable()) {
      auto cu = jit::CompileCuda(e->source, e->function, "sm_90");
      ASSERT_TRUE(cu.ok()) << cu.status().message();
      auto regs = jit::CubinRegisterCounts(cu->cubin);
      ASSERT_TRUE(regs.ok()) << regs.status().message();
      ASSERT_TRUE(regs->count(e->split_function));
      EXPECT_LE(regs->at(e->split_function), 65536 / target::kRowSplitMaxThreads) << "registers of " << e->split_function;
    }
  }
  // a symbolic width has no split function
  auto g = ParseGraph("graph g\ninput x: bf16[T, S]\nm = max(x)\ny = sub(x, m)\noutput y\n");
  ASSERT_TRUE(g.ok());
  auto k = testing_cases::WholeGraphKernel(*g);
  ASSERT_TRUE(k.ok());
  codegen::EmitOptions o;
  o.clusters = true;
  auto e = codegen::EmitCuda(*k, o);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->split_function.empty());
}

// Rows past the register path at a static width, aligned, on a target with asynchronous copies: a
// stage function beside the looped one, its windows (target::RowStageWindowBytes of every full-shape
// input, the per-column weight not staged) at static offsets, one asynchronous copy loop per staged
// input, the passes reading the staged inputs from shared memory, the PDL prologue. None unaligned,
// without EmitOptions::stage, or for a symbolic width. It compiles for sm_90 and sm_80.
TEST(JitKernel, StageFunctionForRowsPastTheRegisterPath) {
  struct Case {
    const char* graph;
    std::vector<int> staged_sizes;  // element bytes of each staged input
    int64_t cols;
  };
  const Case cases[] = {
      {"graph g\ninput x: bf16[T, 25101]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\ny = div(e, s)\noutput y\n",
       {2}, 25101},
      {"graph g\ninput x: f32[T, 20001]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\ny = div(e, s)\noutput y\n", {4}, 20001},
      {"graph g\ninput x: bf16[T, 47059]\ninput r: bf16[T, 47059]\nparam w: bf16[47059]\ny, s = add_rms_norm(x, r, w)\noutput y, s\n",
       {2, 2}, 47059},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.graph);
    auto g = ParseGraph(c.graph);
    ASSERT_TRUE(g.ok()) << g.status().message();
    auto k = testing_cases::WholeGraphKernel(*g);
    ASSERT_TRUE(k.ok()) << k.status().message();
    codegen::EmitOptions o;
    auto plain = codegen::EmitCuda(*k, o);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    EXPECT_TRUE(plain->stage_function.empty());
    o.stage = true;
    o.aligned = false;
    auto unaligned = codegen::EmitCuda(*k, o);
    ASSERT_TRUE(unaligned.ok()) << unaligned.status().message();
    EXPECT_TRUE(unaligned->stage_function.empty());
    o.aligned = true;
    auto e = codegen::EmitCuda(*k, o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    ASSERT_FALSE(e->row_in_registers);
    ASSERT_EQ(e->stage_function, e->function + "_stage");
    int64_t bytes = 0, widest = 0;
    for (int size : c.staged_sizes) {
      bytes += target::RowStageWindowBytes(c.cols, size);
      widest = std::max(widest, target::RowStageWindowBytes(c.cols, size) / 16);
    }
    EXPECT_EQ(e->stage_bytes, bytes);
    EXPECT_EQ(e->stage_vectors, widest);
    const std::string stage = e->source.substr(e->source.find(e->stage_function + "("));
    EXPECT_NE(e->source.find(fmt::format("__launch_bounds__({}) {}(", target::kRowStageMaxThreads, e->stage_function)),
              std::string::npos);
    // per staged input: whole copies, and the window's last vector with its source size
    EXPECT_EQ(Count(stage, "fz::cp_async16("), 2 * c.staged_sizes.size()) << stage;
    EXPECT_NE(stage.find("fz::cp_async_wait<0>();"), std::string::npos);
    EXPECT_NE(stage.find("fz_load<"), std::string::npos);
    EXPECT_EQ(stage.find("fz_load<" + std::to_string(e->vec) + ">(in0"), std::string::npos) << "x read from global memory: " << stage;
    // window mode: the staged windows' 16-byte vectors (odd widths too), the weight column-guarded
    EXPECT_NE(stage.find(fmt::format("fz_load<{}>(xs0, sh0 + (c0)", 16 / c.staged_sizes[0])), std::string::npos) << stage;
    if (c.staged_sizes.size() == 2) {
      EXPECT_NE(stage.find("fz_load_cols<8>(in2, c0, c0, C,"), std::string::npos) << stage;
    }
    EXPECT_NE(stage.find("fz::pdl_enter();"), std::string::npos);
    EXPECT_TRUE(e->PdlIn(e->stage_function));
    if (jit::NvrtcAvailable())
      for (const char* arch : {"sm_90", "sm_80"}) {
        auto cu = jit::CompileCuda(e->source, e->function, arch);
        ASSERT_TRUE(cu.ok()) << arch << ": " << cu.status().message();
      }
  }
  auto g = ParseGraph("graph g\ninput x: bf16[T, S]\nm = max(x)\ny = sub(x, m)\noutput y\n");
  ASSERT_TRUE(g.ok());
  auto k = testing_cases::WholeGraphKernel(*g);
  ASSERT_TRUE(k.ok());
  codegen::EmitOptions o;
  o.stage = true;
  auto e = codegen::EmitCuda(*k, o);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->stage_function.empty());
}

// The text of generated function `name`: from its declaration to the next kernel's, or the end.
std::string FunctionText(const std::string& source, const std::string& name) {
  if (name.empty()) return "";
  const size_t at = source.find(name + "(");
  if (at == std::string::npos) return "";
  const size_t next = source.find("extern \"C\"", at);
  return source.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

// Beside the stage function, on a target with clusters: the staged split function (a cluster of
// blocks a row, each staging its share of every staged input's window; target::ChooseRowStageSplit)
// where every staged input has one element size and the kernel writes rows: one cluster exchange a
// reduction (the online max and sum: two), one copy loop a staged input, the row values written by
// rank 0 only. None without clusters, for mixed element sizes, or for row outputs only (those
// stream). It compiles for sm_90.
TEST(JitKernel, StageSplitFunctionBesideTheStageFunction) {
  struct Case {
    const char* graph;
    int elem_bytes, inputs, reductions;
    bool expect;
  };
  const Case cases[] = {
      {"graph g\ninput x: bf16[T, 25101]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\ny = div(e, s)\noutput y\n", 2, 1, 2,
       true},
      {"graph g\ninput x: f32[T, 20000]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\ny = div(e, s)\noutput y\n", 4, 1, 2, true},
      {"graph g\ninput x: bf16[T, 47059]\ninput r: bf16[T, 47059]\nparam w: bf16[47059]\ny, s = add_rms_norm(x, r, w)\noutput y, s\n",
       2, 2, 1, true},
      {"graph g\ninput x: f16[T, 70001]\nparam w: f16[70001]\nparam b: f16[70001]\ny = layer_norm(x, w, b)\noutput y\n", 2, 1, 2, true},
      // mixed element sizes: no staged split
      {"graph g\ninput x: bf16[T, 30000]\ninput z: f32[T, 30000]\nxf = cast(x) {dtype=f32}\nu = add(xf, z)\nm = max(u)\ny = sub(u, m)\noutput y\n",
       0, 0, 0, false},
      // row outputs only: no staged split
      {"graph g\ninput x: bf16[T, 30000]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\nl = log(s)\ny = add(l, m)\noutput y\n",
       0, 0, 0, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.graph);
    auto g = ParseGraph(c.graph);
    ASSERT_TRUE(g.ok()) << g.status().message();
    auto k = testing_cases::WholeGraphKernel(*g);
    ASSERT_TRUE(k.ok()) << k.status().message();
    codegen::EmitOptions o;
    o.stage = true;
    auto no_clusters = codegen::EmitCuda(*k, o);
    ASSERT_TRUE(no_clusters.ok()) << no_clusters.status().message();
    EXPECT_TRUE(no_clusters->stage_split_function.empty());
    o.clusters = true;
    auto e = codegen::EmitCuda(*k, o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    if (!c.expect) {
      EXPECT_TRUE(e->stage_split_function.empty()) << e->stage_split_function;
      continue;
    }
    ASSERT_FALSE(e->stage_function.empty());
    ASSERT_EQ(e->stage_split_function, e->function + "_stagesplit");
    EXPECT_EQ(e->stage_split_elem_bytes, c.elem_bytes);
    EXPECT_EQ(e->stage_split_inputs, c.inputs);
    EXPECT_TRUE(e->PdlIn(e->stage_split_function));
    const std::string ss = FunctionText(e->source, e->stage_split_function);
    EXPECT_NE(e->source.find(fmt::format("__launch_bounds__({}) {}(", target::kRowStageSplitMaxThreads, e->stage_split_function)),
              std::string::npos);
    // one share copy loop a staged input (whole copies, the row's last vector with its source size)
    EXPECT_EQ(Count(ss, "fz::cp_async16("), 2 * c.inputs) << ss;
    EXPECT_EQ(Count(ss, "fz::cluster_reduce<"), c.reductions) << ss;
    EXPECT_EQ(Count(ss, "fz::block_reduce<"), 0) << ss;
    EXPECT_EQ(Count(ss, "fz::push_arm("), 1) << ss;
    EXPECT_NE(ss.find("fz::cluster_sync();"), std::string::npos) << ss;
    EXPECT_NE(ss.find(fmt::format("fz_load<{}>(xs0, sh0 + (c0)", 16 / c.elem_bytes)), std::string::npos) << ss;
    EXPECT_NE(ss.find("cb < CE"), std::string::npos) << ss;
    EXPECT_EQ(ss.find("for (long long r = blockIdx.x"), std::string::npos) << "no row loop: " << ss;
    if (jit::NvrtcAvailable()) {
      auto cu = jit::CompileCuda(e->source, e->function, "sm_90");
      ASSERT_TRUE(cu.ok()) << cu.status().message();
    }
  }
}

// A row kernel that writes one value per row and reads each row once (logsumexp's online max and
// sum, a sum, a max) streams rows past the register path: the looped function in blocks of
// target::kRowStreamThreads, kRowStreamUnroll raw 16-byte packs in flight a thread (evict-first
// loads), over each row's aligned window where the width is off the 16-byte grid (the window's edge
// vectors column by column); no stage function. Unaligned pointers, a row output (softmax) or two
// reads of the row (a variance) keep the looped / stage functions. Every case compiles.
TEST(JitKernel, RowReductionsStreamPastTheRegisterPath) {
  const std::string lse = "m = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\nl = log(s)\ny = add(l, m)\noutput y\n";
  struct Case {
    std::string graph;
    bool aligned, stream, window;
    int vec, unroll;
  };
  const Case cases[] = {
      {"graph g\ninput x: bf16[T, 25101]\n" + lse, true, true, true, 8, 4},
      {"graph g\ninput x: bf16[T, 65536]\n" + lse, true, true, false, 8, 4},
      {"graph g\ninput x: f32[T, 20001]\n" + lse, true, true, true, 4, 4},
      {"graph g\ninput x: f16[T, 40002]\n" + lse, true, true, true, 8, 4},
      {"graph g\ninput x: bf16[T, 70001]\nq = mul(x, x)\ns = sum(q)\noutput s\n", true, true, true, 8, 4},
      {"graph g\ninput x: bf16[T, 70001]\ninput z: bf16[T, 70001]\na = mul(x, z)\ns = sum(a)\noutput s\n", true, true, true, 8, 4},
      {"graph g\ninput x: bf16[T, 25101]\n" + lse, false, false, false, 0, 0},
      {"graph g\ninput x: bf16[T, 25101]\nm = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\ny = div(e, s)\noutput y\n", true,
       false, false, 0, 0},
      // a variance: the mean, then the sum of squared differences (two reads)
      {"graph g\ninput x: bf16[T, 70001]\nm = mean(x)\nd = sub(x, m)\nq = mul(d, d)\nv = mean(q)\noutput v\n", true, false, false, 0, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.graph);
    codegen::EmitOptions o;
    o.aligned = c.aligned;
    o.clusters = true;
    o.stage = true;
    auto e = EmitWholeGraph(c.graph, o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    ASSERT_FALSE(e->row_in_registers);
    EXPECT_EQ(e->stream, c.stream) << e->source;
    const std::string main_fn = FunctionText(e->source, e->function);
    if (c.stream) {
      EXPECT_TRUE(e->stage_function.empty());
      EXPECT_FALSE(e->split_function.empty());
      EXPECT_NE(e->source.find(fmt::format("__launch_bounds__({}) {}(", target::kRowStreamThreads, e->function)), std::string::npos);
      EXPECT_NE(main_fn.find(fmt::format("[{}];", c.unroll)), std::string::npos) << main_fn;
      const char* type = c.vec == 4 ? "float" : c.graph.find("x: f16[") != std::string::npos ? "fz_f16" : "fz_bf16";
      EXPECT_NE(main_fn.find(fmt::format("fz_pack<{}, {}> xq0[{}];", type, c.vec, c.unroll)), std::string::npos) << main_fn;
      EXPECT_NE(main_fn.find("].load_ef(in0"), std::string::npos) << main_fn;
      EXPECT_EQ(main_fn.find("].load_cols(in0") != std::string::npos, c.window) << main_fn;
      EXPECT_EQ(main_fn.find("const int sh = ") != std::string::npos, c.window) << main_fn;
      // one read of the row: one loop over it, a block reduction a result
      EXPECT_EQ(Count(main_fn, "for (int u = 0; u < "), 2u) << main_fn;
      if (c.graph.find("max(x)") != std::string::npos) {
        EXPECT_EQ(Count(main_fn, "fz::block_reduce<fz::MaxOp>"), 1u) << main_fn;
        EXPECT_EQ(Count(main_fn, "fz::block_reduce<fz::SumOp>"), 1u) << main_fn;
      }
    } else {
      EXPECT_EQ(main_fn.find("load_ef"), std::string::npos) << main_fn;
    }
    ExpectCompiles(e->source, e->function, "sm_90");
  }
  // One static row: its [1, 1] output is a row output (not a broadcast scalar), so the split over
  // the cluster computes in window mode, and the stream serves it as at any row count.
  for (const char* dt : {"bf16", "f32"}) {
    SCOPED_TRACE(dt);
    auto g = ParseGraph(fmt::format("graph g\ninput x: {}[1, 141761]\n{}", dt, lse));
    ASSERT_TRUE(g.ok()) << g.status().message();
    auto k = testing_cases::WholeGraphKernel(*g);
    ASSERT_TRUE(k.ok()) << k.status().message();
    ASSERT_EQ(k->outputs.size(), 1u);
    EXPECT_EQ(k->outputs[0].tensor.access, codegen::Access::kRowScalar);
    codegen::EmitOptions o;
    o.clusters = true;
    o.stage = true;
    auto e = codegen::EmitCuda(*k, o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    EXPECT_TRUE(e->stream);
    EXPECT_EQ(e->split_window_vec, std::string(dt) == "f32" ? 4 : 8);
    ExpectCompiles(e->source, e->function, "sm_90");
  }
}

// A max reduction over a 16-bit input's own elements, or over them times a positive constant
// (logsumexp; softmax's x * scale * log2(e)), compares raw element pairs (fz_max2: max.bf16x2 /
// max.f16x2) in the register, split and stage functions, on sm_80+ targets only; f32, a negative
// scale and older targets keep the element path. The stage function stores through st.global.v4.
TEST(JitKernel, RawMaxPassComparesElementPairs) {
  const std::string lse = "m = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\nl = log(s)\ny = add(l, m)\noutput y\n";
  struct Case {
    std::string graph;
    bool raw;
  };
  const Case cases[] = {
      {"graph g\ninput x: bf16[T, 4096]\n" + lse, true},   // register path, aligned
      {"graph g\ninput x: f16[T, 4999]\n" + lse, true},    // register window mode
      {"graph g\ninput x: bf16[T, 25101]\n" + lse, true},  // stage and split functions
      {"graph g\ninput x: f32[T, 4096]\n" + lse, false},
      // a max of x times a positive constant: max(x) * c; a negative one keeps the element path
      {"graph g\ninput x: bf16[T, 4096]\nc = constant() {value=2}\nz = mul(x, c)\nm = max(z)\ny = sub(z, m)\noutput y\n", true},
      {"graph g\ninput x: bf16[T, 4096]\nc = constant() {value=-2}\nz = mul(c, x)\nm = max(z)\ny = sub(z, m)\noutput y\n", false},
      {"graph g\ninput x: bf16[T, 49152]\ny = softmax(x) {scale=0.125}\noutput y\n", true},
      {"graph g\ninput x: f16[T, 20001]\ny = softmax(x)\noutput y\n", true},
      {"graph g\ninput x: bf16[T, 4096]\ny = softmax(x) {scale=-1}\noutput y\n", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.graph);
    codegen::EmitOptions o;
    o.clusters = true;
    o.stage = true;
    auto e = EmitWholeGraph(c.graph, o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    const bool raw = e->source.find("fz_max2<") != std::string::npos && e->source.find("::op(accw") != std::string::npos;
    EXPECT_EQ(raw, c.raw) << e->source;
    if (!e->stage_function.empty()) {
      const std::string stage = FunctionText(e->source, e->stage_function);
      EXPECT_EQ(stage.find("::op(accw") != std::string::npos, c.raw) << stage;
      if (stage.find("fz_store") != std::string::npos) {
        EXPECT_NE(stage.find(", true>(out0"), std::string::npos) << stage;
      }
    }
    if (c.raw && !e->split_function.empty()) {
      const std::string split = FunctionText(e->source, e->split_function);
      EXPECT_NE(split.find("::op(accw"), std::string::npos) << split;
    }
    for (const char* arch : {"sm_90", "sm_80"}) ExpectCompiles(e->source, e->function, arch);
    o.stage = false;  // a target without sm_80's instructions
    auto old = EmitWholeGraph(c.graph, o);
    ASSERT_TRUE(old.ok());
    EXPECT_EQ(old->source.find("::op(accw"), std::string::npos);
  }
}

// The stage and looped functions stream the row in every pass: a max pass followed by the sum of
// exp(a - max) or exp2(a - max) over the same a is one pass there, a running (max, sum) per thread
// and two block reductions (logsumexp, softmax). The stage function keeps the raw-pair max pass where
// it has one (a plain softmax, logsumexp over a staged input); the register path and other
// reductions (a norm, a sum over a different value) keep their passes. Every case compiles.
TEST(JitKernel, OnlineMaxSumInTheStreamedPasses) {
  const std::string lse = "m = max(x)\nd = sub(x, m)\ne = exp(d)\ns = sum(e)\nl = log(s)\ny = add(l, m)\noutput y\n";
  struct Case {
    std::string graph;
    bool aligned;
    bool looped_online, stage_online;  // the looped (main) function's and the stage function's
  };
  const Case cases[] = {
      {"graph g\ninput x: bf16[T, 169249]\n" + lse, false, true, false},  // unaligned: looped only, 1-element vectors
      {"graph g\ninput x: bf16[T, 25101]\n" + lse, true, true, false},    // the stage keeps its raw-pair max
      {"graph g\ninput x: bf16[T, 49152]\ny = softmax(x) {scale=0.125}\noutput y\n", true, true, false},
      {"graph g\ninput x: bf16[T, 49152]\ny = softmax(x) {scale=0.125, causal=1}\noutput y\n", true, true, true},
      {"graph g\ninput x: f32[T, 20001]\ny = softmax(x)\noutput y\n", true, true, true},  // f32: no raw pairs
      {"graph g\ninput x: bf16[T, 4096]\ny = softmax(x)\noutput y\n", true, false, false},  // register path
      {"graph g\ninput x: bf16[T, 49152]\nparam w: bf16[49152]\ny = rms_norm(x, w)\noutput y\n", true, false, false},
      // the sum's exponent is not a minus the max's own a
      {"graph g\ninput x: bf16[T, 49152]\nc = constant() {value=2}\nm = max(x)\nz = mul(x, c)\nd = sub(z, m)\ne = exp(d)\n"
       "s = sum(e)\ny = div(e, s)\noutput y\n", true, false, false},
  };
  const std::string marker = "online, one read of the row";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.graph);
    codegen::EmitOptions o;
    o.aligned = c.aligned;
    o.clusters = true;
    o.stage = true;
    auto e = EmitWholeGraph(c.graph, o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    const std::string main_fn = FunctionText(e->source, e->function);
    EXPECT_EQ(main_fn.find(marker) != std::string::npos, c.looped_online) << main_fn;
    if (c.looped_online) {
      EXPECT_EQ(Count(main_fn, "fz::block_reduce<fz::MaxOp>"), 1u) << main_fn;
      EXPECT_EQ(Count(main_fn, "fz::block_reduce<fz::SumOp>"), 1u) << main_fn;
    }
    if (!e->stage_function.empty()) {
      const std::string stage = FunctionText(e->source, e->stage_function);
      EXPECT_EQ(stage.find(marker) != std::string::npos, c.stage_online) << stage;
    } else {
      EXPECT_FALSE(c.stage_online) << "expected a stage function";
    }
    EXPECT_EQ(FunctionText(e->source, e->split_function).find(marker), std::string::npos);
    ExpectCompiles(e->source, e->function, "sm_90");
  }
}

}  // namespace
}  // namespace opfuse
