// The profile database loader, saver and merge (src/scheduler/profile_db.h): the recorded fixtures
// under tests/data/profiles/ load; every malformed form is an InvalidArgument naming the JSON path;
// save is atomic and round-trips; merge refuses another device's results.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "scheduler/profile_db.h"

namespace opfuse::scheduler {
namespace {

std::string Fixture(const std::string& name) { return std::string(OPFUSE_SOURCE_DIR) + "/tests/data/profiles/" + name; }

std::string ParseError(const std::string& text) {
  auto db = ProfileDb::Parse(text, "p.json");
  EXPECT_FALSE(db.ok()) << text;
  if (db.ok()) return "";
  EXPECT_EQ(db.status().code(), StatusCode::kInvalidArgument) << db.status().ToString();
  return db.status().message();
}

TEST(ProfileDb, LoadsTheFixture) {
  auto db = ProfileDb::Load(Fixture("h200_tinyllama_bf16.json"));
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  EXPECT_EQ(db->schema, 1);
  EXPECT_EQ(db->device.name, "NVIDIA H200");
  EXPECT_EQ(db->device.sm, "9.0");
  EXPECT_DOUBLE_EQ(db->device.copy_gbps, 4000);
  EXPECT_DOUBLE_EQ(db->device.launch_us, 2.5);
  ASSERT_EQ(db->entries.size(), 6u);
  const auto& e = db->entries[1];
  EXPECT_EQ(e.pattern, "add_rms_norm");
  EXPECT_EQ(e.dtype, "bf16");
  EXPECT_EQ(e.rows, 32);
  EXPECT_EQ(e.cols, 2048);
  EXPECT_DOUBLE_EQ(*e.unfused_us, 6.1);
  EXPECT_DOUBLE_EQ(*e.library_us, 2.0);
  EXPECT_DOUBLE_EQ(*e.jit_us, 2.2);
  EXPECT_EQ(e.samples, 100);
  EXPECT_FALSE(db->entries[5].library_us.has_value());  // generic group: no library variant
  auto series = db->Series("add_rms_norm", "bf16", 2048);
  ASSERT_EQ(series.size(), 3u);
  EXPECT_EQ(series[0]->rows, 1);
  EXPECT_EQ(series[2]->rows, 128);
  EXPECT_TRUE(db->Series("add_rms_norm", "f16", 2048).empty());
}

TEST(ProfileDb, MalformedFixturesNameTheProblem) {
  auto schema = ProfileDb::Load(Fixture("bad_schema.json"));
  ASSERT_FALSE(schema.ok());
  EXPECT_NE(schema.status().message().find("schema: version 2 is not supported"), std::string::npos)
      << schema.status().message();
  auto variant = ProfileDb::Load(Fixture("bad_variant.json"));
  ASSERT_FALSE(variant.ok());
  EXPECT_NE(variant.status().message().find("entries[0].variants_us.jit: must be a number"), std::string::npos)
      << variant.status().message();
  auto truncated = ProfileDb::Load(Fixture("truncated.json"));
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("malformed JSON at byte"), std::string::npos);
  auto missing = ProfileDb::Load(Fixture("no_such_profile.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(ProfileDb, ValidationPaths) {
  const std::string dev = R"("device": {"name": "NVIDIA H200", "sm": "9.0"})";
  auto entry = [&](const std::string& e) { return R"({"schema": 1, )" + dev + R"(, "entries": [)" + e + "]}"; };
  const std::string ok_shape = R"("shape": {"rows": 4, "cols": 8})";
  EXPECT_NE(ParseError("[]").find("(top): must be a JSON object"), std::string::npos);
  EXPECT_NE(ParseError(R"({"device": {}, "entries": []})").find("schema: missing"), std::string::npos);
  EXPECT_NE(ParseError(R"({"schema": "1", "entries": []})").find("schema: must be an integer"), std::string::npos);
  EXPECT_NE(ParseError(R"({"schema": 1, "entries": []})").find("device: missing"), std::string::npos);
  EXPECT_NE(ParseError(R"({"schema": 1, "device": {"sm": "9.0"}, "entries": []})").find("device.name: missing"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"schema": 1, "device": {"name": "x", "sm": "9.0", "copy_gbps": -1}, "entries": []})")
                .find("device.copy_gbps: must be a finite number >= 0"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"schema": 1, )" + dev + "}").find("entries: missing"), std::string::npos);
  EXPECT_NE(ParseError(R"({"schema": 1, )" + dev + R"(, "entries": {}})").find("entries: must be an array"),
            std::string::npos);
  EXPECT_NE(ParseError(entry(R"({"pattern": "swiglu", "dtype": "bf17", )" + ok_shape + R"(, "variants_us": {"jit": 1}})"))
                .find("entries[0].dtype: unknown dtype \"bf17\""),
            std::string::npos);
  EXPECT_NE(ParseError(entry(R"({"pattern": "swiglu", "dtype": "bf16", "shape": {"rows": 0, "cols": 8}, "variants_us": {"jit": 1}})"))
                .find("entries[0].shape.rows: must be >= 1"),
            std::string::npos);
  EXPECT_NE(ParseError(entry(R"({"pattern": "swiglu", "dtype": "bf16", "shape": {"rows": 4}, "variants_us": {"jit": 1}})"))
                .find("entries[0].shape.cols: missing"),
            std::string::npos);
  EXPECT_NE(ParseError(entry(R"({"pattern": "swiglu", "dtype": "bf16", )" + ok_shape + R"(, "variants_us": {"jitt": 1}})"))
                .find("entries[0].variants_us.jitt: unknown key"),
            std::string::npos);
  // A key with a newline (JSON "\n") is quoted in the path: the message stays one line (found by fuzz_profile_db).
  const std::string newline_key = ParseError(entry(R"({"pattern": "swiglu", "dtype": "bf16", )" + ok_shape +
                                                   R"(, "variants_us": {"\njit": 1}})"));
  EXPECT_NE(newline_key.find(R"(entries[0].variants_us."\njit": unknown key)"), std::string::npos) << newline_key;
  EXPECT_EQ(newline_key.find('\n'), std::string::npos) << newline_key;
  EXPECT_NE(ParseError(entry(R"({"pattern": "swiglu", "dtype": "bf16", )" + ok_shape + R"(, "variants_us": {}})"))
                .find("entries[0].variants_us: no variant measured"),
            std::string::npos);
  EXPECT_NE(ParseError(entry(R"({"pattern": "", "dtype": "bf16", )" + ok_shape + R"(, "variants_us": {"jit": 1}})"))
                .find("entries[0].pattern: must not be empty"),
            std::string::npos);
  EXPECT_NE(ParseError(entry(R"({"pattern": "a", "dtype": "bf16", )" + ok_shape + R"(, "variants_us": {"jit": 1}}, 7)"))
                .find("entries[1]: must be an object"),
            std::string::npos);
  // A valid minimal profile parses.
  auto good = ProfileDb::Parse(entry(R"({"pattern": "a", "dtype": "bf16", )" + ok_shape + R"(, "variants_us": {"jit": 1}})"));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->entries[0].samples, 0);
}

TEST(ProfileDb, SaveIsAtomicAndRoundTrips) {
  auto db = ProfileDb::Load(Fixture("h200_tinyllama_bf16.json"));
  ASSERT_TRUE(db.ok());
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "opfuse_profile_save";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "profile_result.json").string();
  ASSERT_TRUE(db->Save(path).ok());
  ASSERT_TRUE(db->Save(path).ok());  // overwrite in place
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().filename(), "profile_result.json");
  }
  EXPECT_EQ(files, 1);  // no temp file left behind
  auto back = ProfileDb::Load(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToJson(), db->ToJson());
  EXPECT_EQ(back->entries.size(), db->entries.size());
  EXPECT_FALSE(db->Save((dir / "no_such_dir" / "p.json").string()).ok());
}

TEST(ProfileDb, MergeReplacesSameKeyAndRefusesOtherDevices) {
  auto a = ProfileDb::Load(Fixture("h200_tinyllama_bf16.json"));
  ASSERT_TRUE(a.ok());
  ProfileDb b;
  b.device = a->device;
  ProfileEntry changed = a->entries[0];
  changed.unfused_us = 9.0;
  ProfileEntry added = a->entries[0];
  added.rows = 4096;
  b.entries = {changed, added};
  ASSERT_TRUE(a->Merge(b).ok());
  EXPECT_EQ(a->entries.size(), 7u);
  EXPECT_DOUBLE_EQ(*a->entries[0].unfused_us, 9.0);

  auto h100 = ProfileDb::Load(Fixture("h100_tinyllama_bf16.json"));
  ASSERT_TRUE(h100.ok());
  const std::string before = a->ToJson();
  Status s = a->Merge(*h100);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("different devices"), std::string::npos) << s.message();
  EXPECT_EQ(a->ToJson(), before);  // nothing changed
}

TEST(ProfileDb, CheckDevice) {
  DeviceInfo h200{"NVIDIA H200", "9.0", "", 0, 0};
  EXPECT_TRUE(CheckDevice(h200, {"NVIDIA H200", "9.0", "other driver", 1, 1}).ok());
  Status name = CheckDevice(h200, {"NVIDIA H100", "9.0", "", 0, 0});
  EXPECT_FALSE(name.ok());
  EXPECT_NE(name.message().find("'NVIDIA H100'"), std::string::npos);
  EXPECT_FALSE(CheckDevice(h200, {"NVIDIA H200", "10.0", "", 0, 0}).ok());
}

}  // namespace
}  // namespace opfuse::scheduler
