// `opfuse init-weights` as a user runs it: exit 0 and a loadable directory for `tiny`; exit 2 with
// one line on stderr for an unknown config, a bad --dtype, a non-empty --out without --force, a
// missing parent; --force replaces; nothing half-written (no OUT.tmp.* or OUT.old.* left behind).
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "model/llama/weights.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out, err;
};

class InitWeightsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> n{0};
    dir_ = fs::temp_directory_path() / ("opfuse_initw_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static std::string Slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  Result Run(const std::string& args) {
    const fs::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string cmd = std::string("cd '") + dir_.string() + "' && '" + OPFUSE_CLI_PATH + "' " + args + " >'" +
                            out.string() + "' 2>'" + err.string() + "' </dev/null";
    int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    r.out = Slurp(out);
    r.err = Slurp(err);
    fs::remove(out);
    fs::remove(err);
    return r;
  }
  static void ExpectOneLine(const std::string& err) {
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
  // Names in dir_ other than the ones given.
  std::vector<std::string> Leftovers(std::initializer_list<std::string> keep) {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (std::find(keep.begin(), keep.end(), n) == keep.end()) out.push_back(n);
    }
    return out;
  }
  fs::path dir_;
};

TEST_F(InitWeightsCli, TinyWritesALoadableDirectory) {
  Result r = Run("init-weights --config tiny --out m --seed 5");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("21 tensors"), std::string::npos) << r.out;
  auto cfg = opfuse::llama::LoadConfigFile((dir_ / "m" / "config.json").string());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto d = opfuse::SafetensorsDir::Open((dir_ / "m").string());
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE(opfuse::llama::CheckWeights(*cfg, *d).ok());
  EXPECT_TRUE(Leftovers({"m"}).empty());
  const std::string first = Slurp(dir_ / "m" / "model.safetensors");

  // Refuses a non-empty directory, leaves it as it was.
  r = Run("init-weights --config tiny --out m --seed 6");
  EXPECT_EQ(r.code, 2);
  ExpectOneLine(r.err);
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;
  EXPECT_EQ(Slurp(dir_ / "m" / "model.safetensors"), first);

  // --force replaces it; same seed again gives the same bytes.
  r = Run("init-weights --config tiny --out m --seed 6 --force --dtype bf16");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(Slurp(dir_ / "m" / "model.safetensors"), first);
  r = Run("init-weights --config tiny --out m --seed 5 --force --dtype f32");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Slurp(dir_ / "m" / "model.safetensors"), first);
  EXPECT_TRUE(Leftovers({"m"}).empty());

  // An existing empty directory is fine.
  fs::create_directory(dir_ / "empty");
  EXPECT_EQ(Run("init-weights --config tiny --out empty").code, 0);
}

TEST_F(InitWeightsCli, BadInputExitsTwo) {
  for (const char* args : {"init-weights --config gpt-5 --out x", "init-weights --config tiny --out x --dtype f8",
                           "init-weights --config tiny --out no/such/parent/x", "init-weights --config tiny",
                           "init-weights --out x", "init-weights --config tiny --out x --seed -1"}) {
    SCOPED_TRACE(args);
    Result r = Run(args);
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    ExpectOneLine(r.err);
  }
  std::ofstream(dir_ / "file") << "x";
  Result r = Run("init-weights --config tiny --out file");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("not a directory"), std::string::npos) << r.err;
  EXPECT_TRUE(Leftovers({"file"}).empty());
}

TEST_F(InitWeightsCli, Help) {
  Result r = Run("init-weights --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--config"), std::string::npos);
  EXPECT_NE(r.out.find("tinyllama-1.1b"), std::string::npos);
}

}  // namespace
