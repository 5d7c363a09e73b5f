// The JIT cache end to end (issue: "a cache that never recompiles what it has seen"):
//  - one graph compiled at 50 different token counts compiles each kernel once;
//  - a second `opfuse compile` process compiles nothing (all disk hits);
//  - a corrupted disk entry is detected, reported and rebuilt;
//  - two processes racing on one empty cache directory both succeed, and leave a valid cache.
// Needs NVRTC (present wherever the CUDA toolkit is), not a GPU.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "jit/jit_compiler.h"
#include "jit/nvrtc_compiler.h"
#include "passes/pipeline.h"

namespace opfuse {
namespace {

namespace fs = std::filesystem;

const std::string kLayer = std::string(OPFUSE_SOURCE_DIR) + "/examples/graphs/llama_decoder_layer.ofg";

class JitCacheE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!jit::NvrtcAvailable()) GTEST_SKIP() << "built without NVRTC";
    dir_ = fs::temp_directory_path() / ("opfuse_jit_e2e_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `opfuse compile --stats --json` with the cache in dir_/cache; returns the JSON, rc, stderr.
  struct Run { int rc; nlohmann::json stats; std::string err; };
  std::string Command(int tag) const {
    // fuse_matmul off: with it the layer's norms, ropes and swiglu join the GEMV groups (library
    // kernels), leaving nothing for the JIT cache these tests are about.
    return "OPFUSE_DISABLE=fuse_matmul OPFUSE_CACHE_DIR=" + (dir_ / "cache").string() + " " + OPFUSE_CLI_PATH + " compile " + kLayer +
           " --stats --json > " + (dir_ / ("out" + std::to_string(tag))).string() + " 2> " +
           (dir_ / ("err" + std::to_string(tag))).string();
  }
  Run Collect(int tag, int status) const {
    Run r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream o(dir_ / ("out" + std::to_string(tag))), e(dir_ / ("err" + std::to_string(tag)));
    std::stringstream os, es;
    os << o.rdbuf();
    es << e.rdbuf();
    r.err = es.str();
    if (!os.str().empty()) r.stats = nlohmann::json::parse(os.str(), nullptr, false);
    return r;
  }
  Run Compile(int tag) const { return Collect(tag, std::system(Command(tag).c_str())); }
  std::vector<fs::path> Entries() const {
    std::vector<fs::path> out;
    for (auto& p : fs::recursive_directory_iterator(dir_ / "cache"))
      if (p.path().extension() == ".okc") out.push_back(p.path());
    return out;
  }
  fs::path dir_;
};

TEST_F(JitCacheE2E, FiftyTokenCountsCompileEachKernelOnce) {
  auto parsed = ParseGraphFile(kLayer);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  jit::KernelCache cache(jit::CacheOptions{"", true, false, 0});  // memory only: this process
  jit::JitCompiler compiler(cache, {"sm_90", true, 0});
  std::set<std::string> digests;
  size_t lookups = 0;
  for (int t = 1; t <= 50; ++t) {
    Graph g = *parsed;
    PassContext ctx;
    ctx.bindings = {{"T", t}};
    ctx.config.disabled.insert("fuse_matmul");  // as in Command(): the JIT groups stay JIT groups
    ASSERT_TRUE(RunPipeline(g, ctx).ok());
    for (const auto& r : compiler.CompileGraph(g)) {
      if (!r.status.ok()) continue;  // (a group the JIT does not lower; reported by opfuse compile)
      digests.insert(r.kernel->key.Digest());
      ++lookups;
    }
  }
  auto st = cache.Stats();
  ASSERT_GT(digests.size(), 0u);
  EXPECT_EQ(st.compiles, static_cast<int64_t>(digests.size())) << "a token count triggered a recompile";
  EXPECT_EQ(st.memory_hits + st.compiles, static_cast<int64_t>(lookups));
}

TEST_F(JitCacheE2E, SecondProcessCompilesNothing) {
  Run first = Compile(1);
  ASSERT_EQ(first.rc, 0) << first.err;
  ASSERT_TRUE(first.stats.is_object()) << first.err;
  const int kernels = first.stats["kernels"];
  ASSERT_GT(kernels, 0);
  EXPECT_GT(first.stats["compiles"].get<int>(), 0);
  Run second = Compile(2);
  ASSERT_EQ(second.rc, 0) << second.err;
  EXPECT_EQ(second.stats["compiles"].get<int>(), 0);
  EXPECT_EQ(second.stats["kernels"].get<int>(), kernels);
  EXPECT_EQ(second.stats["disk_hits"].get<int>() + second.stats["memory_hits"].get<int>(), kernels);
  EXPECT_GT(second.stats["disk_hits"].get<int>(), 0);
}

TEST_F(JitCacheE2E, CorruptedEntryIsDetectedAndRebuilt) {
  ASSERT_EQ(Compile(1).rc, 0);
  auto entries = Entries();
  ASSERT_FALSE(entries.empty());
  {
    std::fstream f(entries[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(entries[0]) - 10));
    char c = 0;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(fs::file_size(entries[0]) - 10));
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  Run r = Compile(2);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.stats["compiles"].get<int>(), 1) << r.err;
  EXPECT_NE(r.err.find("recompiling"), std::string::npos) << r.err;
  Run again = Compile(3);
  EXPECT_EQ(again.stats["compiles"].get<int>(), 0) << "the rebuilt entry must be valid";
}

TEST_F(JitCacheE2E, TwoProcessesRacingOnOneDirectoryBothSucceed) {
  pid_t a = fork();
  if (a == 0) _exit(std::system(Command(1).c_str()) == 0 ? 0 : 1);
  pid_t b = fork();
  if (b == 0) _exit(std::system(Command(2).c_str()) == 0 ? 0 : 1);
  int sa = 0, sb = 0;
  waitpid(a, &sa, 0);
  waitpid(b, &sb, 0);
  Run ra = Collect(1, sa), rb = Collect(2, sb);
  EXPECT_EQ(ra.rc, 0) << ra.err;
  EXPECT_EQ(rb.rc, 0) << rb.err;
  EXPECT_EQ(ra.stats["kernels"], rb.stats["kernels"]);
  EXPECT_EQ(ra.err.find("opfuse cache"), std::string::npos) << ra.err;
  EXPECT_EQ(rb.err.find("opfuse cache"), std::string::npos) << rb.err;
  Run third = Compile(3);
  ASSERT_EQ(third.rc, 0) << third.err;
  EXPECT_EQ(third.stats["compiles"].get<int>(), 0);
}

}  // namespace
}  // namespace opfuse
