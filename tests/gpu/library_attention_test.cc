// The attention library kernel (src/kernels/attention.cu) against the CPU reference.
//
// Design: each case is a one-node graph `y = attention(q, k, v)`; the reference is RunGraphCpu on
// fresh signed random inputs (RandomInputs, std::random_device seed printed). Every case runs
// several plans on the same inputs — the default choice with and without split-K scratch, the
// general kernel forced (aligned: 16-byte loads + cp.async; unaligned pointers: the scalar path)
// and the tensor-core kernel forced where it applies — because a compile-only check of the mma
// fragment layouts proves nothing: both paths must match the reference. Outputs are poisoned with
// 0xFF bytes (NaN) first; checked: no NaN/inf, not all zero, rows with no visible key exactly zero,
// norm-wise relative error within a per-dtype bound, inputs unmodified. Shapes cover prefill
// T = S in {1, 17, 128, 300}, decode T = 1 with S in {1, 31, 1000, 4097}, T < S and T > S causal,
// GQA 32/4 and MHA 8/8, D = 64, 128 and general D (40, 80, 33, 200, 256), f32/f16/bf16, custom
// scales. Planner decisions and errors are tested without a GPU (host-only tests below).
// LibraryAttentionSpeed prints (asserts nothing) prefill TFLOP/s and decode GB/s (CUDA events after
// warm-up, median; decode samples flush L2 first); OPFUSE_ATTENTION_SPEED_FILTER=<substring> keeps
// only the shapes whose label contains it (for profiler runs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "opfuse/graph.h"
#include "fake_device.h"
#include "runtime/cpu/cpu_executor.h"
#include "ir/host_tensor.h"

#ifdef OPFUSE_WITH_CUDA
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "kernels/attention.h"
#include "gpu/gpu_test_util.h"
#include "cuda/cuda_check.h"
#include "cuda/device.h"
#endif

namespace opfuse {
namespace {

#ifndef OPFUSE_WITH_CUDA

TEST(LibraryAttentionTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without OPFUSE_CUDA"; }

#else

using kernels::AttentionPath;
using kernels::AttentionPlanOptions;
using kernels::TensorRef;

struct AttnCase {
  DType dtype;
  int64_t T, S, Hq, Hkv, D;
  bool causal;
  double scale;  // 0: the default 1/sqrt(D)
};

std::string CaseName(const AttnCase& c) {
  std::string s = fmt::format("{}_T{}_S{}_H{}x{}_D{}_{}", DTypeName(c.dtype), c.T, c.S, c.Hq, c.Hkv, c.D,
                              c.causal ? "causal" : "full");
  if (c.scale != 0) {
    std::string v = fmt::format("{}", c.scale);
    for (char& ch : v) ch = ch == '.' ? 'p' : ch == '-' ? 'm' : ch;
    s += "_scale" + v;
  }
  return s;
}
void PrintTo(const AttnCase& c, std::ostream* os) { *os << CaseName(c); }

std::string GraphText(const AttnCase& c) {
  const char* dt = DTypeName(c.dtype);
  std::string attrs = fmt::format("causal={}", c.causal ? 1 : 0);
  if (c.scale != 0) attrs += fmt::format(", scale={}", c.scale);
  return fmt::format(
      "graph g\ninput q: {0}[T, {1}, {3}]\ninput k: {0}[S, {2}, {3}]\ninput v: {0}[S, {2}, {3}]\n"
      "y = attention(q, k, v) {{{4}}}\noutput y\n",
      dt, c.Hq, c.Hkv, c.D, attrs);
}

double Bound(DType t) {
  switch (t) {
    case DType::kBF16: return 1e-2;
    case DType::kF16: return 2e-3;
    default: return 2e-5;
  }
}

bool TensorCoreApplies(const AttnCase& c) {  // scale 0 is the default 1/sqrt(D)
  return (c.dtype == DType::kBF16 || c.dtype == DType::kF16) && (c.D == 64 || c.D == 128) && c.scale >= 0;
}

// cudaMalloc'd block, freed on scope exit.
struct DevBuf {
  void* p = nullptr;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  Status Alloc(size_t n) { return cuda::CudaStatus(cudaMalloc(&p, std::max<size_t>(n, 16)), "cudaMalloc"); }
};

Node AttentionNode(bool causal, double scale) {
  Node n;
  n.op = OpKind::kAttention;
  n.attrs["causal"] = int64_t{causal ? 1 : 0};
  if (scale != 0) n.attrs["scale"] = scale;
  return n;
}

// ------------------------------------------------------------------ host-only planner tests

using testing_device::FakeH200;  // tests/fake_device.h

std::vector<TensorRef> Refs(DType t, int64_t T, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, void* base = nullptr) {
  char* b = static_cast<char*>(base);
  return {TensorRef{b, t, {T, Hq, D}}, TensorRef{b, t, {S, Hkv, D}}, TensorRef{b, t, {S, Hkv, D}}};
}

TEST(LibraryAttentionPlan, PicksKernelsAndSplits) {  // no GPU needed: planning launches nothing
  const cuda::DeviceInfo dev = FakeH200();
  const Node n = AttentionNode(true, 0);
  // Prefill bf16 D=64: the tensor-core kernel, no scratch; 2048 causal rows fill the device with
  // 128-row blocks folded (8 a head: row tiles 15-x and x), whether the occupancy comes from the
  // device or (host-only) from the kernel's launch bounds.
  auto in = Refs(DType::kBF16, 2048, 2048, 32, 4, 64);
  std::vector<TensorRef> out = {TensorRef{nullptr, DType::kBF16, {2048, 32, 64}}};
  EXPECT_EQ(kernels::AttentionWorkspaceBytes(n, in, dev), 0u);
  auto l = kernels::PlanAttention(n, in, out, dev);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_EQ(l->size(), 1u);
  // On a cc 9.0 device the Hopper (wgmma) form of the 128-row tile: 384 threads, one block a SM.
  EXPECT_EQ((*l)[0].name(), "attention_wgmma_bf16_d64_m128_fold");
  EXPECT_EQ((*l)[0].grid().x, 8u);
  EXPECT_EQ((*l)[0].grid().y, 32u);
  EXPECT_EQ((*l)[0].block().x, 384u);
  {  // wgmma = 0: the mma.sync kernel's 128-row instance, folded the same way
    AttentionPlanOptions po;
    po.wgmma = 0;
    auto m = kernels::PlanAttentionWith(n, in, out, dev, po);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ((*m)[0].name(), "attention_mma_bf16_d64_m128_fold");
    EXPECT_EQ((*m)[0].grid().x, 8u);
    EXPECT_EQ((*m)[0].block().x, 128u);
  }
  {  // a 256-token prefill fills no wave of one-block-a-SM tiles: the mma.sync kernel
    auto in256 = Refs(DType::kBF16, 256, 256, 32, 4, 64);
    std::vector<TensorRef> out256 = {TensorRef{nullptr, DType::kBF16, {256, 32, 64}}};
    auto m = kernels::PlanAttention(n, in256, out256, dev);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ((*m)[0].name().rfind("attention_mma_", 0), 0u) << (*m)[0].name();
  }
  {  // another compute capability: never the Hopper kernel; forcing it says why
    cuda::DeviceInfo other = dev;
    other.major = 10;
    auto m = kernels::PlanAttention(n, in, out, other);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ((*m)[0].name().rfind("attention_mma_", 0), 0u) << (*m)[0].name();
    AttentionPlanOptions po;
    po.wgmma = 1;
    auto f = kernels::PlanAttentionWith(n, in, out, other, po);
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.status().message().find("compute capability 10.0"), std::string::npos) << f.status().ToString();
  }

  // Decode T=1, S=4096, GQA 32/4: split-K with scratch, one pass without.
  in = Refs(DType::kBF16, 1, 4096, 32, 4, 64);
  out = {TensorRef{nullptr, DType::kBF16, {1, 32, 64}}};
  const size_t ws = kernels::AttentionWorkspaceBytes(n, in, dev);
  EXPECT_GT(ws, 0u);
  EXPECT_EQ(ws % (32 * (64 + 2) * sizeof(float)), 0u);  // whole splits of T*Hq rows x (D + 2) floats
  l = kernels::PlanAttention(n, in, out, dev);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_EQ(l->size(), 1u);
  EXPECT_EQ((*l)[0].name(), "attention_general_bf16_rb4_c2");
  EXPECT_EQ((*l)[0].grid().x, 2u);  // the group's 8 query heads in two blocks of 4 rows sharing K/V reads
  EXPECT_EQ((*l)[0].grid().y, 4u);  // kv heads
  in.push_back(TensorRef{reinterpret_cast<void*>(uintptr_t{1} << 20), DType::kF32,
                         {static_cast<int64_t>(ws / sizeof(float))}});
  l = kernels::PlanAttention(n, in, out, dev);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_EQ(l->size(), 2u);
  EXPECT_NE((*l)[0].name().find("_split"), std::string::npos) << (*l)[0].name();
  EXPECT_GT((*l)[0].grid().z, 1u);
  EXPECT_LE((*l)[0].grid().z, static_cast<unsigned>(kernels::kAttentionMaxSplits));
  EXPECT_EQ((*l)[1].name(), "attention_combine_bf16");
  EXPECT_EQ((*l)[1].grid().x, 32u);
  // Less scratch than asked for: fewer splits, still valid.
  in.back().shape = {static_cast<int64_t>(3 * 32 * 66)};
  l = kernels::PlanAttention(n, in, out, dev);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_EQ(l->size(), 2u);
  EXPECT_EQ((*l)[0].grid().z, 3u);

  // f32 and general head dims take the general kernel; so do unaligned pointers.
  for (auto [t, d] : {std::pair{DType::kF32, int64_t{64}}, std::pair{DType::kBF16, int64_t{80}},
                      std::pair{DType::kF16, int64_t{256}}}) {
    in = Refs(t, 300, 300, 8, 8, d);
    out = {TensorRef{nullptr, t, {300, 8, d}}};
    l = kernels::PlanAttention(n, in, out, dev);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_EQ((*l)[0].name().rfind("attention_general_", 0), 0u) << (*l)[0].name();
  }
  in = Refs(DType::kF16, 300, 300, 8, 8, 128, reinterpret_cast<void*>(uintptr_t{0x1002}));
  out = {TensorRef{nullptr, DType::kF16, {300, 8, 128}}};
  l = kernels::PlanAttention(n, in, out, dev);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ((*l)[0].name().rfind("attention_general_", 0), 0u) << (*l)[0].name();
}

TEST(LibraryAttentionPlan, Errors) {
  const cuda::DeviceInfo dev = FakeH200();
  const Node n = AttentionNode(true, 0);
  auto plan = [&](std::vector<TensorRef> in, std::vector<TensorRef> out, AttentionPath path = AttentionPath::kAuto) {
    AttentionPlanOptions o;
    o.path = path;
    return kernels::PlanAttentionWith(n, in, out, dev, o);
  };
  auto out_of = [](DType t, int64_t T, int64_t Hq, int64_t D) {
    return std::vector<TensorRef>{TensorRef{nullptr, t, {T, Hq, D}}};
  };
  // Query heads not a multiple of kv heads.
  auto r = plan(Refs(DType::kBF16, 4, 4, 6, 4, 64), out_of(DType::kBF16, 4, 6, 64));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a multiple"), std::string::npos) << r.status().message();
  // Head dim beyond the kernels.
  r = plan(Refs(DType::kF32, 4, 4, 2, 2, 257), out_of(DType::kF32, 4, 2, 257));
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("257"), std::string::npos) << r.status().message();
  // Output shape / dtype mismatch.
  r = plan(Refs(DType::kBF16, 4, 4, 2, 2, 64), out_of(DType::kF16, 4, 2, 64));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  // k / v disagree.
  auto in = Refs(DType::kBF16, 4, 4, 2, 2, 64);
  in[2].shape = {5, 2, 64};
  r = plan(in, out_of(DType::kBF16, 4, 2, 64));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  // Tensor cores forced where they cannot run: a reason, never a silent fallback.
  r = plan(Refs(DType::kF32, 64, 64, 2, 2, 64), out_of(DType::kF32, 64, 2, 64), AttentionPath::kTensorCore);
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("f32"), std::string::npos) << r.status().message();
  r = plan(Refs(DType::kBF16, 64, 64, 2, 2, 80), out_of(DType::kBF16, 64, 2, 80), AttentionPath::kTensorCore);
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  {  // a negative scale: the tensor-core kernel's maximum is over raw scores
    Node neg = AttentionNode(true, -0.5);
    AttentionPlanOptions o;
    o.path = AttentionPath::kTensorCore;
    auto rn = kernels::PlanAttentionWith(neg, Refs(DType::kBF16, 64, 64, 2, 2, 64), out_of(DType::kBF16, 64, 2, 64), dev, o);
    EXPECT_EQ(rn.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(rn.status().message().find("scale"), std::string::npos) << rn.status().message();
    o.path = AttentionPath::kAuto;
    auto ra = kernels::PlanAttentionWith(neg, Refs(DType::kBF16, 64, 64, 2, 2, 64), out_of(DType::kBF16, 64, 2, 64), dev, o);
    ASSERT_TRUE(ra.ok()) << ra.status().ToString();
    ASSERT_FALSE(ra->empty());
    EXPECT_EQ(ra->back().name().rfind("attention_general_", 0), 0u) << ra->back().name();
  }
  // Empty output: nothing to launch.
  auto e = plan(Refs(DType::kBF16, 0, 4, 2, 2, 64), out_of(DType::kBF16, 0, 2, 64));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(e->empty());
}

// ------------------------------------------------------------------ numerics on the GPU

class LibraryAttentionTest : public testing_gpu::WithGpu<::testing::TestWithParam<AttnCase>> {};

struct Variant {
  const char* name;
  AttentionPath path;
  bool workspace;
  bool unaligned;  // q/k/v/y one element past a 16-byte boundary
  bool counters = false;  // arrival counters: the last split block merges (no combine kernel); run twice
  int mma_instance = -1;  // tensor cores: the instance (0: 128-row blocks, 1: 64-row) and folding forced
  int mma_fold = -1;
  int wgmma = -1;  // the Hopper kernel: forced (1) or excluded (0); -1 the chooser
};

TEST_P(LibraryAttentionTest, MatchesCpuReference) {
  const AttnCase c = GetParam();
  const std::string name = CaseName(c);
  auto g = ParseGraph(GraphText(c));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const Bindings bind{{"T", c.T}, {"S", c.S}};
  const uint64_t seed = std::random_device{}();
  std::printf("[ seed     ] %s seed %llu\n", name.c_str(), static_cast<unsigned long long>(seed));
  SCOPED_TRACE(::testing::Message() << name << " seed " << seed);
  const auto inputs = RandomInputs(*g, bind, seed);
  CpuRunOptions opts;
  opts.bindings = bind;
  auto ref_map = RunGraphCpu(*g, inputs, opts);
  ASSERT_TRUE(ref_map.ok()) << ref_map.status().ToString();
  const HostTensor& ref = ref_map->at("y");
  const Node& node = g->nodes.at(0);
  ASSERT_EQ(node.op, OpKind::kAttention);
  const HostTensor* hin[3] = {&inputs.at("q"), &inputs.at("k"), &inputs.at("v")};
  const size_t esize = DTypeSize(c.dtype);

  std::vector<Variant> variants = {{"auto", AttentionPath::kAuto, true, false},
                                   {"auto_no_workspace", AttentionPath::kAuto, false, false},
                                   {"general", AttentionPath::kGeneral, true, false},
                                   {"general_unaligned", AttentionPath::kGeneral, true, true},
                                   {"general_lastblock", AttentionPath::kGeneral, true, false, true}};
  if (TensorCoreApplies(c)) {
    variants.push_back({"tensor_core", AttentionPath::kTensorCore, false, false});
    // Every instance, folded and not (the chooser picks by shape and device; each must be right).
    variants.push_back({"tc_m128_fold", AttentionPath::kTensorCore, false, false, false, 0, 1});
    variants.push_back({"tc_m128", AttentionPath::kTensorCore, false, false, false, 0, 0});
    variants.push_back({"tc_m64_fold", AttentionPath::kTensorCore, false, false, false, 1, 1});
    variants.push_back({"tc_m64", AttentionPath::kTensorCore, false, false, false, 1, 0});
    variants.push_back({"tc_no_wgmma", AttentionPath::kTensorCore, false, false, false, -1, -1, 0});
    if (dev_.major == 9 && dev_.minor == 0) {  // the Hopper kernel, folded and not
      variants.push_back({"wgmma_fold", AttentionPath::kTensorCore, false, false, false, -1, 1, 1});
      variants.push_back({"wgmma", AttentionPath::kTensorCore, false, false, false, -1, 0, 1});
    }
  }

  for (const Variant& var : variants) {
    SCOPED_TRACE(var.name);
    const size_t shift = var.unaligned ? esize : 0;
    DevBuf din[3], dout, dws, dsem;
    std::vector<TensorRef> in;
    for (int i = 0; i < 3; ++i) {
      ASSERT_OK(din[i].Alloc(hin[i]->data.size() + 16));
      char* p = static_cast<char*>(din[i].p) + shift;
      ASSERT_OK(cuda::CudaStatus(cudaMemcpy(p, hin[i]->data.data(), hin[i]->data.size(), cudaMemcpyHostToDevice),
                                 "upload"));
      in.push_back(TensorRef{p, c.dtype, hin[i]->shape});
    }
    HostTensor out(c.dtype, ref.shape);
    ASSERT_OK(dout.Alloc(out.data.size() + 16));
    char* op = static_cast<char*>(dout.p) + shift;
    ASSERT_OK(cuda::CudaStatus(cudaMemset(dout.p, 0xFF, out.data.size() + 16), "poison"));  // NaN
    std::vector<TensorRef> outs = {TensorRef{op, c.dtype, ref.shape}};

    AttentionPlanOptions po;
    po.path = var.path;
    po.mma_instance = var.mma_instance;
    po.mma_fold = var.mma_fold;
    po.wgmma = var.wgmma;
    if (var.workspace) {
      const size_t bytes = kernels::AttentionWorkspaceBytesFor(in, dev_, var.path);
      if (bytes > 0) {
        ASSERT_OK(dws.Alloc(bytes));
        // Poison the scratch too: every value the combine reads must have been written.
        ASSERT_OK(cuda::CudaStatus(cudaMemset(dws.p, 0xFF, bytes), "poison workspace"));
        po.workspace = dws.p;
        po.workspace_bytes = bytes;
        if (var.counters) {
          Node kn = node;
          const size_t count = kernels::AttentionCounterCount(kn, in, dev_);
          ASSERT_GT(count, 0u) << "a split plan needs arrival counters";
          ASSERT_OK(dsem.Alloc(count * sizeof(unsigned)));
          ASSERT_OK(cuda::CudaStatus(cudaMemset(dsem.p, 0, count * sizeof(unsigned)), "zero counters"));
          po.counters = static_cast<unsigned*>(dsem.p);
          po.counter_count = count;
        }
      }
    }
    auto launches = kernels::PlanAttentionWith(node, in, outs, dev_, po);
    ASSERT_TRUE(launches.ok()) << launches.status().ToString();
    ASSERT_FALSE(launches->empty());
    std::string names;
    for (const auto& l : *launches) names += l.name() + " ";
    const bool auto_mma = var.path == AttentionPath::kAuto && !var.unaligned && TensorCoreApplies(c) &&
                          c.T > kernels::kAttentionDecodeMaxT;
    if (auto_mma || var.path == AttentionPath::kTensorCore) {
      if (var.wgmma == 1) {
        EXPECT_EQ(names.rfind("attention_wgmma_", 0), 0u) << names;
      } else if (var.wgmma == 0 || var.mma_instance >= 0) {
        EXPECT_EQ(names.rfind("attention_mma_", 0), 0u) << names;
      } else {
        EXPECT_TRUE(names.rfind("attention_mma_", 0) == 0 || names.rfind("attention_wgmma_", 0) == 0) << names;
      }
      if (var.mma_instance >= 0) {
        EXPECT_NE(names.find(var.mma_instance == 0 ? "_m128" : "_m64"), std::string::npos) << names;
      }
      if (var.mma_fold >= 0) {
        EXPECT_EQ(names.find("_fold") != std::string::npos, c.causal && var.mma_fold > 0) << names;
      }
    } else {
      EXPECT_EQ(names.rfind("attention_general_", 0), 0u) << names;
    }
    if (var.path == AttentionPath::kGeneral && var.workspace && c.T == 1 && c.S >= 1000) {
      EXPECT_NE(names.find("_split"), std::string::npos) << "long decode did not split: " << names;
    }
    if (!var.workspace) {
      EXPECT_EQ(names.find("_split"), std::string::npos) << names;
    }
    if (po.counters) {
      EXPECT_EQ(launches->size(), 1u) << "the last block merges: no combine kernel: " << names;
      EXPECT_NE(names.find("_lastblock"), std::string::npos) << names;
      // A first run, then the output poisoned again: the second run must find its counters at zero.
      for (const auto& l : *launches) ASSERT_OK(l.Launch(nullptr));
      ASSERT_OK(cuda::CudaStatus(cudaMemset(dout.p, 0xFF, out.data.size() + 16), "poison"));
    }
    for (const auto& l : *launches) ASSERT_OK(l.Launch(nullptr));
    ASSERT_OK(cuda::CudaStatus(cudaDeviceSynchronize(), "kernel run"));
    if (po.counters) {
      std::vector<unsigned> sem(po.counter_count);
      ASSERT_OK(cuda::CudaStatus(cudaMemcpy(sem.data(), po.counters, sem.size() * sizeof(unsigned), cudaMemcpyDeviceToHost),
                                 "download counters"));
      EXPECT_EQ(std::count(sem.begin(), sem.end(), 0u), static_cast<std::ptrdiff_t>(sem.size()))
          << "arrival counters not reset";
    }
    ASSERT_OK(cuda::CudaStatus(cudaMemcpy(out.data.data(), op, out.data.size(), cudaMemcpyDeviceToHost), "download"));
    for (int i = 0; i < 3; ++i) {
      std::vector<uint8_t> back(hin[i]->data.size());
      ASSERT_OK(cuda::CudaStatus(cudaMemcpy(back.data(), in[i].data, back.size(), cudaMemcpyDeviceToHost), "download"));
      EXPECT_TRUE(back == hin[i]->data) << "input " << i << " was modified";
    }

    int64_t nonfinite = 0, nonzero = 0, bad_zero_rows = 0;
    double num = 0, den = 0;
    for (int64_t i = 0; i < out.numel(); ++i) {
      const double o = out.get(i), r = ref.get(i);
      if (!std::isfinite(o)) {
        ++nonfinite;
        continue;
      }
      if (o != 0) ++nonzero;
      num += (o - r) * (o - r);
      den += r * r;
      // A row with no visible key (causal, t + S - T + 1 <= 0) must be exactly zero.
      const int64_t t = i / (c.Hq * c.D);
      if (c.causal && t + c.S - c.T + 1 <= 0 && o != 0) ++bad_zero_rows;
    }
    ASSERT_EQ(nonfinite, 0) << names << ": non-finite outputs (unwritten or NaN)";
    ASSERT_GT(nonzero, 0) << names << ": all-zero output";
    EXPECT_EQ(bad_zero_rows, 0) << names << ": rows without visible keys are not zero";
    const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
    EXPECT_LE(rel, Bound(c.dtype)) << names << " relative error " << rel;
    std::printf("[ rel err  ] %-44s %-18s %.3e (bound %.0e) %s\n", name.c_str(), var.name, rel, Bound(c.dtype),
                names.c_str());
  }
}

std::vector<AttnCase> AllCases() {
  std::vector<AttnCase> cs;
  const DType bf = DType::kBF16, hf = DType::kF16, f32 = DType::kF32;
  // Prefill T = S, causal and not: bf16 GQA 32/4 D=64 (TinyLlama), f16 MHA 8/8 D=128, f32 GQA D=64.
  for (int64_t t : {1, 17, 128, 300}) {
    for (bool causal : {true, false}) {
      cs.push_back({bf, t, t, 32, 4, 64, causal, 0});
      cs.push_back({hf, t, t, 8, 8, 128, causal, 0});
      cs.push_back({f32, t, t, 32, 4, 64, causal, 0});
    }
  }
  cs.push_back({bf, 300, 300, 8, 8, 128, true, 0});
  cs.push_back({hf, 300, 300, 32, 4, 64, true, 0});
  // Odd prefill lengths and T < S over several row tiles (every instance is forced on each).
  cs.push_back({bf, 777, 777, 8, 2, 64, true, 0});
  cs.push_back({hf, 515, 900, 4, 4, 128, true, 0});
  cs.push_back({bf, 641, 641, 4, 1, 128, false, 0});
  // Decode T = 1.
  for (int64_t s : {1, 31, 1000, 4097}) {
    cs.push_back({bf, 1, s, 32, 4, 64, true, 0});
    cs.push_back({hf, 1, s, 8, 8, 128, true, 0});
  }
  cs.push_back({bf, 1, 1000, 32, 4, 64, false, 0});
  cs.push_back({f32, 1, 4097, 8, 8, 128, true, 0});
  cs.push_back({bf, 1, 4097, 8, 8, 128, true, 0});
  cs.push_back({hf, 1, 1000, 32, 8, 128, true, 0});
  // Queries are the last T of S positions (T < S, causal), small and prefill-sized T.
  cs.push_back({bf, 4, 260, 32, 4, 64, true, 0});
  cs.push_back({hf, 4, 260, 8, 8, 128, true, 0});
  cs.push_back({f32, 4, 260, 32, 4, 80, true, 0});
  cs.push_back({bf, 16, 700, 32, 4, 64, true, 0});
  cs.push_back({bf, 100, 333, 32, 4, 64, true, 0});
  cs.push_back({hf, 70, 190, 8, 8, 128, true, 0});
  // T > S causal: the first T - S rows see no key (zeros).
  cs.push_back({bf, 24, 8, 8, 8, 64, true, 0});
  cs.push_back({hf, 80, 33, 4, 2, 128, true, 0});
  cs.push_back({f32, 4, 2, 8, 2, 40, true, 0});
  // General head dims (the general kernel; 33 is not a vector multiple: scalar loads).
  cs.push_back({bf, 128, 128, 8, 2, 40, true, 0});
  cs.push_back({bf, 1, 1000, 8, 2, 40, true, 0});
  cs.push_back({hf, 1, 1000, 16, 4, 80, true, 0});
  cs.push_back({f32, 17, 17, 8, 8, 80, false, 0});
  cs.push_back({f32, 17, 40, 4, 2, 33, true, 0});
  cs.push_back({hf, 1, 300, 4, 4, 33, true, 0});
  cs.push_back({bf, 17, 40, 4, 2, 256, true, 0});
  cs.push_back({f32, 1, 500, 4, 2, 200, true, 0});
  cs.push_back({hf, 40, 40, 4, 1, 256, false, 0});
  // Custom scales: sharper softmax (online rescaling matters), and a negative one.
  cs.push_back({bf, 300, 300, 32, 4, 64, true, 1.0});
  cs.push_back({hf, 128, 128, 8, 8, 128, false, 0.3});
  cs.push_back({bf, 1, 4097, 32, 4, 64, true, 1.0});
  cs.push_back({f32, 17, 17, 8, 2, 40, true, -0.2});
  cs.push_back({bf, 300, 300, 32, 4, 64, true, -0.2});  // prefill-sized: the general kernel, not tensor cores
  // Prefill T = S = 1 and decode S = 1 coincide: keep each case once.
  std::vector<AttnCase> unique;
  for (const AttnCase& c : cs)
    if (std::none_of(unique.begin(), unique.end(), [&](const AttnCase& u) { return CaseName(u) == CaseName(c); }))
      unique.push_back(c);
  return unique;
}

INSTANTIATE_TEST_SUITE_P(All, LibraryAttentionTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<AttnCase>& i) { return CaseName(i.param); });

// ------------------------------------------------------------------ speed (bounds from pairs in the same run)

class LibraryAttentionSpeed : public testing_gpu::WithGpu<::testing::Test> {};

// Median µs of one run of `launches` over `samples` samples (after warm-up); `flush` (if set) is
// overwritten before every sample so the inputs are not served from L2.
double MedianMicros(const std::vector<cuda::KernelLaunch>& launches, DevBuf* flush, size_t flush_bytes, int samples,
                    Status* st) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int w = 0; w < 5; ++w)
    for (const auto& l : launches)
      if (Status s = l.Launch(nullptr); !s.ok()) *st = s;
  std::vector<float> ms;
  for (int i = 0; i < samples; ++i) {
    if (flush) cudaMemsetAsync(flush->p, i & 0xFF, flush_bytes, nullptr);
    cudaEventRecord(a, nullptr);
    for (const auto& l : launches)
      if (Status s = l.Launch(nullptr); !s.ok()) *st = s;
    cudaEventRecord(b, nullptr);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  if (Status s = cuda::CudaStatus(cudaDeviceSynchronize(), "timed runs"); !s.ok()) *st = s;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e3;
}

TEST_F(LibraryAttentionSpeed, PrefillAndDecode) {
  std::printf("device: %s\n", dev_.ToString().c_str());
  std::mt19937_64 rng(std::random_device{}());
  const size_t flush_bytes = static_cast<size_t>(std::max<int64_t>(dev_.l2_bytes, 1 << 20)) * 2;
  DevBuf flush;
  ASSERT_OK(flush.Alloc(flush_bytes));

  struct Shape {
    const char* what;
    int64_t T, S, Hq, Hkv, D;
    bool causal;
    AttentionPath path;
    bool workspace;
    int max_splits = 0;  // 0: the planner's choice
  };
  const Shape shapes[] = {
      {"prefill TinyLlama causal", 2048, 2048, 32, 4, 64, true, AttentionPath::kAuto, true},
      {"prefill TinyLlama causal", 2048, 2048, 32, 4, 64, true, AttentionPath::kGeneral, true},
      {"prefill Llama-7B causal", 2048, 2048, 32, 32, 128, true, AttentionPath::kAuto, true},
      {"prefill Llama-7B full", 2048, 2048, 32, 32, 128, false, AttentionPath::kAuto, true},
      {"decode TinyLlama", 1, 4096, 32, 4, 64, true, AttentionPath::kAuto, true},
      {"decode TinyLlama", 1, 4096, 32, 4, 64, true, AttentionPath::kAuto, false},
      {"decode TinyLlama S=1024", 1, 1024, 32, 4, 64, true, AttentionPath::kAuto, true},
      {"decode TinyLlama T=4", 4, 4096, 32, 4, 64, true, AttentionPath::kAuto, true},
      {"decode Llama-7B", 1, 4096, 32, 32, 128, true, AttentionPath::kAuto, true},
      {"decode Llama-7B", 1, 4096, 32, 32, 128, true, AttentionPath::kAuto, false},
      {"decode Llama-3-8B", 1, 8192, 32, 8, 128, true, AttentionPath::kAuto, true},
  };
  const char* only = std::getenv("OPFUSE_ATTENTION_SPEED_FILTER");  // substring of `what` (profiling runs)
  std::map<std::string, std::vector<double>> us_of;  // by `what`, in the order of `shapes`
  for (const Shape& sh : shapes) {
    if (only && std::string(sh.what).find(only) == std::string::npos) continue;
    const DType dt = DType::kBF16;
    HostTensor q(dt, {sh.T, sh.Hq, sh.D}), k(dt, {sh.S, sh.Hkv, sh.D}), v(dt, {sh.S, sh.Hkv, sh.D});
    FillRandom(q, rng);
    FillRandom(k, rng);
    FillRandom(v, rng);
    DevBuf dq, dk, dv, dy, dws;
    std::vector<TensorRef> in;
    for (auto [h, d] : {std::pair{&q, &dq}, std::pair{&k, &dk}, std::pair{&v, &dv}}) {
      ASSERT_OK(d->Alloc(h->data.size()));
      ASSERT_OK(cuda::CudaStatus(cudaMemcpy(d->p, h->data.data(), h->data.size(), cudaMemcpyHostToDevice), "upload"));
      in.push_back(TensorRef{d->p, dt, h->shape});
    }
    ASSERT_OK(dy.Alloc(q.data.size()));
    std::vector<TensorRef> out = {TensorRef{dy.p, dt, q.shape}};
    AttentionPlanOptions po;
    po.path = sh.path;
    po.max_splits = sh.max_splits;
    if (sh.workspace) {
      po.workspace_bytes = kernels::AttentionWorkspaceBytesFor(in, dev_, sh.path, sh.max_splits);
      if (po.workspace_bytes) {
        ASSERT_OK(dws.Alloc(po.workspace_bytes));
        po.workspace = dws.p;
      }
    }
    auto launches = kernels::PlanAttentionWith(AttentionNode(sh.causal, 0), in, out, dev_, po);
    ASSERT_TRUE(launches.ok()) << launches.status().ToString();
    Status st = Status::Ok();
    const bool decode = sh.T <= kernels::kAttentionDecodeMaxT;
    const double us = MedianMicros(*launches, decode ? &flush : nullptr, flush_bytes, decode ? 50 : 25, &st);
    ASSERT_OK(st);
    us_of[sh.what].push_back(us);
    std::string names;
    for (const auto& l : *launches) names += l.name() + " ";
    if (launches->size() > 1) {  // the split kernel alone, to see what the combine costs
      const double first = MedianMicros({launches->front()}, decode ? &flush : nullptr, flush_bytes, 50, &st);
      ASSERT_OK(st);
      names += fmt::format("(first kernel alone {:.2f} us)", first);
    }
    if (decode) {
      const double bytes = 2.0 * sh.S * sh.Hkv * sh.D * DTypeSize(dt);
      std::printf("[ speed    ] %-26s T=%-5lld S=%-5lld Hq=%lld Hkv=%lld D=%lld: %8.2f us  %7.1f GB/s (K+V)  %s\n",
                  sh.what, (long long)sh.T, (long long)sh.S, (long long)sh.Hq, (long long)sh.Hkv, (long long)sh.D, us,
                  bytes / us * 1e-3, names.c_str());
    } else {
      double pairs = 0;  // (query, key) pairs actually attended
      for (int64_t i = 0; i < sh.T; ++i) pairs += sh.causal ? std::min<int64_t>(sh.S, i + sh.S - sh.T + 1) : sh.S;
      const double flops = 4.0 * pairs * sh.D * sh.Hq;
      std::printf("[ speed    ] %-26s T=%-5lld S=%-5lld Hq=%lld Hkv=%lld D=%lld: %8.2f us  %7.1f TFLOP/s  %s\n",
                  sh.what, (long long)sh.T, (long long)sh.S, (long long)sh.Hq, (long long)sh.Hkv, (long long)sh.D, us,
                  flops / us * 1e-6, names.c_str());
    }
  }
  // Bounds from pairs measured in this run, about a third of what is reached (docs/BENCHMARKS.md:
  // the tensor-core prefill 11x the general kernel; split-K decode 3.8-6.7x the unsplit kernel):
  // the fast paths must stay much faster than the fallbacks they replace.
  if (only) return;
  const auto& tl = us_of["prefill TinyLlama causal"];
  ASSERT_EQ(tl.size(), 2u);
  EXPECT_GE(tl[1] / tl[0], 3.0) << "tensor-core prefill " << tl[0] << " us vs general " << tl[1] << " us";
  for (const char* what : {"decode TinyLlama", "decode Llama-7B"}) {
    const auto& d = us_of[what];
    ASSERT_EQ(d.size(), 2u) << what;
    EXPECT_GE(d[1] / d[0], 1.5) << what << ": split " << d[0] << " us vs one kernel " << d[1] << " us";
  }
}

#endif  // OPFUSE_WITH_CUDA

}  // namespace
}  // namespace opfuse
