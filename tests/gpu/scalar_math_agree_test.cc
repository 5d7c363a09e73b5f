// The library kernels and the JIT compute every elementwise op of the scalar math table
// (src/ops/scalar_math.def) bit for bit alike: both call fz::op_<name> of src/ops/scalar_math.h,
// nvcc compiling one and NVRTC (through the embedded JIT preamble) the other. For each float op of
// the table, f32 and bf16, a one-node graph runs through the library planner (PlanLibraryNode) and
// through the JIT (the whole graph as one kernel), on the same inputs: values spread over 2^-12 ..
// 2^7 in magnitude, both signs, plus 0, -0, +-inf and NaN; outputs poisoned. The two results must be
// identical bits (NaN matches NaN). Against the CPU reference the device may differ only by the
// primitives scalar_math.h lists; the numerics tests bound that. Skips cleanly without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "codegen/kernel_ir.h"
#include "ir/host_tensor.h"
#include "jit/cuda_launcher.h"
#include "jit/jit_compiler.h"
#include "ops/scalar_ops.h"
#include "opfuse/graph.h"

#ifdef OPFUSE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "cuda/device.h"
#include "kernels/library.h"
#endif

namespace opfuse {
namespace {

// The float ops of the table (every op with a scalar CUDA lowering except cast and where;
// tests/unit/scalar_math_test.cc checks this is every elementwise op of ops.def).
std::vector<OpKind> TableOps() {
  std::vector<OpKind> ops;
  for (int i = 0; i < kNumOps; ++i) {
    const OpKind op = static_cast<OpKind>(i);
    if (op == OpKind::kCast || op == OpKind::kWhere || !CudaScalarExpr(op)) continue;
    ops.push_back(op);
  }
  return ops;
}

#ifdef OPFUSE_WITH_CUDA
void Check(cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); }

// Signed values over 2^-12 .. 2^7 and the special values, every 97th element.
void Fill(HostTensor& t, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> ex(-12.0f, 7.0f);
  const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f};
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = std::exp2(ex(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
    if (i % 97 == 5) v = special[(i / 97) % 7];
    t.set(i, v);
  }
}

struct Buf {
  void* p = nullptr;
  ~Buf() { if (p) cudaFree(p); }
};

class ScalarMathAgreeGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (jit::CudaDeviceCount(&why) == 0) GTEST_SKIP() << why;
  }
};

TEST_F(ScalarMathAgreeGpu, LibraryAndJitAgreeBitForBit) {
  auto dev = cuda::QueryDevice();
  ASSERT_TRUE(dev.ok()) << dev.status().message();
  auto arch = jit::CudaDeviceArch();
  ASSERT_TRUE(arch.ok()) << arch.status().message();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const std::vector<int64_t> shape = {67, 1001};
  int checked = 0;
  for (OpKind op : TableOps()) {
    const int arity = GetOpInfo(op).min_inputs;
    for (DType dt : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << OpName(op) << " " << DTypeName(dt));
      std::string text = "graph t\n";
      std::vector<std::string> names;
      for (int a = 0; a < arity; ++a) {
        names.push_back(fmt::format("x{}", a));
        text += fmt::format("input x{}: {}[{}, {}]\n", a, DTypeName(dt), shape[0], shape[1]);
      }
      text += fmt::format("y = {}({})\noutput y\n", OpName(op), fmt::join(names, ", "));
      auto g = ParseGraph(text);
      ASSERT_TRUE(g.ok()) << g.status().message();
      const DType out_dt = g->values[g->outputs[0]].type.dtype;

      std::vector<HostTensor> in;
      for (int a = 0; a < arity; ++a) {
        in.emplace_back(dt, shape);
        Fill(in.back(), rng);
      }
      HostTensor probe(out_dt, shape);
      const size_t out_bytes = probe.data.size();
      std::vector<Buf> bufs(arity + 2);
      std::vector<const void*> din;
      std::vector<kernels::TensorRef> in_refs;
      for (int a = 0; a < arity; ++a) {
        Check(cudaMalloc(&bufs[a].p, in[a].data.size()));
        Check(cudaMemcpy(bufs[a].p, in[a].data.data(), in[a].data.size(), cudaMemcpyHostToDevice));
        din.push_back(bufs[a].p);
        in_refs.push_back({bufs[a].p, dt, shape});
      }
      void*& lib_out = bufs[arity].p;
      void*& jit_out = bufs[arity + 1].p;
      Check(cudaMalloc(&lib_out, out_bytes));
      Check(cudaMalloc(&jit_out, out_bytes));
      Check(cudaMemset(lib_out, 0xFF, out_bytes));
      Check(cudaMemset(jit_out, 0x5A, out_bytes));

      auto launches = kernels::PlanLibraryNode(g->nodes[0], in_refs, {{lib_out, out_dt, shape}}, *dev);
      ASSERT_TRUE(launches.ok()) << launches.status().message();
      for (const auto& l : *launches) ASSERT_TRUE(l.Launch(nullptr).ok());

      auto k = codegen::BuildKernel(*g, std::vector<int>{0});
      ASSERT_TRUE(k.ok()) << k.status().message();
      jit::KernelCache cache(jit::CacheOptions{"", true, false, 0});
      jit::JitCompiler compiler(cache, {*arch, true, 1});
      auto jk = compiler.CompileKernel(*k, true);
      ASSERT_TRUE(jk.ok()) << jk.status().message();
      auto lk = jit::LoadedKernel::Load(*jk);
      ASSERT_TRUE(lk.ok()) << lk.status().message();
      ASSERT_TRUE((*lk)->Launch(din, {jit_out}, {}).ok());
      Check(cudaDeviceSynchronize());

      HostTensor a(out_dt, shape), b(out_dt, shape);
      Check(cudaMemcpy(a.data.data(), lib_out, out_bytes, cudaMemcpyDeviceToHost));
      Check(cudaMemcpy(b.data.data(), jit_out, out_bytes, cudaMemcpyDeviceToHost));
      int64_t bad = 0;
      for (int64_t i = 0; i < a.numel(); ++i) {
        const double x = a.get(i), y = b.get(i);
        const bool same = IsFloat(out_dt) ? ((std::isnan(x) && std::isnan(y)) ||
                                              std::memcmp(a.data.data() + i * DTypeSize(out_dt),
                                                          b.data.data() + i * DTypeSize(out_dt), DTypeSize(out_dt)) == 0)
                                          : x == y;
        if (!same && bad++ < 5) {
          std::string args;
          for (int j = 0; j < arity; ++j) args += fmt::format("{}{:.9g}", j ? ", " : "", in[j].get(i));
          ADD_FAILURE() << "element " << i << " (" << args << "): library " << fmt::format("{:.9g}", x) << ", JIT "
                        << fmt::format("{:.9g}", y);
        }
      }
      EXPECT_EQ(bad, 0);
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(TableOps().size()) * 2);
}
#endif

}  // namespace
}  // namespace opfuse
