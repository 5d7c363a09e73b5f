// Tokenizer: the tokenizer.json backend (model/tokenizer_json.h), the SentencePiece module loader
// and the ids-only path. See tokenizer.h.
#include "model/tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>

#include "model/tokenizer_json.h"
#include "util/quote.h"

namespace opfuse {

// The module's C entry points (sentencepiece_plugin.cc).
struct Tokenizer::Module {
  int (*abi_version)();
  void* (*load)(const char*, char*, size_t);
  void (*free_)(void*);
  int (*vocab_size)(void*);
  int (*bos_id)(void*);
  int (*eos_id)(void*);
  long (*encode)(void*, const char*, size_t, int*, size_t, char*, size_t);
  long (*decode)(void*, const int*, size_t, char*, size_t, char*, size_t);
};

namespace {

namespace fs = std::filesystem;
constexpr const char* kModuleName = "libopfuse_sentencepiece.so";

// Loads the module once per process; the error (why text is unavailable) is kept for every caller.
StatusOr<const Tokenizer::Module*> LoadModule() {
  static std::once_flag once;
  static Tokenizer::Module module;
  static std::string error;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("OPFUSE_SENTENCEPIECE_MODULE"); env && *env) candidates.push_back(env);
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      candidates.push_back((exe.parent_path() / kModuleName).string());
      candidates.push_back((exe.parent_path().parent_path() / kModuleName).string());  // tests/ in a build tree
    }
#ifdef OPFUSE_SPM_MODULE_DIR
    candidates.push_back(std::string(OPFUSE_SPM_MODULE_DIR) + "/" + kModuleName);
#endif
    std::vector<std::string> tried;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const std::string& path = candidates[i];
      if (std::find(candidates.begin(), candidates.begin() + i, path) != candidates.begin() + i) continue;
      if (!fs::exists(path, ec)) {
        tried.push_back(path + " (absent)");
        continue;
      }
      void* so = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!so) {
        const char* e = ::dlerror();
        tried.push_back(fmt::format("{} ({})", path, e ? e : "dlopen failed"));
        continue;
      }
      auto sym = [&](const char* name) { return ::dlsym(so, name); };
      module.abi_version = reinterpret_cast<int (*)()>(sym("opfuse_spm_abi_version"));
      module.load = reinterpret_cast<void* (*)(const char*, char*, size_t)>(sym("opfuse_spm_load"));
      module.free_ = reinterpret_cast<void (*)(void*)>(sym("opfuse_spm_free"));
      module.vocab_size = reinterpret_cast<int (*)(void*)>(sym("opfuse_spm_vocab_size"));
      module.bos_id = reinterpret_cast<int (*)(void*)>(sym("opfuse_spm_bos_id"));
      module.eos_id = reinterpret_cast<int (*)(void*)>(sym("opfuse_spm_eos_id"));
      module.encode = reinterpret_cast<long (*)(void*, const char*, size_t, int*, size_t, char*, size_t)>(sym("opfuse_spm_encode"));
      module.decode = reinterpret_cast<long (*)(void*, const int*, size_t, char*, size_t, char*, size_t)>(sym("opfuse_spm_decode"));
      if (!module.abi_version || !module.load || !module.free_ || !module.vocab_size || !module.bos_id || !module.eos_id ||
          !module.encode || !module.decode || module.abi_version() != 1) {
        tried.push_back(path + " (not an opfuse SentencePiece module of ABI 1)");
        module = {};
        continue;
      }
      return;
    }
    error = fmt::format("SentencePiece support unavailable: {} not loadable (tried {}); build with libsentencepiece-dev "
                        "installed or set OPFUSE_SENTENCEPIECE_MODULE",
                        kModuleName, tried.empty() ? "nothing" : fmt::format("{}", fmt::join(tried, "; ")));
  });
  if (!module.load) return Unavailable(error);
  return &module;
}

}  // namespace

Tokenizer::~Tokenizer() {
  if (handle_ && module_) module_->free_(handle_);
}

std::unique_ptr<Tokenizer> Tokenizer::IdsOnly(int64_t vocab_size, std::string reason) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->vocab_size_ = vocab_size;
  t->reason_ = std::move(reason);
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadSentencePiece(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return NotFound(fmt::format("{}: no such file", path));
  OPFUSE_ASSIGN_OR_RETURN(const Module* m, LoadModule());
  char err[512] = {0};
  void* h = m->load(path.c_str(), err, sizeof(err));
  if (!h) return InvalidArgument(fmt::format("{}: not a SentencePiece model: {}", path, err));
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->module_ = m;
  t->handle_ = h;
  t->vocab_size_ = m->vocab_size(h);
  if (int b = m->bos_id(h); b >= 0) t->bos_ = b;
  if (int e = m->eos_id(h); e >= 0) t->eos_ = e;
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadJson(const std::string& path) {
  OPFUSE_ASSIGN_OR_RETURN(std::unique_ptr<JsonBpeTokenizer> j, JsonBpeTokenizer::Load(path));
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->vocab_size_ = j->vocab_size();
  t->bos_ = j->bos_id();
  t->eos_ = j->eos_id();
  t->json_bos_ = j->bos_to_prepend();
  t->json_ = std::move(j);
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDir(const std::string& dir) {
  std::error_code ec;
  if (const std::string json = (fs::path(dir) / "tokenizer.json").string(); fs::exists(json, ec)) return LoadJson(json);
  if (const std::string spm = (fs::path(dir) / "tokenizer.model").string(); fs::exists(spm, ec)) return LoadSentencePiece(spm);
  if (!fs::is_directory(dir, ec)) return NotFound(fmt::format("{}: no such directory", dir));
  return NotFound(fmt::format("{} has neither tokenizer.json nor tokenizer.model", dir));
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::ForModelDir(const std::string& dir, int64_t vocab_size) {
  std::error_code ec;
  if (const std::string json = (fs::path(dir) / "tokenizer.json").string(); fs::exists(json, ec)) {
    OPFUSE_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> t, LoadJson(json));
    if (t->vocab_size() > vocab_size)
      return InvalidArgument(
          fmt::format("{}: tokenizer has {} token ids but the model's vocab_size is {}", json, t->vocab_size(), vocab_size));
    return t;
  }
  const std::string path = (fs::path(dir) / "tokenizer.model").string();
  if (!fs::exists(path, ec))
    return IdsOnly(vocab_size, fmt::format("{} has no tokenizer.model (nor tokenizer.json): token ids only (use --ids)", dir));
  auto t = LoadSentencePiece(path);
  if (t.ok()) {
    if ((*t)->vocab_size() > vocab_size)
      return InvalidArgument(fmt::format("{}: tokenizer has {} pieces but the model's vocab_size is {}", path,
                                         (*t)->vocab_size(), vocab_size));
    return t;
  }
  if (t.status().code() == StatusCode::kUnavailable)
    return IdsOnly(vocab_size, fmt::format("{}: {}: token ids only (use --ids)", path, t.status().message()));
  return t.status();
}

StatusOr<std::vector<int64_t>> Tokenizer::Encode(std::string_view text) const {
  if (!has_text()) return Unavailable(fmt::format("cannot encode text: {}", reason_));
  if (json_) {
    OPFUSE_ASSIGN_OR_RETURN(std::vector<int32_t> ids, json_->Encode(text));
    return std::vector<int64_t>(ids.begin(), ids.end());
  }
  char err[512] = {0};
  std::vector<int> ids(text.size() + 16);
  long n = module_->encode(handle_, text.data(), text.size(), ids.data(), ids.size(), err, sizeof(err));
  if (n >= 0 && static_cast<size_t>(n) > ids.size()) {
    ids.resize(n);
    n = module_->encode(handle_, text.data(), text.size(), ids.data(), ids.size(), err, sizeof(err));
  }
  if (n < 0) return InvalidArgument(fmt::format("SentencePiece encode failed: {}", err));
  return std::vector<int64_t>(ids.begin(), ids.begin() + n);
}

StatusOr<std::string> Tokenizer::Decode(const std::vector<int64_t>& ids) const {
  if (!has_text()) return Unavailable(fmt::format("cannot decode to text: {}", reason_));
  std::vector<int> v;
  for (auto id : ids) {
    if (id < 0 || id >= vocab_size_) return InvalidArgument(fmt::format("token id {} outside the vocabulary (size {})", id, vocab_size_));
    v.push_back(static_cast<int>(id));
  }
  if (json_) {
    // As transformers' decode: the tokenizers text, cleaned up when tokenizer_config.json says so.
    OPFUSE_ASSIGN_OR_RETURN(std::string text, json_->Decode(v));
    return json_->clean_up_tokenization_spaces() ? CleanUpTokenizationSpaces(std::move(text)) : text;
  }
  char err[512] = {0};
  std::string out(v.size() * 8 + 16, '\0');
  long n = module_->decode(handle_, v.data(), v.size(), out.data(), out.size(), err, sizeof(err));
  if (n >= 0 && static_cast<size_t>(n) > out.size()) {
    out.resize(n);
    n = module_->decode(handle_, v.data(), v.size(), out.data(), out.size(), err, sizeof(err));
  }
  if (n < 0) return InvalidArgument(fmt::format("SentencePiece decode failed: {}", err));
  out.resize(n);
  return out;
}

StatusOr<std::vector<std::string>> Tokenizer::TokenStrings(const std::vector<int64_t>& ids) const {
  if (!has_text()) return Unavailable(fmt::format("cannot show tokens: {}", reason_));
  std::vector<std::string> out;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size_) return InvalidArgument(fmt::format("token id {} outside the vocabulary (size {})", id, vocab_size_));
    if (json_) {
      out.push_back(json_->IdToToken(static_cast<int32_t>(id)).value_or(""));
    } else {
      OPFUSE_ASSIGN_OR_RETURN(std::string piece, Decode({id}));
      out.push_back(std::move(piece));
    }
  }
  return out;
}

StatusOr<std::vector<int64_t>> Tokenizer::ParseIds(std::string_view text, int64_t vocab_size) {
  std::vector<int64_t> ids;
  size_t pos = 0;
  int index = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string item(text.substr(pos, comma - pos));
    const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    if (item.empty()) return InvalidArgument(fmt::format("token ids {}: entry {} is empty", Quote(text), index + 1));
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (*end != '\0' || errno != 0)
      return InvalidArgument(fmt::format("token ids: entry {} {} is not an integer", index + 1, Quote(item)));
    if (v < 0 || v >= vocab_size)
      return InvalidArgument(fmt::format("token ids: entry {} = {} is outside the vocabulary [0, {})", index + 1, v, vocab_size));
    ids.push_back(v);
    ++index;
    pos = comma + 1;
  }
  return ids;
}

std::string Tokenizer::FormatIds(const std::vector<int64_t>& ids) { return fmt::format("{}", fmt::join(ids, ",")); }

}  // namespace opfuse
