// JsonBpeTokenizer (model/tokenizer_json.h) against Hugging Face's `tokenizers`: every fixture under
// tests/data/tokenizers/ (made by tools/make_tokenizer_fixtures.py, which trains small tokenizers
// wired like Llama-3, Qwen2, Llama-2 and records what HF returns) must give HF's ids for every test
// string, HF's decoded text, HF's token strings, HF's decoding of random id lists, and the same
// under each recorded variant (one field of tokenizer.json changed). Then: every refused field and
// every malformed file is a one-line InvalidArgument naming the field; BOS/EOS come out as
// tokenizer_config.json and the post-processor say; Tokenizer (model/tokenizer.h) prefers
// tokenizer.json; a 10 KB prompt encodes well within a second; encoding is thread-safe.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/tokenizer.h"
#include "model/tokenizer_json.h"

namespace opfuse {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kDir = std::string(OPFUSE_SOURCE_DIR) + "/tests/data/tokenizers/";

std::string Read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Show(const std::string& s) { return json(s).dump(); }  // escaped, for failure messages

std::vector<int32_t> Ids(const json& j) { return j.get<std::vector<int32_t>>(); }

// "a.b[2].c" -> the element (the walk tools/make_tokenizer_fixtures.py's set_path does).
json& At(json& root, const std::string& path) {
  json* j = &root;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '.')) {
    const size_t br = part.find('[');
    j = &(*j)[part.substr(0, br)];
    if (br != std::string::npos) j = &(*j)[std::stoul(part.substr(br + 1))];
  }
  return *j;
}

struct Fixture {
  std::string name;
  std::string bos_to_prepend, bos, eos;  // token contents; "" = none
};

void PrintTo(const Fixture& f, std::ostream* os) { *os << f.name; }

class JsonFixture : public ::testing::TestWithParam<Fixture> {};

// Checks `cases` (the first `limit` of them) with `tok`; `differ` overrides ids / decoded text.
void CheckCases(const JsonBpeTokenizer& tok, const json& cases, size_t limit, const std::map<size_t, json>& differ,
                const std::string& what, int* checked) {
  int failures = 0;
  for (size_t i = 0; i < std::min(limit, cases.size()) && failures < 10; ++i) {
    const json& c = cases[i];
    const std::string text = c[0].get<std::string>();
    std::vector<int32_t> ids = Ids(c[1]);
    std::string decoded = c.size() > 2 ? c[2].get<std::string>() : text;
    if (auto it = differ.find(i); it != differ.end()) {
      ids = Ids(it->second[1]);
      if (it->second.size() > 2) decoded = it->second[2].get<std::string>();
    }
    auto got = tok.Encode(text);
    ASSERT_TRUE(got.ok()) << what << " case " << i << " " << Show(text) << ": " << got.status().message();
    if (*got != ids) {
      ++failures;
      ADD_FAILURE() << what << " case " << i << " " << Show(text) << ": ids " << json(*got).dump() << ", HF " << json(ids).dump();
    }
    auto back = tok.Decode(ids);
    ASSERT_TRUE(back.ok()) << back.status().message();
    if (*back != decoded) {
      ++failures;
      ADD_FAILURE() << what << " case " << i << " decode " << json(ids).dump() << ": " << Show(*back) << ", HF " << Show(decoded);
    }
    ++*checked;
  }
}

TEST_P(JsonFixture, MatchesHuggingFace) {
  const std::string dir = kDir + GetParam().name + "/";
  auto tok = JsonBpeTokenizer::Load(dir + "tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const json expected = json::parse(Read(dir + "expected.json"));
  EXPECT_EQ((*tok)->vocab_size(), expected["vocab_size"].get<int>());

  int checked = 0;
  CheckCases(**tok, expected["cases"], expected["cases"].size(), {}, GetParam().name, &checked);
  EXPECT_GE(checked, 300);

  for (const json& t : expected["tokens"]) {
    auto ids = (*tok)->Encode(t[0].get<std::string>());
    ASSERT_TRUE(ids.ok());
    std::vector<std::string> strings;
    for (int32_t id : *ids) strings.push_back((*tok)->IdToToken(id).value_or("<none>"));
    EXPECT_EQ(json(strings), t[1]) << Show(t[0].get<std::string>());
  }
  for (const json& p : expected["pre_tokenize"]) {
    auto pieces = (*tok)->PreTokenize(p[0].get<std::string>());
    ASSERT_TRUE(pieces.ok()) << pieces.status().message();
    EXPECT_EQ(json(*pieces), p[1]) << "pre-tokenize " << Show(p[0].get<std::string>());
  }
  for (const json& d : expected["decode"]) {
    auto text = (*tok)->Decode(Ids(d[0]));
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(*text, d[1].get<std::string>()) << "decode " << d[0].dump();
    auto skipped = (*tok)->Decode(Ids(d[0]), /*skip_special_tokens=*/true);
    ASSERT_TRUE(skipped.ok());
    EXPECT_EQ(*skipped, d[2].get<std::string>()) << "decode (skip special) " << d[0].dump();
  }

  // BOS / EOS as tokenizer_config.json and the post-processor say.
  auto id_of = [&](const std::string& s) { return s.empty() ? std::nullopt : (*tok)->TokenToId(s); };
  EXPECT_EQ((*tok)->bos_to_prepend(), id_of(GetParam().bos_to_prepend));
  EXPECT_EQ((*tok)->bos_id(), id_of(GetParam().bos));
  EXPECT_EQ((*tok)->eos_id(), id_of(GetParam().eos));
  // Where tokenizer_config.json does not override the template, BOS + Encode = HF's
  // encode(add_special_tokens=True).
  const json config = fs::exists(dir + "tokenizer_config.json") ? json::parse(Read(dir + "tokenizer_config.json")) : json::object();
  bool template_adds = false;  // HF's encode("", add_special_tokens=True) is [BOS] when the template adds one
  for (const json& w : expected["with_special_tokens"]) template_adds |= w[0] == "" && !w[1].empty();
  if (!config.contains("add_bos_token") || config["add_bos_token"].get<bool>() == template_adds) {
    for (const json& w : expected["with_special_tokens"]) {
      auto ids = (*tok)->Encode(w[0].get<std::string>());
      ASSERT_TRUE(ids.ok());
      if (auto bos = (*tok)->bos_to_prepend()) ids->insert(ids->begin(), *bos);
      EXPECT_EQ(*ids, Ids(w[1])) << Show(w[0].get<std::string>());
    }
  }

  // Variants: tokenizer.json with one field changed, checked on the first cases.
  const json base = json::parse(Read(dir + "tokenizer.json"));
  const std::string config_text = fs::exists(dir + "tokenizer_config.json") ? Read(dir + "tokenizer_config.json") : "";
  for (const json& v : expected["variants"]) {
    json j = base;
    for (const json& set : v["set"]) At(j, set[0].get<std::string>()) = set[1];
    auto vt = JsonBpeTokenizer::FromStrings(j.dump(), config_text);
    ASSERT_TRUE(vt.ok()) << v["set"].dump() << ": " << vt.status().message();
    std::map<size_t, json> differ;
    for (const json& d : v["differ"]) differ[d[0].get<size_t>()] = d;
    CheckCases(**vt, expected["cases"], v["cases"].get<size_t>(), differ, GetParam().name + " " + v["set"].dump(), &checked);
  }
  std::cout << "[ " << GetParam().name << " ] " << expected["cases"].size() << " strings, " << checked
            << " encode+decode checks incl. " << expected["variants"].size() << " variants, HF tokenizers "
            << expected["tokenizers_version"].get<std::string>() << "\n";
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, JsonFixture,
    ::testing::Values(Fixture{"llama3_bpe", "<|begin_of_text|>", "<|begin_of_text|>", "<|eot_id|>"},
                      Fixture{"qwen2_bpe", "", "", "<|endoftext|>"}, Fixture{"spm_bpe", "<s>", "<s>", "</s>"},
                      Fixture{"metaspace_bpe", "", "<s>", "</s>"}, Fixture{"misc_bpe", "", "", ""}),
    [](const auto& info) { return info.param.name; });

// ------------------------------------------------------------------------------------------ errors

// A small valid tokenizer.json to break one field at a time.
json Minimal() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 6, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [6], "tokens": ["<s>"]}}},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4, "c": 5},
              "merges": ["a b", ["Ġ", "ab"]]}
  })");
}

TEST(JsonTokenizer, MinimalWorks) {
  auto t = JsonBpeTokenizer::FromStrings(Minimal().dump());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(*(*t)->Encode("ab ab<s>c"), (std::vector<int32_t>{2, 4, 6, 5}));
  EXPECT_EQ(*(*t)->Decode({2, 4, 6, 5}), "ab ab<s>c");
  EXPECT_EQ((*t)->bos_to_prepend(), 6);
  EXPECT_EQ((*t)->vocab_size(), 7);
}

struct ErrorCase {
  const char* name;
  const char* path;  // JSON path to set ("" = replace the whole text with `value` as a string)
  const char* value;  // JSON text
  const char* message;  // a substring the error must hold
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

class JsonErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(JsonErrors, OneLineInvalidArgument) {
  const ErrorCase& c = GetParam();
  std::string text;
  if (std::string(c.path).empty()) {
    text = c.value;
  } else {
    json j = Minimal();
    At(j, c.path) = json::parse(c.value);
    text = j.dump();
  }
  auto t = JsonBpeTokenizer::FromStrings(text, "", "dir/tokenizer.json");
  ASSERT_FALSE(t.ok()) << c.name;
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().message();
  EXPECT_NE(t.status().message().find(c.message), std::string::npos) << t.status().message();
  EXPECT_EQ(t.status().message().rfind("dir/tokenizer.json: ", 0), 0u) << t.status().message();
  EXPECT_EQ(t.status().message().find('\n'), std::string::npos) << t.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Refused, JsonErrors,
    ::testing::Values(
        ErrorCase{"NormalizerNFKC", "normalizer", R"({"type": "NFKC"})", "normalizer: unsupported normalizer type \"NFKC\""},
        ErrorCase{"NormalizerInSequence", "normalizer", R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]})",
                  "normalizer.normalizers[1]: unsupported normalizer type \"Lowercase\""},
        ErrorCase{"NormalizerPrecompiled", "normalizer", R"({"type": "Precompiled", "precompiled_charsmap": "AA"})", "\"Precompiled\""},
        ErrorCase{"ReplaceBadRegex", "normalizer", R"({"type": "Replace", "pattern": {"Regex": "(a"}, "content": ""})",
                  "normalizer.pattern.Regex: regex does not compile"},
        ErrorCase{"ReplacePatternKind", "normalizer", R"({"type": "Replace", "pattern": {"Char": "a"}, "content": ""})",
                  "unsupported pattern kind \"Char\""},
        ErrorCase{"ReplaceEmptyString", "normalizer", R"({"type": "Replace", "pattern": {"String": ""}, "content": "x"})",
                  "normalizer.pattern.String: empty pattern"},
        ErrorCase{"Dropout", "model.dropout", "0.1", "model.dropout: 0.1 is not supported"},
        ErrorCase{"Truncation", "truncation", R"({"max_length": 8, "strategy": "LongestFirst"})", "truncation: must be null"},
        ErrorCase{"Padding", "padding", R"({"strategy": "BatchLongest"})", "padding: must be null"},
        ErrorCase{"SplitInvert", "pre_tokenizer", R"({"type": "Split", "pattern": {"String": " "}, "behavior": "Isolated", "invert": true})",
                  "pre_tokenizer.invert: invert true is not supported"},
        ErrorCase{"SplitBehavior", "pre_tokenizer", R"({"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways", "invert": false})",
                  "pre_tokenizer.behavior: unsupported split behavior \"Sideways\""},
        ErrorCase{"PreTokenizerWhitespace", "pre_tokenizer", R"({"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}]})",
                  "pre_tokenizer.pretokenizers[0]: unsupported pre_tokenizer type \"Whitespace\""},
        ErrorCase{"PreTokenizerDigits", "pre_tokenizer", R"({"type": "Digits", "individual_digits": true})", "\"Digits\""},
        ErrorCase{"MetaspaceReplacement", "pre_tokenizer", R"({"type": "Metaspace", "replacement": "__"})",
                  "pre_tokenizer.replacement: expected one character"},
        ErrorCase{"MetaspaceScheme", "pre_tokenizer", R"({"type": "Metaspace", "replacement": "_", "prepend_scheme": "sometimes"})",
                  "pre_tokenizer.prepend_scheme: unsupported value \"sometimes\""},
        ErrorCase{"ModelWordPiece", "model.type", R"("WordPiece")", "model.type: unsupported model type \"WordPiece\""},
        ErrorCase{"ModelUnigram", "model.type", R"("Unigram")", "unsupported model type \"Unigram\""},
        ErrorCase{"ModelMissing", "model", "null", "model: missing"},
        ErrorCase{"VocabMissing", "model.vocab", "null", "model.vocab: expected an object"},
        ErrorCase{"MergesMissing", "model.merges", "null", "model.merges: missing"},
        ErrorCase{"Prefix", "model.continuing_subword_prefix", R"("##")", "model.continuing_subword_prefix: \"##\" is not supported"},
        ErrorCase{"Suffix", "model.end_of_word_suffix", R"("</w>")", "model.end_of_word_suffix"},
        ErrorCase{"MergeUnknownLeft", "model.merges[0]", R"("x b")", "model.merges[0]: merge (\"x\", \"b\"): \"x\" is not in the vocabulary"},
        ErrorCase{"MergeUnknownResult", "model.merges[0]", R"(["b", "a"])", "\"ba\" is not in the vocabulary"},
        ErrorCase{"MergeThreeParts", "model.merges[1]", R"("a b c")", "model.merges[1]: \"a b c\" is not two tokens"},
        ErrorCase{"MergeBadType", "model.merges[1]", "42", "model.merges[1]: expected \"a b\""},
        ErrorCase{"VocabNegativeId", "model.vocab.c", "-1", "id -1 of \"c\" is out of range"},
        ErrorCase{"VocabHugeId", "model.vocab.c", "4000000000", "id 4000000000 of \"c\" is out of range"},
        ErrorCase{"VocabFloatId", "model.vocab.c", "5.5", "model.vocab[\"c\"]: expected an integer id"},
        ErrorCase{"VocabDuplicateId", "model.vocab.c", "1", "id 1 is given to both"},
        // a token that is a newline, in the message too: escaped, the message stays one line (a fuzzer find)
        ErrorCase{"VocabDuplicateIdNewlineToken", "model.vocab.\n", "1", "id 1 is given to both \"\\n\" and \"b\""},
        ErrorCase{"UnkNotInVocab", "model.unk_token", R"("<unk>")", "model.unk_token: \"<unk>\" is not in the vocabulary"},
        ErrorCase{"AddedIdMismatch", "added_tokens[0].id", "9", "added_tokens[0].id: \"<s>\" has id 9 but Hugging Face assigns it 6"},
        ErrorCase{"AddedSingleWord", "added_tokens[0].single_word", "true", "added_tokens[0].single_word: true is not supported"},
        ErrorCase{"AddedNoContent", "added_tokens[0].content", "null", "added_tokens[0].content: missing"},
        ErrorCase{"AddedTwice", "added_tokens[1]", R"({"id": 7, "content": "<s>", "special": true, "normalized": false})", "listed twice"},
        ErrorCase{"DecoderWordPiece", "decoder", R"({"type": "WordPiece", "prefix": "##", "cleanup": true})",
                  "decoder: unsupported decoder type \"WordPiece\""},
        ErrorCase{"DecoderStripStop", "decoder", R"({"type": "Strip", "content": " ", "start": 1, "stop": -1})", "decoder.stop"},
        ErrorCase{"PostRoberta", "post_processor", R"({"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]})",
                  "post_processor: unsupported post_processor type \"RobertaProcessing\""},
        ErrorCase{"PostUnknownSpecial", "post_processor.special_tokens", "{}",
                  "post_processor.single[0]: special token \"<s>\" is missing from post_processor.special_tokens"},
        ErrorCase{"PostTwoIds", "post_processor.special_tokens", R"({"<s>": {"id": "<s>", "ids": [6, 5], "tokens": ["<s>", "c"]}})",
                  "a leading special token of 2 ids is not supported"},
        ErrorCase{"Version", "version", R"("2.0")", "version: unsupported version \"2.0\""},
        ErrorCase{"TypeMissing", "normalizer", R"({"normalizers": []})", "normalizer.type: missing"},
        ErrorCase{"TypeNotString", "decoder", R"({"type": 3})", "decoder.type: expected a string"},
        ErrorCase{"ComponentNotObject", "pre_tokenizer", "[1, 2]", "pre_tokenizer: expected an object"},
        ErrorCase{"TopLevelArray", "", "[1, 2, 3]", "expected a JSON object at the top level"},
        ErrorCase{"NotJson", "", "{\"model\": ", "not valid JSON"},
        ErrorCase{"Empty", "", "", "not valid JSON"},
        ErrorCase{"InvalidUtf8", "", "{\"model\": \"\xff\"}", "not valid JSON"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(JsonTokenizer, ConfigErrorsAndOverrides) {
  const std::string tok = Minimal().dump();
  auto expect_error = [&](const std::string& config, const std::string& message) {
    auto t = JsonBpeTokenizer::FromStrings(tok, config, "d/tokenizer.json");
    ASSERT_FALSE(t.ok()) << config;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(message), std::string::npos) << t.status().message();
    EXPECT_EQ(t.status().message().rfind("d/tokenizer_config.json: ", 0), 0u) << t.status().message();
  };
  expect_error("{", "not valid JSON");
  expect_error("[]", "expected a JSON object");
  expect_error(R"({"bos_token": "<x>"})", "bos_token: \"<x>\" is not a token of tokenizer.json");
  expect_error(R"({"eos_token": 3})", "eos_token: expected a string or {\"content\": ...}");
  expect_error(R"({"add_bos_token": "yes"})", "add_bos_token: expected true or false");
  expect_error(R"({"eos_token": {"__type": "AddedToken"}})", "eos_token.content: missing");

  auto with = [&](const std::string& config) {
    auto t = JsonBpeTokenizer::FromStrings(tok, config);
    EXPECT_TRUE(t.ok()) << t.status().message();
    return std::move(*t);
  };
  EXPECT_EQ(with("")->bos_to_prepend(), 6);                                        // the template's
  EXPECT_EQ(with(R"({"add_bos_token": false})")->bos_to_prepend(), std::nullopt);  // overridden
  EXPECT_EQ(with(R"({"add_bos_token": true, "bos_token": {"content": "c"}})")->bos_to_prepend(), 5);
  EXPECT_EQ(with(R"({"bos_token": "c", "eos_token": "ab"})")->bos_id(), 5);
  EXPECT_EQ(with(R"({"bos_token": "c", "eos_token": "ab"})")->eos_id(), 2);
  EXPECT_EQ(with(R"({"bos_token": null, "add_bos_token": null})")->bos_to_prepend(), 6);

  json no_template = Minimal();
  no_template["post_processor"] = nullptr;
  auto t = JsonBpeTokenizer::FromStrings(no_template.dump(), R"({"add_bos_token": true})", "d/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("add_bos_token: true, but there is no bos_token"), std::string::npos) << t.status().message();
}

TEST(JsonTokenizer, BadInputAndFiles) {
  auto t = JsonBpeTokenizer::FromStrings(Minimal().dump());
  ASSERT_TRUE(t.ok());
  auto bad = (*t)->Encode("ab\xff");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("not valid UTF-8 (byte 2)"), std::string::npos) << bad.status().message();
  EXPECT_FALSE((*t)->Encode("\xe4\xbd").ok());  // truncated sequence
  // Ids that name no token are skipped on decode, as HF does.
  EXPECT_EQ(*(*t)->Decode({2, -1, 99, 1000000}), "ab");
  EXPECT_EQ((*t)->IdToToken(99), std::nullopt);
  auto missing = JsonBpeTokenizer::Load("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// Every prefix of a real fixture and random byte flips: an error or a tokenizer, never a crash.
TEST(JsonTokenizer, TruncatedAndCorruptedFilesNeverCrash) {
  const std::string text = Read(kDir + "misc_bpe/tokenizer.json");
  ASSERT_FALSE(text.empty());
  for (size_t n = 0; n < text.size(); n += 97) EXPECT_FALSE(JsonBpeTokenizer::FromStrings(text.substr(0, n)).ok());
  uint32_t state = 12345;
  for (int k = 0; k < 300; ++k) {
    std::string s = text;
    for (int f = 0; f < 3; ++f) {
      state = state * 1103515245 + 12345;
      s[(state >> 8) % s.size()] = static_cast<char>("{}[]\",:0a \\"[(state >> 4) % 12]);
    }
    auto t = JsonBpeTokenizer::FromStrings(s);
    if (t.ok()) {
      auto ids = (*t)->Encode("Hello world 123 café 😀 <mask>");
      if (ids.ok()) (void)(*t)->Decode(*ids);
    } else {
      EXPECT_EQ(t.status().message().find('\n'), std::string::npos) << t.status().message();
    }
  }
}

// ------------------------------------------------------------------------------------------ Tokenizer

TEST(JsonTokenizer, TokenizerPrefersTokenizerJson) {
  const fs::path d = fs::temp_directory_path() / ("opfuse_tokjson_" + std::to_string(::getpid()));
  fs::create_directories(d);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(kDir + "llama3_bpe/" + f, d / f, fs::copy_options::overwrite_existing);
  fs::copy_file(std::string(OPFUSE_SOURCE_DIR) + "/tests/data/tiny_tokenizer.model", d / "tokenizer.model",
                fs::copy_options::overwrite_existing);
  auto t = Tokenizer::ForModelDir(d.string(), 1024);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->kind(), Tokenizer::Kind::kJson);
  EXPECT_TRUE((*t)->has_text());
  EXPECT_EQ((*t)->vocab_size(), 711);
  EXPECT_EQ((*t)->prepend_bos(), 703);  // <|begin_of_text|>
  EXPECT_EQ((*t)->bos_id(), 703);
  EXPECT_EQ((*t)->eos_id(), 707);       // <|eot_id|>
  auto ids = (*t)->Encode("Hello world<|eot_id|>");
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_EQ(ids->back(), 707);
  EXPECT_EQ(*(*t)->Decode(*ids), "Hello world<|eot_id|>");
  auto tokens = (*t)->TokenStrings(*ids);
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->back(), "<|eot_id|>");
  EXPECT_FALSE((*t)->Decode({711}).ok());  // outside the vocabulary
  // Llama-3's tokenizer_config.json sets clean_up_tokenization_spaces: the text is transformers'
  // decode (" ," -> ",", " n't" -> "n't", ...), while JsonBpeTokenizer::Decode stays the tokenizers one.
  auto spaced = (*t)->Encode("Hello , world . I do n't know !");
  ASSERT_TRUE(spaced.ok());
  EXPECT_EQ(*(*t)->Decode(*spaced), "Hello, world. I don't know!");
  EXPECT_EQ(CleanUpTokenizationSpaces("a ' b 's c 've d 're e 'm f ? g"), "a'b's c've d're e'm f? g");
  // A tokenizer larger than the model's vocabulary is refused; a broken tokenizer.json is an error.
  auto small = Tokenizer::ForModelDir(d.string(), 700);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("tokenizer has 711 token ids but the model's vocab_size is 700"), std::string::npos)
      << small.status().message();
  std::ofstream(d / "tokenizer.json") << "{\"model\": {\"type\": \"WordPiece\"}}";
  auto broken = Tokenizer::ForModelDir(d.string(), 1024);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("unsupported model type \"WordPiece\""), std::string::npos) << broken.status().message();
  // FromDir: no config needed; a directory without tokenizer files is NotFound.
  fs::remove(d / "tokenizer.json");
  fs::remove(d / "tokenizer.model");
  auto none = Tokenizer::FromDir(d.string());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("neither tokenizer.json nor tokenizer.model"), std::string::npos);
  fs::remove_all(d);
}

// ------------------------------------------------------------------------------------------ speed, threads

std::string LongPrompt(size_t bytes) {
  const std::vector<std::string> parts = {"The fused kernel runs in 3.2 µs; ", "今天天气很好，我们去公园散步吧。", "DON'T STOP ",
                                          "def f(x):\n    return x * 2\n", "😀👨‍👩‍👧 ", "café naïve Ångström ", "1234567 ",
                                          "    \t\n", "<|eot_id|>", "zyzzyva quux "};
  std::string s;
  for (size_t k = 0; s.size() < bytes; ++k) s += parts[(k * 7) % parts.size()];
  return s;
}

TEST(JsonTokenizer, TenKilobytePromptIsFast) {
  auto t = JsonBpeTokenizer::Load(kDir + "llama3_bpe/tokenizer.json");
  ASSERT_TRUE(t.ok());
  for (const std::string& text : {LongPrompt(10000), std::string(10000, 'a'), std::string(10000, ' ') + "x",
                                  std::string(3333, '\xe4') /* not UTF-8 */}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto ids = (*t)->Encode(text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (static_cast<unsigned char>(text[0]) == 0xe4) {
      EXPECT_FALSE(ids.ok());
      continue;
    }
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    EXPECT_EQ(*(*t)->Decode(*ids), text);
#ifndef OPFUSE_SANITIZE
    EXPECT_LT(s, 0.5) << text.size() << " bytes took " << s << " s";
#endif
  }
}

TEST(JsonTokenizer, ConcurrentEncodeIsConsistent) {
  auto t = JsonBpeTokenizer::Load(kDir + "qwen2_bpe/tokenizer.json");
  ASSERT_TRUE(t.ok());
  const std::string text = LongPrompt(3000);
  const std::vector<int32_t> want = *(*t)->Encode(text);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int r = 0; r < 20; ++r) ok[k] += (*t)->Encode(text).value() == want;
    });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(ok[k], 20);
}

}  // namespace
}  // namespace opfuse
