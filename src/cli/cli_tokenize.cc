// `opfuse tokenize --model DIR [TEXT | -] [--json] [--no-bos]` and
// `opfuse tokenize --model DIR --decode 1,2,3 [--json]`
//
// Shows what a model directory's tokenizer does with a prompt, without loading the model: the ids
// of TEXT ("-" reads stdin) with the BOS the tokenizer itself adds (tokenizer.json: its
// post-processor / tokenizer_config.json's add_bos_token; tokenizer.model: its BOS; --no-bos: none),
// comma-separated, or with --json one JSON object {"ids", "tokens", "bos", "tokenizer"}; --decode
// turns ids back into text. The tokenizer is the one `generate --model DIR` uses (model/tokenizer.h:
// tokenizer.json first, else tokenizer.model), so this is the way to check a prompt before a run.
// Exit codes: 0 ok, 2 bad input (no such directory / no tokenizer, an unsupported tokenizer.json,
// text that is not UTF-8, bad ids), one line on stderr; 1 internal failure.
#include <iostream>
#include <iterator>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "model/tokenizer.h"

namespace opfuse::cli {
namespace {

constexpr const char* kCmd = "tokenize";

struct TokenizeOptions {
  std::string model, text, decode;
  bool have_text = false, have_decode = false, json = false, no_bos = false;
};

const char* KindName(Tokenizer::Kind k) {
  switch (k) {
    case Tokenizer::Kind::kJson: return "tokenizer.json";
    case Tokenizer::Kind::kSentencePiece: return "tokenizer.model";
    default: return "none";
  }
}

int TokenizeMain(const TokenizeOptions& o) {
  if (o.have_text == o.have_decode)
    return Fail(kCmd, InvalidArgument(o.have_text ? "give TEXT or --decode IDS, not both" : "give TEXT to encode (\"-\" reads stdin) or --decode IDS"));
  auto t = Tokenizer::FromDir(o.model);
  if (!t.ok()) return Fail(kCmd, t.status());
  const Tokenizer& tok = **t;
  const auto dump = [](const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); };

  if (o.have_decode) {
    auto ids = Tokenizer::ParseIds(o.decode, tok.vocab_size());
    if (!ids.ok()) return Fail(kCmd, InvalidArgument("--decode: " + ids.status().message()));
    auto text = tok.Decode(*ids);
    if (!text.ok()) return Fail(kCmd, text.status());
    if (o.json) std::cout << dump({{"text", *text}, {"ids", *ids}, {"tokenizer", KindName(tok.kind())}}) << "\n";
    else std::cout << *text << "\n";
    return 0;
  }

  std::string text = o.text;
  if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  auto encoded = tok.Encode(text);
  if (!encoded.ok()) return Fail(kCmd, encoded.status());
  std::vector<int64_t> ids;
  const std::optional<int64_t> bos = o.no_bos ? std::nullopt : tok.prepend_bos();
  if (bos) ids.push_back(*bos);
  ids.insert(ids.end(), encoded->begin(), encoded->end());
  if (!o.json) {
    std::cout << Tokenizer::FormatIds(ids) << "\n";
    return 0;
  }
  auto tokens = tok.TokenStrings(ids);
  if (!tokens.ok()) return Fail(kCmd, tokens.status());
  nlohmann::json j = {{"ids", ids}, {"tokens", *tokens}, {"tokenizer", KindName(tok.kind())}};
  j["bos"] = bos ? nlohmann::json(*bos) : nlohmann::json(nullptr);
  std::cout << dump(j) << "\n";
  return 0;
}

}  // namespace

void RegisterTokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  auto* cmd = app.add_subcommand(
      "tokenize",
      "Turn text into token ids (or ids into text) with a model directory's tokenizer.\n"
      "The tokenizer is the one `generate --model DIR` uses: DIR/tokenizer.json (Hugging Face fast\n"
      "tokenizer, BPE: Llama-3, Qwen2/Qwen3, Llama-2 style; read by opfuse itself, docs/tokenizers.md),\n"
      "else DIR/tokenizer.model (SentencePiece). Only the tokenizer files are read, not the model.\n"
      "The ids of TEXT are printed comma-separated, starting with the BOS that the tokenizer adds\n"
      "(tokenizer.json: tokenizer_config.json's add_bos_token, else its post-processor; tokenizer.model:\n"
      "its BOS), as generate --prompt would feed them; --json prints {\"ids\", \"tokens\", \"bos\",\n"
      "\"tokenizer\"} on one line. --decode IDS prints the text of comma-separated ids instead.\n"
      "Examples:  opfuse tokenize --model DIR 'Hello world'\n"
      "           opfuse tokenize --model DIR --json --no-bos - < prompt.txt\n"
      "           opfuse tokenize --model DIR --decode 9906,1917");
  cmd->add_option("--model", o->model, "model directory holding tokenizer.json (+ tokenizer_config.json) or tokenizer.model")
      ->required();
  cmd->add_option("TEXT", o->text, "text to encode; \"-\" reads it from stdin")->each([o](const std::string&) { o->have_text = true; });
  cmd->add_option("--decode", o->decode, "comma-separated token ids to turn into text, e.g. 1,450,4996")
      ->each([o](const std::string&) { o->have_decode = true; });
  cmd->add_flag("--json", o->json, "print one JSON object (ids and token strings; or text) instead of plain output");
  cmd->add_flag("--no-bos", o->no_bos, "do not prepend the tokenizer's BOS to the ids of TEXT");
  cmd->callback([o] { SetExitCode(TokenizeMain(*o)); });
}

}  // namespace opfuse::cli
