// util/quote.h: how text from a user's file appears in an error message.
#include "util/quote.h"

#include <gtest/gtest.h>

#include <string>

namespace opfuse {
namespace {

TEST(Quote, PlainTextIsSingleQuoted) {
  EXPECT_EQ(Quote("model.layers.0.mlp.up_proj.weight"), "'model.layers.0.mlp.up_proj.weight'");
  EXPECT_EQ(Quote(""), "''");
  EXPECT_EQ(Quote("a b/c-d"), "'a b/c-d'");
}

TEST(Quote, AnythingElseIsAOneLineJsonString) {
  EXPECT_EQ(Quote("a\nb"), R"("a\nb")");
  EXPECT_EQ(Quote("it's"), R"("it's")");
  EXPECT_EQ(Quote("back\\slash"), R"("back\\slash")");
  EXPECT_EQ(Quote(std::string("nul\0x", 5)), R"("nul\u0000x")");
  EXPECT_EQ(Quote("caf\xc3\xa9"), R"("caf\u00e9")");  // non-ASCII escaped
  EXPECT_EQ(Quote("bad\xff"), R"("bad\ufffd")");       // invalid UTF-8 replaced, never thrown
  for (const char* s : {"a\nb", "\r", "\x1b[31m", "x\x7f"})
    EXPECT_EQ(Quote(s).find_first_of("\n\r\x1b\x7f"), std::string::npos) << s;
}

TEST(PathKey, IdentifiersBareOthersQuoted) {
  EXPECT_EQ(PathKey("hidden_size"), "hidden_size");
  EXPECT_EQ(PathKey("a.b"), R"("a.b")");
  EXPECT_EQ(PathKey(""), R"("")");
  EXPECT_EQ(PathKey("bad\nkey"), R"("bad\nkey")");
}

}  // namespace
}  // namespace opfuse

namespace opfuse {
namespace {

TEST(OneLine, EscapesControlCharactersAndKeepsTheRest) {
  EXPECT_EQ(OneLine("plain text, 'quoted' and \"double\""), "plain text, 'quoted' and \"double\"");
  EXPECT_EQ(OneLine("id 4 is given to both \"\n\" and \"\""), "id 4 is given to both \"\\n\" and \"\"");
  EXPECT_EQ(OneLine(std::string("a\tb\rc\x01" "d\x7f", 8)), "a\\tb\\rc\\u0001d\\u007f");
  EXPECT_EQ(OneLine("\xe2\x96\x81 UTF-8 stays"), "\xe2\x96\x81 UTF-8 stays");
  EXPECT_EQ(OneLine("x\ny").find('\n'), std::string::npos);
}

}  // namespace
}  // namespace opfuse
