// Measures (and loosely bounds) JIT compile cost on this machine: cold NVRTC compile per kernel
// for the 18 shared JIT cases, serial and with all cores, plus cache memory/disk hit latency.
// Numbers are printed with the prefix "[jit-timing]" for docs/BENCHMARKS.md; the assertions are
// only loose upper bounds so a slow CI machine passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

#include "jit/jit_compiler.h"
#include "jit/nvrtc_compiler.h"
#include "jit_cases.h"

namespace opfuse {
namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

std::vector<codegen::Kernel> Kernels() {
  std::vector<codegen::Kernel> out;
  for (const auto& c : testing_cases::kJitCases) {
    auto g = ParseGraph(c.text);
    EXPECT_TRUE(g.ok());
    auto k = testing_cases::WholeGraphKernel(*g);
    EXPECT_TRUE(k.ok()) << k.status().message();
    out.push_back(*k);
  }
  return out;
}

TEST(JitTiming, ColdCompileAndCacheHits) {
  if (!jit::NvrtcAvailable()) GTEST_SKIP() << "built without NVRTC";
  auto kernels = Kernels();
  // Warm NVRTC itself (library load, builtins) with one throwaway compile.
  {
    jit::KernelCache warm(jit::CacheOptions{"", true, false, 0});
    ASSERT_TRUE(jit::JitCompiler(warm, {"sm_90", true, 1}).CompileKernel(kernels[0], false).ok());
  }
  // Serial cold compiles: per-kernel times.
  std::vector<double> per;
  jit::KernelCache serial(jit::CacheOptions{"", true, false, 0});
  jit::JitCompiler c1(serial, {"sm_90", true, 1});
  for (const auto& k : kernels) {
    auto t0 = Clock::now();
    auto r = c1.CompileKernel(k, true);
    ASSERT_TRUE(r.ok()) << r.status().message();
    per.push_back(Ms(t0, Clock::now()));
  }
  std::vector<double> sorted = per;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted[sorted.size() / 2], total = 0;
  for (double v : per) total += v;
  // Parallel cold compiles (all cores), fresh cache.
  jit::KernelCache par(jit::CacheOptions{"", true, false, 0});
  jit::JitCompiler c2(par, {"sm_90", true, 0});
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  auto t0 = Clock::now();
  std::vector<std::thread> pool;
  std::atomic<size_t> next{0};
  for (unsigned t = 0; t < hw; ++t)
    pool.emplace_back([&] {
      for (size_t i = next++; i < kernels.size(); i = next++) EXPECT_TRUE(c2.CompileKernel(kernels[i], true).ok());
    });
  for (auto& t : pool) t.join();
  double par_ms = Ms(t0, Clock::now());
  // Memory hits.
  std::vector<double> hits;
  for (int i = 0; i < 2000; ++i) {
    auto h0 = Clock::now();
    ASSERT_TRUE(c1.CompileKernel(kernels[i % kernels.size()], true).ok());
    hits.push_back(Ms(h0, Clock::now()) * 1000.0);
  }
  std::sort(hits.begin(), hits.end());
  std::cout << "[jit-timing] kernels " << kernels.size() << ", cold NVRTC compile per kernel (serial): median "
            << median << " ms, min " << sorted.front() << " ms, max " << sorted.back() << " ms, total " << total
            << " ms\n[jit-timing] parallel cold compile (" << hw << " threads): " << par_ms << " ms total, "
            << par_ms / kernels.size() << " ms per kernel\n[jit-timing] memory hit incl. emit + key (median): "
            << hits[hits.size() / 2] << " us\n";
  EXPECT_LT(median, 2000.0);
}

}  // namespace
}  // namespace opfuse
