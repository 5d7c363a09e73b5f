// Error paths of the CPU backend and `opfuse run`, with the exact message text asserted: the
// executor's input checks (missing / unknown input, wrong dtype, wrong rank, a dim contradicting a
// static dim, another input's binding of the same symbol or an explicit binding), data-dependent
// op errors (embedding id out of range, a slice past the end of a symbolic dim bound too small),
// and the CLI's exit code 2 with a one-line reason (bad --shape, unknown symbol, CUDA not built).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "runtime/cpu/cpu_executor.h"

namespace opfuse {
namespace {

constexpr const char* kSwiglu = R"(graph swiglu
input gate: bf16[T, 8]
input up: bf16[T, 8]
g = silu(gate)
out = mul(g, up)
output out
)";

Graph Parse(const char* text) {
  auto g = ParseGraph(text);
  if (!g.ok()) throw StatusError(g.status());
  return std::move(g).value();
}

HostTensor Filled(DType dt, std::vector<int64_t> shape, double v = 0.5) {
  HostTensor t(dt, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, v);
  return t;
}

void ExpectError(const StatusOr<std::map<std::string, HostTensor>>& r, StatusCode code, const std::string& text) {
  ASSERT_FALSE(r.ok()) << "expected an error containing: " << text;
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(text), std::string::npos)
      << "message: " << r.status().message() << "\nexpected to contain: " << text;
}

TEST(ExecutorErrors, MissingInput) {
  const Graph g = Parse(kSwiglu);
  auto r = RunGraphCpu(g, {{"gate", Filled(DType::kBF16, {3, 8})}});
  ExpectError(r, StatusCode::kInvalidArgument, "missing input 'up' (bf16[T, 8])");
}

TEST(ExecutorErrors, UnknownInput) {
  const Graph g = Parse(kSwiglu);
  auto r = RunGraphCpu(g, {{"gate", Filled(DType::kBF16, {3, 8})},
                           {"up", Filled(DType::kBF16, {3, 8})},
                           {"upp", Filled(DType::kBF16, {3, 8})}});
  ExpectError(r, StatusCode::kInvalidArgument, "unknown input 'upp': the graph has no such input");
}

TEST(ExecutorErrors, WrongDtype) {
  const Graph g = Parse(kSwiglu);
  auto r = RunGraphCpu(g, {{"gate", Filled(DType::kBF16, {3, 8})}, {"up", Filled(DType::kF32, {3, 8})}});
  ExpectError(r, StatusCode::kInvalidArgument, "input 'up': dtype mismatch: expected bf16, got f32");
}

TEST(ExecutorErrors, WrongRank) {
  const Graph g = Parse(kSwiglu);
  auto r = RunGraphCpu(g, {{"gate", Filled(DType::kBF16, {3, 8, 1})}, {"up", Filled(DType::kBF16, {3, 8})}});
  ExpectError(r, StatusCode::kInvalidArgument, "input 'gate': rank mismatch: expected 2 dims [T, 8], got 3");
}

TEST(ExecutorErrors, DimContradictsStaticDim) {
  const Graph g = Parse(kSwiglu);
  auto r = RunGraphCpu(g, {{"gate", Filled(DType::kBF16, {3, 9})}, {"up", Filled(DType::kBF16, {3, 8})}});
  ExpectError(r, StatusCode::kInvalidArgument, "input 'gate': dim 1 is 8 in the graph ([T, 8]), got 9");
}

TEST(ExecutorErrors, DimContradictsEarlierBindingOfItsSymbol) {
  const Graph g = Parse(kSwiglu);
  auto r = RunGraphCpu(g, {{"gate", Filled(DType::kBF16, {3, 8})}, {"up", Filled(DType::kBF16, {4, 8})}});
  ExpectError(r, StatusCode::kInvalidArgument, "input 'up': dim 0 binds T=4, but T=3 from input 'gate' dim 0");
}

TEST(ExecutorErrors, DimContradictsExplicitBinding) {
  const Graph g = Parse(kSwiglu);
  CpuRunOptions opts;
  opts.bindings["T"] = 5;
  auto r = RunGraphCpu(g, {{"gate", Filled(DType::kBF16, {3, 8})}, {"up", Filled(DType::kBF16, {3, 8})}}, opts);
  ExpectError(r, StatusCode::kInvalidArgument, "input 'gate': dim 0 binds T=3, but T=5 from an explicit binding");
}

TEST(ExecutorErrors, EmbeddingIdOutOfRange) {
  const Graph g = Parse(R"(graph emb
input ids: i64[T]
param table: f32[10, 4]
e = embedding(table, ids)
output e
)");
  for (int64_t bad : {10, 12345, -1}) {
    HostTensor ids(DType::kI64, {4});
    for (int64_t i = 0; i < 4; ++i) ids.set(i, static_cast<double>(i));
    ids.set(2, static_cast<double>(bad));
    auto r = RunGraphCpu(g, {{"ids", ids}, {"table", Filled(DType::kF32, {10, 4})}});
    ExpectError(r, StatusCode::kInvalidArgument,
                "line 4: embedding: id " + std::to_string(bad) + " at position 2 is out of range [0, 10)");
  }
}

TEST(ExecutorErrors, SliceBeyondBoundSymbolicDim) {
  const Graph g = Parse(R"(graph sl
input x: f32[T, 4]
y = slice(x) {axis=0, start=0, end=6}
output y
)");
  auto r = RunGraphCpu(g, {{"x", Filled(DType::kF32, {3, 4})}});
  ExpectError(r, StatusCode::kInvalidArgument, "line 3: slice: range [0, 6) out of bounds for axis 0 of the bound shape [3, 4]");
}

TEST(ExecutorErrors, ErrorsAreReturnedNotThrown) {
  // A contradicting input must come back as a Status from every entry point, including
  // BindInputShapes used by the CLI.
  const Graph g = Parse(kSwiglu);
  auto b = BindInputShapes(g, {{"gate", Filled(DType::kBF16, {3, 8})}, {"up", Filled(DType::kBF16, {4, 8})}});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
}

// ------------------------------------------------------------------ opfuse run
namespace fs = std::filesystem;

struct CliResult {
  int code = -1;
  std::string out, err;
};

class CliRunErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("opfuse_run_err_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static std::string Slurp(const fs::path& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  CliResult Run(const std::string& args) {
    const fs::path out = dir_ / "out.txt", err = dir_ / "err.txt";
    const std::string cmd = std::string("'") + OPFUSE_CLI_PATH + "' " + args + " >'" + out.string() + "' 2>'" +
                            err.string() + "' </dev/null";
    const int st = std::system(cmd.c_str());
    CliResult r;
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = Slurp(out);
    r.err = Slurp(err);
    return r;
  }
  static void ExpectOneLine(const std::string& err, const std::string& text) {
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "stderr is not one line:\n" << err;
    EXPECT_NE(err.find(text), std::string::npos) << "stderr: " << err << "\nexpected to contain: " << text;
  }
  std::string Example(const char* name) { return std::string("'") + OPFUSE_SOURCE_DIR + "/examples/graphs/" + name + "'"; }
  fs::path dir_;
};

TEST_F(CliRunErrors, MalformedShapeBinding) {
  CliResult r = Run("run " + Example("swiglu.ofg") + " --shape T");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  ExpectOneLine(r.err, "opfuse run: --shape 'T': expected SYM=VALUE");
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST_F(CliRunErrors, UnknownSymbol) {
  CliResult r = Run("run " + Example("swiglu.ofg") + " --shape B=2");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  ExpectOneLine(r.err, "opfuse run: --shape B=2: the graph has no symbol 'B' (its symbols: T)");
}

TEST_F(CliRunErrors, UnknownBackendIsUsageError) {
  CliResult r = Run("run " + Example("swiglu.ofg") + " --backend tpu");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  ExpectOneLine(r.err, "--backend");
}

// Without the CUDA backend built, or without a GPU, `--backend cuda` is a clean "no CUDA device" (exit 2).
TEST_F(CliRunErrors, NoCudaDevice) {
  CliResult r = Run("run " + Example("swiglu.ofg") + " --backend cuda");
  if (r.code == 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  ExpectOneLine(r.err, "opfuse run: no CUDA device");
}

TEST_F(CliRunErrors, SliceBeyondSymbolBoundTooSmall) {
  // The decoder layer slices q/k heads at static offsets; a graph slicing T itself fails at run
  // time when T is bound below the slice end, with exit 2 and the node's line.
  const fs::path p = dir_ / "slice.ofg";
  std::ofstream(p) << "graph sl\ninput x: f32[T, 4]\ny = slice(x) {axis=0, start=0, end=6}\noutput y\n";
  CliResult r = Run("run '" + p.string() + "' --shape T=3");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  ExpectOneLine(r.err, "opfuse run: line 3: slice: range [0, 6) out of bounds for axis 0 of the bound shape [3, 4]");
}

TEST_F(CliRunErrors, ShapesTooLargeForHostMemory) {
  CliResult r = Run("run " + Example("swiglu.ofg") + " --shape T=100000000000");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  ExpectOneLine(r.err, "opfuse run: inputs would need");
  EXPECT_NE(r.err.find("GiB of host memory at these shapes"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace opfuse
