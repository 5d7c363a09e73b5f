// Safetensors reader/writer (model/safetensors.h): a round trip through the atomic writer and the
// mmap reader, then each kind of corrupt file — truncated, lying header length, overlapping
// offsets, a gap, trailing bytes, unknown dtype, shape/size mismatch, offsets past the end, bad
// JSON — must be refused with an error naming the tensor and the problem. Directory loading:
// several files, a name in two files, and the sharded index form (good, wrong shard, unlisted).
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/safetensors.h"

namespace opfuse {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> n{0};
    dir_ = fs::temp_directory_path() / ("opfuse_st_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Bytes of a file with the given header text, `data_size` data bytes, and an optional lie about N.
  static std::string Build(const std::string& header, size_t data_size, std::optional<uint64_t> len = std::nullopt) {
    uint64_t n = len.value_or(header.size());
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
    out += header;
    for (size_t i = 0; i < data_size; ++i) out += static_cast<char>(i * 7);
    return out;
  }
  static StatusOr<StHeader> Parse(const std::string& bytes) {
    return ParseSafetensorsHeader({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "t.safetensors");
  }
  static std::string ErrorOf(const std::string& bytes) {
    auto h = Parse(bytes);
    EXPECT_FALSE(h.ok());
    if (h.ok()) return "";
    EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(h.status().message().find('\n'), std::string::npos);
    return h.status().message();
  }
  fs::path WriteBytes(const std::string& name, const std::string& bytes) {
    fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  // Two F32 tensors a[2,3] (24 bytes) and b[4] (16 bytes), valid.
  static json TwoTensors() {
    return {{"a", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
            {"b", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {24, 40}}}}};
  }
  Status WriteSimple(const fs::path& p, const std::vector<std::pair<std::string, std::vector<float>>>& ts) {
    std::vector<StTensorSpec> specs;
    for (const auto& [n, v] : ts) specs.push_back({n, StDType::kF32, {static_cast<int64_t>(v.size())}});
    return WriteSafetensors(p.string(), specs, {}, [&](size_t i, std::span<uint8_t> out) {
      std::memcpy(out.data(), ts[i].second.data(), out.size());
      return Status::Ok();
    });
  }
  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTrip) {
  const fs::path p = dir_ / "m.safetensors";
  std::vector<float> a = {1, -2, 3.5f, 4, 5, 6};
  std::vector<uint16_t> b = {0x3f80, 0xbf80, 0x4000};  // bf16 1, -1, 2
  std::vector<StTensorSpec> specs = {{"a", StDType::kF32, {2, 3}}, {"b.weight", StDType::kBF16, {3}}, {"empty", StDType::kI64, {0, 5}}};
  ASSERT_TRUE(WriteSafetensors(p.string(), specs, {{"format", "pt"}}, [&](size_t i, std::span<uint8_t> out) {
                if (i == 0) std::memcpy(out.data(), a.data(), out.size());
                if (i == 1) std::memcpy(out.data(), b.data(), out.size());
                return Status::Ok();
              }).ok());
  auto f = SafetensorsFile::Open(p.string());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)->header().data_start % 8, 0u);  // padded header
  EXPECT_EQ((*f)->header().metadata.at("format"), "pt");
  ASSERT_EQ((*f)->tensors().size(), 3u);
  const StTensorInfo* ta = (*f)->Find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, StDType::kF32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  auto da = (*f)->Data(*ta);
  ASSERT_EQ(da.size(), 24u);
  EXPECT_EQ(std::memcmp(da.data(), a.data(), 24), 0);
  const StTensorInfo* tb = (*f)->Find("b.weight");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(ToDType(tb->dtype), DType::kBF16);
  EXPECT_EQ(std::memcmp((*f)->Data(*tb).data(), b.data(), 6), 0);
  EXPECT_EQ((*f)->Find("empty")->nbytes(), 0u);
  EXPECT_EQ((*f)->Find("nope"), nullptr);
  // No temp file left behind.
  int files = 0;
  for (auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST_F(SafetensorsTest, WriterFailureLeavesNothing) {
  const fs::path p = dir_ / "m.safetensors";
  Status s = WriteSafetensors(p.string(), {{"a", StDType::kF32, {4}}}, {},
                              [](size_t, std::span<uint8_t>) { return Internal("fill failed"); });
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(fs::is_empty(dir_));
  EXPECT_FALSE(WriteSafetensors(p.string(), {{"a", StDType::kF32, {1}}, {"a", StDType::kF32, {1}}}, {},
                                [](size_t, std::span<uint8_t>) { return Status::Ok(); })
                   .ok());
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(SafetensorsTest, ValidHandBuiltAndPadding) {
  EXPECT_TRUE(Parse(Build(TwoTensors().dump(), 40)).ok());
  EXPECT_TRUE(Parse(Build(TwoTensors().dump() + "     ", 40)).ok());  // trailing-space padding
  json m = TwoTensors();
  m["__metadata__"] = {{"k", "v"}};
  auto h = Parse(Build(m.dump(), 40));
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->metadata.at("k"), "v");
  EXPECT_TRUE(Parse(Build("{}", 0)).ok());  // no tensors at all
}

TEST_F(SafetensorsTest, Truncated) {
  EXPECT_NE(ErrorOf("abc").find("truncated"), std::string::npos);
  std::string full = Build(TwoTensors().dump(), 40);
  EXPECT_NE(ErrorOf(full.substr(0, full.size() - 1)).find("tensor 'b'"), std::string::npos);
  EXPECT_NE(ErrorOf(full.substr(0, full.size() - 1)).find("run past the data section"), std::string::npos);
  EXPECT_NE(ErrorOf(full.substr(0, 20)).find("runs past the end of the file"), std::string::npos);
}

TEST_F(SafetensorsTest, LyingLength) {
  const std::string h = TwoTensors().dump();
  EXPECT_NE(ErrorOf(Build(h, 40, uint64_t{1} << 40)).find("exceeds the 100 MB limit"), std::string::npos);
  EXPECT_NE(ErrorOf(Build(h, 40, h.size() + 41)).find("runs past the end of the file"), std::string::npos);
  EXPECT_NE(ErrorOf(Build(h, 40, h.size() - 3)).find("not valid JSON"), std::string::npos);
  EXPECT_NE(ErrorOf(Build(h, 40, 0)).find("too small"), std::string::npos);
}

TEST_F(SafetensorsTest, OverlapGapAndTrailing) {
  json j = TwoTensors();
  j["b"]["data_offsets"] = {20, 36};
  std::string e = ErrorOf(Build(j.dump(), 40));
  EXPECT_NE(e.find("tensor 'b'"), std::string::npos) << e;
  EXPECT_NE(e.find("overlap tensor 'a'"), std::string::npos) << e;
  j = TwoTensors();
  j["b"]["data_offsets"] = {28, 44};
  e = ErrorOf(Build(j.dump(), 44));
  EXPECT_NE(e.find("gap of 4 bytes before tensor 'b'"), std::string::npos) << e;
  e = ErrorOf(Build(TwoTensors().dump(), 48));
  EXPECT_NE(e.find("8 bytes unindexed"), std::string::npos) << e;
  // Two tensors on the same bytes.
  j = TwoTensors();
  j["b"] = {{"dtype", "F32"}, {"shape", {6}}, {"data_offsets", {0, 24}}};
  EXPECT_NE(ErrorOf(Build(j.dump(), 24)).find("overlap"), std::string::npos);
}

// A name given twice is refused (a JSON parser would keep the last entry and the first tensor's bytes
// would be silently ignored), also inside __metadata__.
TEST_F(SafetensorsTest, DuplicateNamesRefused) {
  const std::string a = R"("a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]})";
  const std::string a2 = R"("a": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]})";
  std::string e = ErrorOf(Build("{" + a + ", " + a2 + "}", 24));
  EXPECT_NE(e.find("header names 'a' twice"), std::string::npos) << e;
  e = ErrorOf(Build(R"({"__metadata__": {"format": "pt", "format": "np"}, )" + a + "}", 24));
  EXPECT_NE(e.find("header names 'format' twice"), std::string::npos) << e;
  // The same name in two different objects is fine.
  EXPECT_TRUE(Parse(Build(R"({"__metadata__": {"a": "x"}, )" + a + "}", 24)).ok());
}

TEST_F(SafetensorsTest, BadDtypeShapeAndFields) {
  json j = TwoTensors();
  j["a"]["dtype"] = "F33";
  EXPECT_NE(ErrorOf(Build(j.dump(), 40)).find("tensor 'a': unknown dtype 'F33'"), std::string::npos);
  j = TwoTensors();
  j["a"]["shape"] = {2, 4};
  EXPECT_NE(ErrorOf(Build(j.dump(), 40)).find("tensor 'a': shape [2, 4] of F32 needs 32 bytes but data_offsets [0, 24] span 24"),
            std::string::npos);
  j = TwoTensors();
  j["a"]["shape"] = {2, -3};
  EXPECT_NE(ErrorOf(Build(j.dump(), 40)).find("not a non-negative integer"), std::string::npos);
  j = TwoTensors();
  j["a"]["shape"] = {uint64_t{1} << 40, uint64_t{1} << 40};
  EXPECT_NE(ErrorOf(Build(j.dump(), 40)).find("overflows"), std::string::npos);
  j = TwoTensors();
  j["a"]["data_offsets"] = {24, 0};
  EXPECT_NE(ErrorOf(Build(j.dump(), 40)).find("end before begin"), std::string::npos);
  j = TwoTensors();
  j["a"].erase("dtype");
  EXPECT_NE(ErrorOf(Build(j.dump(), 40)).find("missing or non-string 'dtype'"), std::string::npos);
  j = TwoTensors();
  j["a"]["extra"] = 1;
  EXPECT_NE(ErrorOf(Build(j.dump(), 40)).find("unknown field 'extra'"), std::string::npos);
  j = TwoTensors();
  j["__metadata__"] = {{"k", 1}};
  EXPECT_NE(ErrorOf(Build(j.dump(), 40)).find("__metadata__"), std::string::npos);
  EXPECT_NE(ErrorOf(Build("[1,2]", 0)).find("does not start with"), std::string::npos);
  EXPECT_NE(ErrorOf(Build("{\"a\": 3}", 0)).find("tensor 'a': entry is not an object"), std::string::npos);
}

// Names, keys and dtype strings from the file are quoted so a rejection stays one line (ErrorOf
// checks that) even when they hold a newline, a quote or bytes outside ASCII.
TEST_F(SafetensorsTest, OddNamesStayOnOneLine) {
  json j = TwoTensors();
  j["a\nb"] = j["a"];
  j.erase("a");
  j["a\nb"]["dtype"] = "F\n33";
  const std::string m = ErrorOf(Build(j.dump(), 40));
  EXPECT_NE(m.find(R"(tensor "a\nb": unknown dtype "F\n33")"), std::string::npos) << m;
  j = TwoTensors();
  j["a"]["it's\tx"] = 1;
  EXPECT_NE(ErrorOf(Build(j.dump(), 40)).find(R"(unknown field "it's\tx")"), std::string::npos);
  j = TwoTensors();
  j["__metadata__"] = {{"k\r", 1}};
  EXPECT_NE(ErrorOf(Build(j.dump(), 40)).find(R"(__metadata__ value for "k\r" is not a string)"), std::string::npos);
  j = TwoTensors();
  j["caf\u00e9\n"] = j["b"];
  j.erase("b");
  j["caf\u00e9\n"]["dtype"] = "X";
  EXPECT_NE(ErrorOf(Build(j.dump(), 40)).find(R"(tensor "caf\u00e9\n")"), std::string::npos);
}

TEST_F(SafetensorsTest, OpenErrors) {
  auto missing = SafetensorsFile::Open((dir_ / "none.safetensors").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  const fs::path p = WriteBytes("bad.safetensors", Build(TwoTensors().dump(), 39));
  auto bad = SafetensorsFile::Open(p.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(p.string()), std::string::npos) << bad.status().message();
  auto empty = SafetensorsFile::Open(WriteBytes("empty.safetensors", "").string());
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("truncated"), std::string::npos);
}

TEST_F(SafetensorsTest, DirectoryOfFiles) {
  ASSERT_TRUE(WriteSimple(dir_ / "a.safetensors", {{"x", {1, 2}}, {"y", {3}}}).ok());
  ASSERT_TRUE(WriteSimple(dir_ / "b.safetensors", {{"z", {4, 5, 6}}}).ok());
  auto d = SafetensorsDir::Open(dir_.string());
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->tensors().size(), 3u);
  EXPECT_EQ(d->files().size(), 2u);
  ASSERT_NE(d->Find("z"), nullptr);
  float z0;
  std::memcpy(&z0, d->Find("z")->file->Data(*d->Find("z")->info).data(), 4);
  EXPECT_EQ(z0, 4.0f);
  ASSERT_TRUE(WriteSimple(dir_ / "c.safetensors", {{"x", {9}}}).ok());
  auto dup = SafetensorsDir::Open(dir_.string());
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("tensor 'x' is in both"), std::string::npos) << dup.status().message();
  auto none = SafetensorsDir::Open((dir_ / "nothing").string());
  EXPECT_FALSE(none.ok());
}

TEST_F(SafetensorsTest, ShardedIndex) {
  ASSERT_TRUE(WriteSimple(dir_ / "model-00001-of-00002.safetensors", {{"x", {1, 2}}, {"y", {3}}}).ok());
  ASSERT_TRUE(WriteSimple(dir_ / "model-00002-of-00002.safetensors", {{"z", {4}}}).ok());
  json idx = {{"metadata", {{"total_size", 16}}},
              {"weight_map", {{"x", "model-00001-of-00002.safetensors"}, {"y", "model-00001-of-00002.safetensors"},
                              {"z", "model-00002-of-00002.safetensors"}}}};
  WriteBytes("model.safetensors.index.json", idx.dump());
  auto d = SafetensorsDir::Open(dir_.string());
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->tensors().size(), 3u);
  // A tensor listed in the wrong shard.
  idx["weight_map"]["z"] = "model-00001-of-00002.safetensors";
  WriteBytes("model.safetensors.index.json", idx.dump());
  auto wrong = SafetensorsDir::Open(dir_.string());
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("lists tensor 'z'"), std::string::npos) << wrong.status().message();
  // A shard tensor the index does not list.
  idx["weight_map"].erase("z");
  idx["weight_map"].erase("y");
  WriteBytes("model.safetensors.index.json", idx.dump());
  auto unlisted = SafetensorsDir::Open(dir_.string());
  ASSERT_FALSE(unlisted.ok());
  EXPECT_NE(unlisted.status().message().find("tensor 'y' is in"), std::string::npos) << unlisted.status().message();
  // Path escapes and bad JSON.
  WriteBytes("model.safetensors.index.json", R"({"weight_map": {"x": "../x.safetensors"}})");
  EXPECT_FALSE(SafetensorsDir::Open(dir_.string()).ok());
  WriteBytes("model.safetensors.index.json", "{");
  EXPECT_FALSE(SafetensorsDir::Open(dir_.string()).ok());
}

TEST(SafetensorsDType, NamesAndSizes) {
  for (auto t : {StDType::kF64, StDType::kF32, StDType::kF16, StDType::kBF16, StDType::kI64, StDType::kI32, StDType::kI16,
                 StDType::kI8, StDType::kU64, StDType::kU32, StDType::kU16, StDType::kU8, StDType::kBool, StDType::kF8E4M3,
                 StDType::kF8E5M2}) {
    EXPECT_EQ(StDTypeFromName(StDTypeName(t)), t);
    EXPECT_GT(StDTypeSize(t), 0);
  }
  EXPECT_EQ(StDTypeSize(StDType::kBF16), 2);
  EXPECT_FALSE(StDTypeFromName("f32").has_value());  // names are case-sensitive upper case
  for (auto d : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kBool}) {
    EXPECT_EQ(ToDType(FromDType(d)), d);
    EXPECT_EQ(StDTypeSize(FromDType(d)), DTypeSize(d));
  }
}

}  // namespace
}  // namespace opfuse
