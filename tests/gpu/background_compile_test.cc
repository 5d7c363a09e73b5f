// Background compile + swap-in (cuda::ExecutorOptions::background_compile, docs/runtime.md): with a
// fresh, empty kernel cache the JIT kernel is really uncached, so the first run must take the
// fallback (op by op for a generic group, the library kernel for a pattern group) while the kernel
// compiles; after WaitForBackgroundCompiles the next run takes the JIT kernel — fewer kernels for
// the generic group — and both match the CPU reference on poisoned outputs (RunHost poisons them).
// The compile is held at its start (before_background_compile) so "first run = fallback" does not
// depend on how fast NVRTC is. A captured CUDA graph keeps what it captured until re-captured.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <future>
#include <random>

#include <unistd.h>

#include "../expect_close.h"
#include "../jit_cases.h"
#include "opfuse/graph.h"
#include "runtime/cpu/cpu_executor.h"
#include "ir/host_tensor.h"

#ifdef OPFUSE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "gpu/gpu_test_util.h"
#include "jit/kernel_cache.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/executor.h"

namespace opfuse {
namespace {

namespace fs = std::filesystem;

using testing_cases::ExpectClose;
using testing_gpu::FreshSeed;


// Holds the background compile at its start until released (released on scope exit, so a failing
// test never leaves the compile thread blocked while the executable is destroyed).
struct CompileGate {
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> started{0};
  bool released = false;
  void Release() {
    if (!released) release.set_value();
    released = true;
  }
  ~CompileGate() { Release(); }
  std::function<void(const std::string&)> Hook() {
    return [this](const std::string& name) {
      std::printf("background compile of %s starts\n", name.c_str());
      ++started;
      gate.wait();
    };
  }
};

class BackgroundCompileTest : public testing_gpu::WithGpu<> {
 protected:
  void SetUp() override {
    testing_gpu::WithGpu<>::SetUp();
    if (IsSkipped()) return;
    dir_ = fs::path(::testing::TempDir()) / ("opfuse_bg_cache_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    cache_ = std::make_unique<jit::KernelCache>(jit::CacheOptions{dir_.string(), true, true, 64 << 20});
  }
  void TearDown() override {
    cache_.reset();
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // Background compile into this test's fresh cache, each compile held at its start by `gate`.
  cuda::ExecutorOptions HeldOptions(CompileGate& gate) const {
    cuda::ExecutorOptions o;
    o.cache = cache_.get();
    o.background_compile = true;
    o.before_background_compile = gate.Hook();
    return o;
  }
  fs::path dir_;
  std::unique_ptr<jit::KernelCache> cache_;  // fresh and empty: the JIT kernel is really uncached
};

Graph Parse(const std::string& text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : Graph{};
}

// A generic group (mul, exp, add): 3 library kernels op by op, 1 JIT kernel.
constexpr const char* kGeneric =
    "graph bg_generic\ninput x: f32[T, 1024]\ninput y: f32[T, 1024]\na = mul(x, y)\nb = exp(a)\nc = add(b, x)\noutput c\n";

TEST_F(BackgroundCompileTest, GenericGroupRunsUnfusedThenTheJitKernel) {
  Graph g = Parse(kGeneric);
  const Bindings b = {{"T", 64}};
  auto inputs = RandomInputs(g, b, FreshSeed());
  auto ref = RunGraphCpu(g, inputs, CpuRunOptions{b});
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();

  CompileGate gate;
  cuda::ExecutorOptions o = HeldOptions(gate);
  auto ex = cuda::CudaExecutable::Create(g, o);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  cuda::CudaExecutable& x = **ex;

  int jit_steps = 0, fallback_steps = 0;
  for (const auto& s : x.steps()) {
    std::printf("step %s kind=%s guard=%s\n", s.name.c_str(), s.kind.c_str(), s.guard.c_str());
    if (s.guard == "background_jit") {
      ++jit_steps;
      EXPECT_EQ(s.kind, "jit");
    }
    if (s.guard == "fallback") {
      ++fallback_steps;
      EXPECT_EQ(s.kind, "library");
    }
  }
  EXPECT_EQ(jit_steps, 1);
  EXPECT_EQ(fallback_steps, 3);  // mul, exp, add
  EXPECT_EQ(x.pending_compiles(), 1);
  EXPECT_EQ(x.generation(), 0u);
  ASSERT_EQ(x.fallbacks().size(), 1u);
  EXPECT_NE(x.fallbacks()[0].find("(pending)"), std::string::npos) << x.fallbacks()[0];
  EXPECT_NE(x.fallbacks()[0].find("jit -> unfused"), std::string::npos) << x.fallbacks()[0];

  // First run: the compile is held, so this is the fallback.
  auto first = x.RunHost(inputs, b);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(x.kernels_per_run(), 3);
  ExpectClose("fallback run", first->at("c"), ref->at("c"));

  gate.Release();
  x.WaitForBackgroundCompiles();
  EXPECT_EQ(gate.started.load(), 1);
  EXPECT_EQ(x.pending_compiles(), 0);
  EXPECT_EQ(x.generation(), 1u);
  for (const auto& f : x.fallbacks()) ADD_FAILURE() << "unexpected fallback after the swap: " << f;

  auto second = x.RunHost(inputs, b);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(x.kernels_per_run(), 1);  // the JIT kernel
  ExpectClose("jit run", second->at("c"), ref->at("c"));

  // A second executable on the same (now warm) cache compiles nothing in the background.
  cuda::ExecutorOptions warm = o;
  warm.before_background_compile = nullptr;
  auto ex2 = cuda::CudaExecutable::Create(g, warm);
  ASSERT_TRUE(ex2.ok()) << ex2.status().ToString();
  EXPECT_EQ((*ex2)->pending_compiles(), 0);
  for (const auto& s : (*ex2)->steps()) EXPECT_EQ(s.guard, "") << s.name;
  auto third = (*ex2)->RunHost(inputs, b);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ((*ex2)->kernels_per_run(), 1);
  ExpectClose("warm-cache run", third->at("c"), ref->at("c"));
}

// A pattern group forced to the JIT (rms_norm: library kernel exists) runs the library kernel while
// its JIT kernel compiles. Both are one kernel; the steps say which is which.
TEST_F(BackgroundCompileTest, PatternGroupRunsTheLibraryKernelMeanwhile) {
  const auto& c = testing_cases::kJitCases[0];  // rms_norm
  Graph g = Parse(c.text);
  auto inputs = RandomInputs(g, c.bind, FreshSeed());
  auto ref = RunGraphCpu(g, inputs, CpuRunOptions{c.bind});
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();

  CompileGate gate;
  cuda::ExecutorOptions o = HeldOptions(gate);
  o.variant = cuda::Variant::kJit;
  auto ex = cuda::CudaExecutable::Create(g, o);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  cuda::CudaExecutable& x = **ex;
  bool lib_fallback = false;
  for (const auto& s : x.steps()) lib_fallback |= s.guard == "fallback" && s.name.rfind("lib:", 0) == 0;
  EXPECT_TRUE(lib_fallback);
  ASSERT_FALSE(x.fallbacks().empty());
  EXPECT_NE(x.fallbacks()[0].find("jit -> library (pending)"), std::string::npos) << x.fallbacks()[0];

  auto first = x.RunHost(inputs, c.bind);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(x.kernels_per_run(), 1);
  for (const auto& [name, t] : *ref) ExpectClose("library run: " + name, first->at(name), t);

  gate.Release();
  x.WaitForBackgroundCompiles();
  EXPECT_EQ(x.generation(), 1u);
  auto second = x.RunHost(inputs, c.bind);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(x.kernels_per_run(), 1);
  for (const auto& [name, t] : *ref) ExpectClose("jit run: " + name, second->at(name), t);
  EXPECT_TRUE(x.fallbacks().empty());
}

// Without a profile, a row-pattern group whose rows are off the 16-byte grid is scheduled on the JIT
// (should_fuse.cc, PatternOnTheJit): under the default variant it runs its library kernel while the
// JIT kernel compiles, then the JIT kernel; so does geglu (erf form) at any width; rows on the grid
// stay on the library kernel, no compile.
// Every run matches the CPU reference.
TEST_F(BackgroundCompileTest, OffGridRowPatternAndGegluUnderAutoRunTheLibraryThenTheJit) {
  auto text = [](int cols) {
    return fmt::format("graph offgrid\ninput x: bf16[T, {0}]\nparam w: bf16[{0}]\ny = rms_norm(x, w) {{eps=1e-5}}\noutput y\n",
                       cols);
  };
  const Bindings b = {{"T", 300}};
  // The one pattern group of `graph` under the default variant: a library fallback step and a guarded
  // JIT step, the library kernel until the held compile is released, then the JIT kernel.
  auto library_then_jit = [&](const std::string& what, const std::string& graph) {
    SCOPED_TRACE(what);
    Graph g = Parse(graph);
    auto inputs = RandomInputs(g, b, FreshSeed());
    auto ref = RunGraphCpu(g, inputs, CpuRunOptions{b});
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    CompileGate gate;
    auto ex = cuda::CudaExecutable::Create(g, HeldOptions(gate));
    ASSERT_TRUE(ex.ok()) << ex.status().ToString();
    cuda::CudaExecutable& x = **ex;
    int lib_fallback = 0, jit_guarded = 0;
    for (const auto& s : x.steps()) {
      lib_fallback += s.guard == "fallback" && s.name.rfind("lib:", 0) == 0;
      jit_guarded += s.guard == "background_jit" && s.kind == "jit";
    }
    EXPECT_EQ(lib_fallback, 1);
    EXPECT_EQ(jit_guarded, 1);
    ASSERT_FALSE(x.fallbacks().empty());
    EXPECT_NE(x.fallbacks()[0].find("jit -> library (pending)"), std::string::npos) << x.fallbacks()[0];
    auto first = x.RunHost(inputs, b);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    ExpectClose(what + ": library run", first->at("y"), ref->at("y"));
    gate.Release();
    x.WaitForBackgroundCompiles();
    EXPECT_EQ(x.generation(), 1u);
    auto second = x.RunHost(inputs, b);
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    EXPECT_EQ(x.kernels_per_run(), 1);
    ExpectClose(what + ": jit run", second->at("y"), ref->at("y"));
    EXPECT_TRUE(x.fallbacks().empty());
  };
  library_then_jit("rms_norm 4999 (9998-byte rows: off the grid)", text(4999));
  library_then_jit("geglu 4096 (the erf form takes the JIT on the grid too)",
                   "graph gg\ninput a: bf16[T, 4096]\ninput u: bf16[T, 4096]\ny = geglu(a, u)\noutput y\n");
  {
    Graph g = Parse(text(4096));  // 8192-byte rows: on the grid
    auto inputs = RandomInputs(g, b, FreshSeed());
    auto ref = RunGraphCpu(g, inputs, CpuRunOptions{b});
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    CompileGate gate;
    auto ex = cuda::CudaExecutable::Create(g, HeldOptions(gate));
    ASSERT_TRUE(ex.ok()) << ex.status().ToString();
    EXPECT_EQ((*ex)->pending_compiles(), 0);
    ASSERT_EQ((*ex)->steps().size(), 1u);
    EXPECT_EQ((*ex)->steps()[0].kind, "library") << (*ex)->steps()[0].name;
    auto out = (*ex)->RunHost(inputs, b);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ExpectClose("library run (on the grid)", out->at("y"), ref->at("y"));
    EXPECT_EQ(gate.started.load(), 0);
  }
}

// A captured graph keeps the fallback it captured; re-capturing after generation() moved on takes
// the JIT kernel; both replays are correct.
TEST_F(BackgroundCompileTest, CapturedGraphKeepsItsPlanUntilReCaptured) {
  Graph g = Parse(kGeneric);
  const Bindings b = {{"T", 64}};
  auto inputs = RandomInputs(g, b, FreshSeed());
  auto ref = RunGraphCpu(g, inputs, CpuRunOptions{b});
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();

  CompileGate gate;
  cuda::ExecutorOptions o = HeldOptions(gate);
  auto ex = cuda::CudaExecutable::Create(g, o);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  cuda::CudaExecutable& x = **ex;

  auto& alloc = cuda::CachingAllocator::ForDevice(x.device().ordinal);
  std::vector<cuda::DeviceBuffer> bufs;
  std::vector<const void*> in;
  for (int v : x.graph().inputs) {
    const HostTensor& h = inputs.at(x.graph().values[v].name);
    auto d = cuda::DeviceBuffer::Make(alloc, h.data.size());
    ASSERT_TRUE(d.ok());
    ASSERT_CUDA(cudaMemcpy(d->get(), h.data.data(), h.data.size(), cudaMemcpyHostToDevice));
    in.push_back(d->get());
    bufs.push_back(std::move(*d));
  }
  HostTensor out(DType::kF32, {64, 1024});
  auto dout = cuda::DeviceBuffer::Make(alloc, out.data.size());
  ASSERT_TRUE(dout.ok());
  auto replay = [&](const cuda::CudaGraph& cg, const char* what) {
    ASSERT_CUDA(cudaMemset(dout->get(), 0xFF, out.data.size()));  // poisoned
    ASSERT_OK(cg.Launch(nullptr));
    ASSERT_CUDA(cudaStreamSynchronize(nullptr));
    ASSERT_CUDA(cudaMemcpy(out.data.data(), dout->get(), out.data.size(), cudaMemcpyDeviceToHost));
    ExpectClose(what, out, ref->at("c"));
  };

  auto before = x.Capture(in, {dout->get()}, b);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ((*before)->kernels(), 3);
  EXPECT_EQ((*before)->generation(), 0u);
  replay(**before, "graph captured with the fallback");

  gate.Release();
  x.WaitForBackgroundCompiles();
  ASSERT_NE((*before)->generation(), x.generation());  // the caller's cue to re-capture
  replay(**before, "old graph after the swap (keeps what it captured)");
  EXPECT_EQ((*before)->kernels(), 3);

  auto after = x.Capture(in, {dout->get()}, b);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ((*after)->kernels(), 1);
  EXPECT_EQ((*after)->generation(), x.generation());
  replay(**after, "re-captured graph with the JIT kernel");
}

}  // namespace
}  // namespace opfuse
#endif  // OPFUSE_WITH_CUDA
