// `opfuse tokenize` as a user runs it on the tokenizer.json fixtures (tests/data/tokenizers/, ids
// recorded from Hugging Face's `tokenizers` by tools/make_tokenizer_fixtures.py): the ids of a text
// with the tokenizer's own BOS (Llama-3 style: yes; Qwen2: no; --no-bos: none), --json with token
// strings, text from stdin, --decode back to text; and bad input (no such directory, no tokenizer,
// an unsupported tokenizer.json, bad ids, text that is not UTF-8, TEXT and --decode both or
// neither) exits 2 with one line on stderr. generate --prompt takes the tokenizer's BOS decision.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using opfuse::testing::CliResult;

const std::string kDir = std::string(OPFUSE_SOURCE_DIR) + "/tests/data/tokenizers/";

CliResult Tokenize(const std::string& args) { return opfuse::testing::RunOpfuseCli("tokenize " + args, "tokenize"); }

// HF's ids for `text` in a fixture's expected.json.
std::vector<int64_t> HfIds(const std::string& fixture, const std::string& text) {
  const json e = json::parse(opfuse::testing::ReadTextFile(kDir + fixture + "/expected.json"));
  for (const json& c : e["cases"])
    if (c[0] == text) return c[1].get<std::vector<int64_t>>();
  ADD_FAILURE() << text << " is not a case of " << fixture;
  return {};
}

std::string Csv(const std::vector<int64_t>& ids) {
  std::string s;
  for (size_t k = 0; k < ids.size(); ++k) s += (k ? "," : "") + std::to_string(ids[k]);
  return s;
}

fs::path TempDir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("opfuse_tokcli_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(TokenizeCli, IdsWithTheTokenizersBos) {
  const std::vector<int64_t> hello = HfIds("llama3_bpe", "Hello world");
  auto r = Tokenize("--model " + kDir + "llama3_bpe 'Hello world'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "703," + Csv(hello) + "\n");  // 703: <|begin_of_text|>, from the TemplateProcessing
  r = Tokenize("--model " + kDir + "llama3_bpe --no-bos 'Hello world'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, Csv(hello) + "\n");
  r = Tokenize("--model " + kDir + "qwen2_bpe 'Hello world'");  // Qwen2: no BOS
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, Csv(HfIds("qwen2_bpe", "Hello world")) + "\n");
  r = Tokenize("--model " + kDir + "metaspace_bpe 'Hello world'");  // tokenizer_config.json: add_bos_token false
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, Csv(HfIds("metaspace_bpe", "Hello world")) + "\n");
  r = Tokenize("--model " + kDir + "spm_bpe 'Hello world'");  // add_bos_token true: <s> = 1
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "1," + Csv(HfIds("spm_bpe", "Hello world")) + "\n");
}

TEST(TokenizeCli, JsonStdinAndDecode) {
  auto r = Tokenize("--model " + kDir + "llama3_bpe --json 'Hello world<|eot_id|>'");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["tokenizer"], "tokenizer.json");
  EXPECT_EQ(j["bos"], 703);
  ASSERT_EQ(j["ids"].size(), j["tokens"].size());
  EXPECT_EQ(j["ids"].front(), 703);
  EXPECT_EQ(j["tokens"].front(), "<|begin_of_text|>");
  EXPECT_EQ(j["ids"].back(), 707);
  EXPECT_EQ(j["tokens"].back(), "<|eot_id|>");

  const fs::path d = TempDir("stdin");
  const std::string text = "Hello\nworld";
  std::ofstream(d / "prompt.txt", std::ios::binary) << text;
  r = opfuse::testing::RunOpfuseCli("tokenize --model " + kDir + "qwen2_bpe - < " + (d / "prompt.txt").string(), "tokenize");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<int64_t> ids = HfIds("qwen2_bpe", text);
  EXPECT_EQ(r.out, Csv(ids) + "\n");

  r = Tokenize("--model " + kDir + "qwen2_bpe --decode " + Csv(ids));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, text + "\n");
  r = Tokenize("--model " + kDir + "spm_bpe --decode 1," + Csv(HfIds("spm_bpe", "Hello world")) + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["text"], "<s> Hello world");  // HF keeps special tokens when decoding
  fs::remove_all(d);
}

TEST(TokenizeCli, HelpExplains) {
  auto r = Tokenize("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("tokenizer.json"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--decode"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--no-bos"), std::string::npos) << r.out;
}

// generate --prompt with a tokenizer.json model directory: the prompt starts with the BOS the
// tokenizer decides (its template here; none once tokenizer_config.json says add_bos_token false).
TEST(TokenizeCli, GenerateUsesTheTokenizersBos) {
  const fs::path d = TempDir("gen");
  auto r = opfuse::testing::RunOpfuseCli("init-weights --config tiny --out " + (d / "model").string(), "tokenize");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ofstream(d / "model" / "tokenizer.json") << R"({"version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 6, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [6], "tokens": ["<s>"]}}},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4, "c": 5}, "merges": ["a b", "Ġ ab"]}})";
  const std::string gen = "generate --model " + (d / "model").string() + " --prompt 'ab ab' --max-new-tokens 1 --dump-logits " +
                          (d / "logits.json").string();
  r = opfuse::testing::RunOpfuseCli(gen, "tokenize");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(opfuse::testing::ReadTextFile((d / "logits.json").string()))["prompts"], json::parse("[[6, 2, 4]]"));
  std::ofstream(d / "model" / "tokenizer_config.json") << R"({"add_bos_token": false})";
  r = opfuse::testing::RunOpfuseCli(gen, "tokenize");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(opfuse::testing::ReadTextFile((d / "logits.json").string()))["prompts"], json::parse("[[2, 4]]"));
  fs::remove_all(d);
}

struct BadCase {
  std::string args;
  std::string message;
};

TEST(TokenizeCli, BadInputExitsTwoWithOneLine) {
  const fs::path d = TempDir("bad");
  fs::create_directories(d / "empty");
  fs::create_directories(d / "nfkc");
  std::string tok = opfuse::testing::ReadTextFile(kDir + "qwen2_bpe/tokenizer.json");
  const std::string from = "\"normalizer\":{\"type\":\"NFC\"}";
  ASSERT_NE(tok.find(from), std::string::npos);
  tok.replace(tok.find(from), from.size(), "\"normalizer\":{\"type\":\"NFKC\"}");
  std::ofstream(d / "nfkc" / "tokenizer.json") << tok;
  std::ofstream(d / "bad_utf8.txt", std::ios::binary) << "ab\xff";
  const std::string llama = "--model " + kDir + "llama3_bpe ";
  const std::vector<BadCase> cases = {
      {"--model /nonexistent/dir hi", "/nonexistent/dir: no such directory"},
      {"--model " + (d / "empty").string() + " hi", "neither tokenizer.json nor tokenizer.model"},
      {"--model " + (d / "nfkc").string() + " hi", "normalizer: unsupported normalizer type \"NFKC\""},
      {llama + "--decode 1,x", "--decode: token ids: entry 2 'x' is not an integer"},
      {llama + "--decode 99999", "entry 1 = 99999 is outside the vocabulary [0, 711)"},
      {llama + "--decode ''", "entry 1 is empty"},
      {llama + "--decode 1,,2", "entry 2 is empty"},
      {llama, "give TEXT to encode"},
      {llama + "hi --decode 1", "not both"},
      {llama + "- < " + (d / "bad_utf8.txt").string(), "text is not valid UTF-8 (byte 2)"},
  };
  for (const BadCase& c : cases) {
    auto r = Tokenize(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("opfuse tokenize: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.out, "") << c.args;
  }
  auto r = Tokenize("hi");  // --model missing: CLI11's usage error, exit 2
  EXPECT_EQ(r.code, 2) << r.err;
  fs::remove_all(d);
}

}  // namespace
