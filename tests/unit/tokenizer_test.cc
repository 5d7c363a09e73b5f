// Tokenizer (model/tokenizer.h): ids in/out always work; a directory without tokenizer.model gives
// an ids-only tokenizer that says why and refuses text; with the committed fixture
// tests/data/tiny_tokenizer.model (a 200-piece BPE SentencePiece model, see docs/model_format.md)
// text round-trips and known ids come out. The SentencePiece tests skip, saying so, only when the
// module is not built (libsentencepiece-dev absent); a corrupt tokenizer.model is an error.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "model/tokenizer.h"

namespace opfuse {
namespace {

namespace fs = std::filesystem;
const std::string kFixture = std::string(OPFUSE_SOURCE_DIR) + "/tests/data/tiny_tokenizer.model";

TEST(Tokenizer, ParseAndFormatIds) {
  auto ids = Tokenizer::ParseIds("1, 2,3 ,255", 256);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_EQ(*ids, (std::vector<int64_t>{1, 2, 3, 255}));
  EXPECT_EQ(Tokenizer::FormatIds(*ids), "1,2,3,255");
  EXPECT_NE(Tokenizer::ParseIds("1,256", 256).status().message().find("entry 2 = 256 is outside the vocabulary"), std::string::npos);
  EXPECT_NE(Tokenizer::ParseIds("1,,2", 256).status().message().find("entry 2 is empty"), std::string::npos);
  EXPECT_NE(Tokenizer::ParseIds("1,x", 256).status().message().find("'x' is not an integer"), std::string::npos);
  EXPECT_NE(Tokenizer::ParseIds("-1", 256).status().message().find("outside"), std::string::npos);
  EXPECT_FALSE(Tokenizer::ParseIds("", 256).ok());
  EXPECT_FALSE(Tokenizer::ParseIds("99999999999999999999", 256).ok());
}

TEST(Tokenizer, DirectoryWithoutTokenizerIsIdsOnly) {
  const fs::path d = fs::temp_directory_path() / ("opfuse_tok_" + std::to_string(::getpid()));
  fs::create_directories(d);
  auto t = Tokenizer::ForModelDir(d.string(), 256);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_FALSE((*t)->has_text());
  EXPECT_NE((*t)->reason().find("no tokenizer.model"), std::string::npos) << (*t)->reason();
  auto e = (*t)->Encode("hello");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("token ids only"), std::string::npos) << e.status().message();
  EXPECT_FALSE((*t)->Decode({1, 2}).ok());
  EXPECT_EQ((*t)->vocab_size(), 256);

  // A corrupt tokenizer.model is an error, not a silent fallback (when SentencePiece is there).
  std::ofstream(d / "tokenizer.model") << "not a protobuf";
  auto bad = Tokenizer::ForModelDir(d.string(), 256);
  if (bad.ok()) {
    EXPECT_FALSE((*bad)->has_text());
    EXPECT_NE((*bad)->reason().find("SentencePiece support unavailable"), std::string::npos) << (*bad)->reason();
  } else {
    EXPECT_NE(bad.status().message().find("not a SentencePiece model"), std::string::npos) << bad.status().message();
  }
  fs::remove_all(d);
}

TEST(Tokenizer, SentencePieceFixture) {
  auto t = Tokenizer::LoadSentencePiece(kFixture);
  if (!t.ok() && t.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << t.status().message();
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_TRUE((*t)->has_text());
  EXPECT_EQ((*t)->vocab_size(), 200);
  EXPECT_EQ((*t)->bos_id(), 1);
  EXPECT_EQ((*t)->eos_id(), 2);
  auto ids = (*t)->Encode("the fused kernel runs");
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  // spm_encode --model=tests/data/tiny_tokenizer.model --output_format=id
  EXPECT_EQ(*ids, (std::vector<int64_t>{32, 13, 38, 118, 68, 88, 52, 110}));
  auto text = (*t)->Decode(*ids);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text, "the fused kernel runs");
  // A long input exercises the buffer regrowth on both sides.
  std::string longtext;
  for (int i = 0; i < 200; ++i) longtext += "graph fusion pass ";
  longtext.pop_back();
  auto lids = (*t)->Encode(longtext);
  ASSERT_TRUE(lids.ok());
  EXPECT_EQ(*(*t)->Decode(*lids), longtext);
  EXPECT_FALSE((*t)->Decode({5, 200}).ok());  // outside the vocabulary
}

TEST(Tokenizer, ForModelDirFindsTokenizer) {
  const fs::path d = fs::temp_directory_path() / ("opfuse_tok2_" + std::to_string(::getpid()));
  fs::create_directories(d);
  fs::copy_file(kFixture, d / "tokenizer.model", fs::copy_options::overwrite_existing);
  auto t = Tokenizer::ForModelDir(d.string(), 256);
  ASSERT_TRUE(t.ok()) << t.status().message();
  if (!(*t)->has_text()) {
    fs::remove_all(d);
    GTEST_SKIP() << (*t)->reason();
  }
  EXPECT_EQ((*t)->vocab_size(), 200);
  // A tokenizer larger than the model's vocabulary is refused.
  auto small = Tokenizer::ForModelDir(d.string(), 100);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("200 pieces but the model's vocab_size is 100"), std::string::npos);
  fs::remove_all(d);
}

}  // namespace
}  // namespace opfuse
