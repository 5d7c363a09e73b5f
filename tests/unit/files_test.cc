// util/files.h: bounded reads, output-path checks, atomic writes that leave nothing behind.
#include "util/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace opfuse {
namespace {

namespace fs = std::filesystem;

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> n{0};
    dir_ = fs::temp_directory_path() / ("opfuse_files_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_ / "ro", fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }
  fs::path Write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  // Names in dir_ (to see that nothing was left behind).
  std::vector<std::string> Listing() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path dir_;
};

TEST_F(FilesTest, ReadsWholeFileUpToTheCap) {
  const std::string text(100000, 'x');
  auto r = ReadFileCapped(Write("a.txt", text).string(), 100000);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, text);
  auto big = ReadFileCapped((dir_ / "a.txt").string(), 99999, "config.json");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("config.json "), std::string::npos) << big.status().message();
  EXPECT_NE(big.status().message().find("larger than"), std::string::npos) << big.status().message();
  auto empty = ReadFileCapped(Write("e", "").string(), 10);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST_F(FilesTest, DirectoryMissingAndDevicesAreOneLineErrors) {
  auto d = ReadFileCapped(dir_.string(), 1 << 20);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("is a directory"), std::string::npos);
  auto m = ReadFileCapped((dir_ / "nope").string(), 1 << 20);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  // An endless device is bounded by the cap, not read until memory runs out.
  if (fs::exists("/dev/zero")) {
    auto z = ReadFileCapped("/dev/zero", 1 << 20);
    ASSERT_FALSE(z.ok());
    EXPECT_NE(z.status().message().find("larger than the 1 MiB"), std::string::npos) << z.status().message();
  }
}

TEST_F(FilesTest, CheckOutputFile) {
  EXPECT_TRUE(CheckOutputFile("--output", (dir_ / "new.json").string()).ok());
  EXPECT_TRUE(CheckOutputFile("--output", Write("old.json", "{}").string()).ok());
  Status s = CheckOutputFile("--output", dir_.string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--output " + dir_.string() + ": is a directory"), std::string::npos) << s.message();
  s = CheckOutputFile("--dump-logits", (dir_ / "missing" / "x.json").string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("does not exist"), std::string::npos) << s.message();
  EXPECT_FALSE(CheckOutputFile("--output", "").ok());
  if (::geteuid() != 0) {  // root writes anywhere: the permission case means nothing there
    fs::create_directories(dir_ / "ro");
    fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    s = CheckOutputFile("--output", (dir_ / "ro" / "x.json").string());
    EXPECT_NE(s.message().find("not writable"), std::string::npos) << s.message();
  }
  EXPECT_EQ(Listing(), std::vector<std::string>{"old.json"});  // checking created nothing
}

TEST_F(FilesTest, WriteFileAtomicReplacesAndLeavesNothingOnFailure) {
  const fs::path p = dir_ / "out.json";
  ASSERT_TRUE(WriteFileAtomic(p.string(), "first").ok());
  ASSERT_TRUE(WriteFileAtomic(p.string(), "second\n").ok());
  auto r = ReadFileCapped(p.string(), 100);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "second\n");
  // Onto a directory: the rename fails, the temporary file is removed.
  fs::create_directories(dir_ / "adir");
  Status s = WriteFileAtomic((dir_ / "adir").string(), "x");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  // Into a folder that does not exist: nothing is created anywhere.
  EXPECT_FALSE(WriteFileAtomic((dir_ / "no" / "x").string(), "x").ok());
  EXPECT_EQ(Listing(), (std::vector<std::string>{"adir", "out.json"}));
}

}  // namespace
}  // namespace opfuse
