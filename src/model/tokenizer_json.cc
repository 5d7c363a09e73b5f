// JsonBpeTokenizer: tokenizer.json (HF fast tokenizer, BPE) loading, encoding and decoding.
// See tokenizer_json.h for the contract. Each step mirrors the Rust `tokenizers` crate so that ids
// match bit for bit: added-token extraction (AddedVocabulary::extract_and_normalize), normalizers,
// pre-tokenizers (NormalizedString::split behaviours), BPE (BPE::merge_word + Word::merge_all,
// ordered by merge rank then position) and the decoder chain. Loading validates every field that
// changes ids and refuses what is not implemented, naming the JSON path.
#include "model/tokenizer_json.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/quote.h"
#include "util/files.h"

namespace opfuse {
namespace {

using json = nlohmann::json;

// Ids above this are refused: a real vocabulary is < 1M tokens, and the id -> token table is dense.
constexpr int64_t kMaxId = 1 << 24;
// HF's BPE cache: words shorter than this many bytes, up to this many entries.
constexpr size_t kCacheMaxWordBytes = 256;
constexpr size_t kCacheCapacity = 10000;

// GPT-2's pre-tokenizer regex: what a ByteLevel pre-tokenizer with use_regex=true applies.
constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// ------------------------------------------------------------------------------------------ UTF-8

// At s[i]: n > 0 for a well-formed sequence of n bytes (Unicode table 3-7), else -m where m >= 1 is
// the length of the maximal ill-formed subpart (what one U+FFFD replaces, as Rust's from_utf8_lossy).
int Utf8Step(std::string_view s, size_t i) {
  const unsigned c0 = static_cast<unsigned char>(s[i]);
  if (c0 < 0x80) return 1;
  int need;
  unsigned lo = 0x80, hi = 0xBF;
  if (c0 >= 0xC2 && c0 <= 0xDF) need = 1;
  else if (c0 == 0xE0) need = 2, lo = 0xA0;
  else if ((c0 >= 0xE1 && c0 <= 0xEC) || c0 == 0xEE || c0 == 0xEF) need = 2;
  else if (c0 == 0xED) need = 2, hi = 0x9F;
  else if (c0 == 0xF0) need = 3, lo = 0x90;
  else if (c0 >= 0xF1 && c0 <= 0xF3) need = 3;
  else if (c0 == 0xF4) need = 3, hi = 0x8F;
  else return -1;
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return -k;
    const unsigned c = static_cast<unsigned char>(s[i + k]);
    if (c < lo || c > hi) return -k;
    lo = 0x80, hi = 0xBF;
  }
  return need + 1;
}

// Byte offset of the first ill-formed sequence, or npos.
size_t FirstInvalidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const int n = Utf8Step(s, i);
    if (n < 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

// Length of the (well-formed) sequence that starts with this byte.
size_t Utf8Len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

// The code point at s[i] of well-formed text; advances i.
char32_t NextCodePoint(std::string_view s, size_t& i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const size_t n = Utf8Len(c);
  char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void AppendUtf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<char32_t> CodePoints(std::string_view s) {
  std::vector<char32_t> cps;
  for (size_t i = 0; i < s.size();) cps.push_back(NextCodePoint(s, i));
  return cps;
}

// Rust's String::from_utf8_lossy: each maximal ill-formed subpart becomes one U+FFFD.
std::string Utf8Lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const int n = Utf8Step(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += -n;
    }
  }
  return out;
}

// Unicode White_Space: what Rust's char::is_whitespace and regex \s match (added-token lstrip/rstrip).
bool IsWhiteSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Byte length of the run of white space that ends at s.size() / starts at 0.
size_t TrailingWhiteSpace(std::string_view s) {
  const std::vector<char32_t> cps = CodePoints(s);
  size_t bytes = 0;
  for (size_t k = cps.size(); k > 0 && IsWhiteSpace(cps[k - 1]); --k) {
    std::string tmp;
    AppendUtf8(tmp, cps[k - 1]);
    bytes += tmp.size();
  }
  return bytes;
}
size_t LeadingWhiteSpace(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!IsWhiteSpace(NextCodePoint(s, j))) break;
    i = j;
  }
  return i;
}

// GPT-2's bytes_to_unicode: every byte maps to a printable code point (< 324).
const std::array<char32_t, 256>& ByteToChar() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    }
    return t;
  }();
  return table;
}
const std::array<std::string, 256>& ByteToUtf8() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    for (int b = 0; b < 256; ++b) AppendUtf8(t[b], ByteToChar()[b]);
    return t;
  }();
  return table;
}
// The inverse: code point -> byte, -1 where none.
int CharToByte(char32_t cp) {
  static const std::array<int16_t, 324> table = [] {
    std::array<int16_t, 324> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[ByteToChar()[b]] = static_cast<int16_t>(b);
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

// ------------------------------------------------------------------------------------------ NFC

StatusOr<std::string> Nfc(std::string_view s) {
  if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) return std::string(s);
  if (s.size() > (1u << 28)) return InvalidArgument("text too long for NFC normalization");
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfc = unorm2_getNFCInstance(&err);
  if (U_FAILURE(err)) return Internal(fmt::format("ICU NFC normalizer unavailable: {}", u_errorName(err)));
  std::vector<UChar> src(s.size() + 1);
  int32_t n16 = 0;
  err = U_ZERO_ERROR;
  u_strFromUTF8(src.data(), static_cast<int32_t>(src.size()), &n16, s.data(), static_cast<int32_t>(s.size()), &err);
  if (U_FAILURE(err)) return Internal(fmt::format("ICU UTF-8 conversion failed: {}", u_errorName(err)));
  if (unorm2_isNormalized(nfc, src.data(), n16, &err) && U_SUCCESS(err)) return std::string(s);
  err = U_ZERO_ERROR;
  std::vector<UChar> dst(static_cast<size_t>(n16) * 3 + 16);
  const int32_t m16 = unorm2_normalize(nfc, src.data(), n16, dst.data(), static_cast<int32_t>(dst.size()), &err);
  if (U_FAILURE(err)) return Internal(fmt::format("ICU NFC normalization failed: {}", u_errorName(err)));
  std::string out(static_cast<size_t>(m16) * 3 + 4, '\0');
  int32_t n8 = 0;
  err = U_ZERO_ERROR;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &n8, dst.data(), m16, &err);
  if (U_FAILURE(err)) return Internal(fmt::format("ICU UTF-16 conversion failed: {}", u_errorName(err)));
  out.resize(n8);
  return out;
}

// ------------------------------------------------------------------------------------------ regex

// HF compiles its patterns with Oniguruma; PCRE2 with UTF+UCP agrees on the syntax tokenizer files
// use (\p{..}, (?i:..), lookahead, classes) except that PCRE2's \s also matches U+180E (Mongolian
// vowel separator, White_Space until Unicode 6.3), which Oniguruma's \s does not. The translation
// below keeps U+180E out of \s (and in \S), in and outside character classes.
std::string TranslateOnigPattern(std::string_view p) {
  static const std::string kNot180E = "(?!\\x{180E})";
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') out += "(?:" + kNot180E + "\\s)";
      else if (n == 'S') out += "(?:\\x{180E}|\\S)";
      else out += {c, n};
      ++i;
      continue;
    }
    if (c != '[') {
      out += c;
      continue;
    }
    // A character class: copy it, noting \s / \S inside and whether it is negated.
    size_t j = i + 1;
    bool negated = false, has_s = false, has_S = false;
    std::string body;
    if (j < p.size() && p[j] == '^') negated = true, ++j;
    if (j < p.size() && p[j] == ']') body += ']', ++j;
    int depth = 0;  // nested [..] (POSIX [:name:] or Oniguruma sets): copied verbatim
    for (; j < p.size(); ++j) {
      const char d = p[j];
      if (d == '\\' && j + 1 < p.size()) {
        if (p[j + 1] == 's') has_s = true;
        if (p[j + 1] == 'S') has_S = true;
        body += {d, p[j + 1]};
        ++j;
        continue;
      }
      if (d == '[') ++depth;
      if (d == ']') {
        if (depth == 0) break;
        --depth;
      }
      body += d;
    }
    if (j >= p.size()) {  // unterminated: let PCRE2 report it
      out.append(p.substr(i));
      break;
    }
    const std::string cls = std::string("[") + (negated ? "^" : "") + body + "]";
    if (!negated && has_S) out += std::string("[") + body + "\\x{180E}]";
    else if (!negated && has_s) out += "(?:" + kNot180E + cls + ")";
    else if (negated && has_s && !has_S) out += "(?:\\x{180E}|" + cls + ")";
    else if (negated && has_S && !has_s) out += "(?:" + kNot180E + cls + ")";
    else out += cls;
    i = j;
  }
  return out;
}

class Regex {
 public:
  static StatusOr<std::shared_ptr<const Regex>> Compile(const std::string& pattern) {
    const std::string translated = TranslateOnigPattern(pattern);
    int code = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &code, &offset, nullptr);
    if (!re) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(code, buf, sizeof(buf));
      return InvalidArgument(fmt::format("regex does not compile: {}", reinterpret_cast<const char*>(buf)));
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // best effort: the interpreter is used when JIT is unavailable
    return std::shared_ptr<const Regex>(new Regex(re));
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Oniguruma's find_iter as the onig crate drives it: leftmost matches, searching on from the end
  // of the last one; an empty match right at the end of the previous match is skipped by one char.
  Status FindAll(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    if (!md) return Internal("out of memory (PCRE2 match data)");
    size_t last_end = 0;
    bool have_last = false;
    size_t last_match_end = 0;
    Status status;
    while (last_end <= s.size()) {
      int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), last_end, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), last_end, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                         nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(rc, buf, sizeof(buf));
        status = Internal(fmt::format("regex match failed: {}", reinterpret_cast<const char*>(buf)));
        break;
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t b = ov[0], e = std::max(ov[0], ov[1]);
      if (b == e && have_last && last_match_end == e) {
        last_end += last_end < s.size() ? Utf8Len(static_cast<unsigned char>(s[last_end])) : 1;
        continue;
      }
      last_end = e;
      have_last = true;
      last_match_end = e;
      out->emplace_back(b, e);
    }
    pcre2_match_data_free(md);
    return status;
  }

 private:
  explicit Regex(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
};

// A Split / Replace pattern: {"String": s} (literal) or {"Regex": r}.
struct Pattern {
  std::string literal;
  std::shared_ptr<const Regex> regex;
};

struct Span {
  size_t b, e;
  bool match;
};

// HF's Pattern::find_matches: spans covering the whole string, each flagged match or not.
Status FindMatches(const Pattern& p, std::string_view s, std::vector<Span>* out) {
  out->clear();
  if (s.empty()) {
    out->push_back({0, 0, false});
    return Status::Ok();
  }
  std::vector<std::pair<size_t, size_t>> m;
  if (p.regex) {
    OPFUSE_RETURN_IF_ERROR(p.regex->FindAll(s, &m));
  } else {
    for (size_t pos = s.find(p.literal); pos != std::string_view::npos; pos = s.find(p.literal, pos + p.literal.size()))
      m.emplace_back(pos, pos + p.literal.size());
  }
  size_t prev = 0;
  for (const auto& [b, e] : m) {
    if (prev != b) out->push_back({prev, b, false});
    out->push_back({b, e, true});
    prev = e;
  }
  if (prev != s.size()) out->push_back({prev, s.size(), false});
  return Status::Ok();
}

// ------------------------------------------------------------------------------------------ pipeline

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class PrependScheme { kAlways, kFirst, kNever };

// One piece of the input on its way to the model: text, or an added token already resolved.
struct Piece {
  std::string text;
  int32_t id = -1;      // >= 0: an added token, not processed further
  bool origin = false;  // starts at byte 0 of the original input (Metaspace prepend_scheme "first")
};

// NormalizedString::split: the pieces of `text` kept under `behavior`, empty ones dropped.
void SplitBy(const Piece& piece, const std::vector<Span>& spans, Behavior behavior, std::vector<Piece>* out) {
  struct Keep {
    size_t b, e;
    bool remove;
  };
  std::vector<Keep> keep;
  switch (behavior) {
    case Behavior::kIsolated:
      for (const Span& s : spans) keep.push_back({s.b, s.e, false});
      break;
    case Behavior::kRemoved:
      for (const Span& s : spans) keep.push_back({s.b, s.e, s.match});
      break;
    case Behavior::kContiguous: {
      bool prev = false;
      for (const Span& s : spans) {
        if (s.match == prev && !keep.empty()) keep.back().e = s.e;
        else keep.push_back({s.b, s.e, false});
        prev = s.match;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool prev = false;
      for (const Span& s : spans) {
        if (s.match && !prev && !keep.empty()) keep.back().e = s.e;
        else keep.push_back({s.b, s.e, false});
        prev = s.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.match && !prev && !keep.empty()) keep.back().b = s.b;
        else keep.push_back({s.b, s.e, false});
        prev = s.match;
      }
      std::reverse(keep.begin(), keep.end());
      break;
    }
  }
  for (const Keep& k : keep) {
    if (k.remove || k.e <= k.b) continue;
    out->push_back({piece.text.substr(k.b, k.e - k.b), -1, piece.origin && k.b == 0});
  }
}

struct NormOp {
  enum Kind { kNFC, kPrepend, kReplace } kind;
  std::string text;  // Prepend: the prefix; Replace: the content
  Pattern pattern;   // Replace
};

struct PreOp {
  enum Kind { kSplit, kByteLevel, kMetaspace } kind;
  Pattern pattern;  // Split
  Behavior behavior = Behavior::kIsolated;
  bool add_prefix_space = false, use_regex = false;  // ByteLevel
  std::string replacement;                             // Metaspace (one char, UTF-8)
  PrependScheme prepend = PrependScheme::kAlways;
  bool split = true;
};

struct DecOp {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  Pattern pattern;      // Replace
  std::string content;  // Replace
  char32_t ch = 0;      // Strip: content; Metaspace: replacement
  size_t start = 0, stop = 0;
  PrependScheme prepend = PrependScheme::kAlways;
};

struct AddedToken {
  std::string content, normalized_content;  // normalized_content: what the normalized trie matches
  int32_t id = 0;
  bool special = false, lstrip = false, rstrip = false, normalized = true;
};

// Leftmost-longest, non-overlapping matching of added tokens (HF: Aho-Corasick, LeftmostLongest).
class AddedMatcher {
 public:
  void Add(std::string pattern, int token) {
    by_first_[static_cast<unsigned char>(pattern[0])].push_back(static_cast<int>(patterns_.size()));
    patterns_.emplace_back(std::move(pattern), token);
  }
  void Finish() {
    for (auto& v : by_first_)
      std::sort(v.begin(), v.end(), [&](int a, int b) { return patterns_[a].first.size() > patterns_[b].first.size(); });
  }
  bool empty() const { return patterns_.empty(); }
  struct Match {
    size_t b, e;
    int token;
  };
  void Find(std::string_view s, std::vector<Match>* out) const {
    out->clear();
    for (size_t pos = 0; pos < s.size();) {
      const Match* best = nullptr;
      Match m{};
      for (int k : by_first_[static_cast<unsigned char>(s[pos])]) {
        const std::string& p = patterns_[k].first;
        if (s.compare(pos, p.size(), p) == 0) {  // longest first: the first hit wins
          m = {pos, pos + p.size(), patterns_[k].second};
          best = &m;
          break;
        }
      }
      if (best) {
        out->push_back(m);
        pos = m.e;
      } else {
        ++pos;
      }
    }
  }

 private:
  std::vector<std::pair<std::string, int>> patterns_;
  std::array<std::vector<int>, 256> by_first_;
};

}  // namespace

// ------------------------------------------------------------------------------------------ Impl

struct JsonBpeTokenizer::Impl {
  // model (BPE)
  std::unordered_map<std::string, int32_t> vocab;
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges;  // (left << 32 | right) -> (rank, merged id)
  std::optional<int32_t> unk_id;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  std::array<int32_t, 256> byte_ids{};  // "<0xAB>" tokens, -1 when absent
  // ids
  std::vector<std::string> id_to_token;
  std::vector<uint8_t> id_known;
  // added tokens
  std::vector<AddedToken> added;
  std::unordered_map<std::string, int> added_by_content;
  std::unordered_map<int32_t, int> added_by_id;
  AddedMatcher raw_matcher, normalized_matcher;
  // pipeline
  bool has_normalizer = false;
  std::vector<NormOp> normalizers;
  std::vector<PreOp> pre_tokenizers;
  bool has_decoder = false;
  std::vector<DecOp> decoders;
  // BOS/EOS
  std::optional<int32_t> template_bos, config_bos, config_eos, bos_prepend;
  bool clean_up_spaces = false;  // tokenizer_config.json's clean_up_tokenization_spaces
  // per-word cache
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  std::optional<int32_t> TokenToId(std::string_view t) const {
    if (auto it = added_by_content.find(std::string(t)); it != added_by_content.end()) return added[it->second].id;
    if (auto it = vocab.find(std::string(t)); it != vocab.end()) return it->second;
    return std::nullopt;
  }

  Status Normalize(std::string& s) const {
    for (const NormOp& op : normalizers) {
      switch (op.kind) {
        case NormOp::kNFC: {
          OPFUSE_ASSIGN_OR_RETURN(s, Nfc(s));
          break;
        }
        case NormOp::kPrepend:
          if (!s.empty()) s = op.text + s;
          break;
        case NormOp::kReplace: {
          std::vector<Span> spans;
          OPFUSE_RETURN_IF_ERROR(FindMatches(op.pattern, s, &spans));
          std::string r;
          for (const Span& sp : spans) r += sp.match ? std::string_view(op.text) : std::string_view(s).substr(sp.b, sp.e - sp.b);
          s = std::move(r);
          break;
        }
      }
    }
    return Status::Ok();
  }

  // AddedVocabulary::find_matches + split_with_indices on one piece.
  void SplitAdded(const Piece& piece, const AddedMatcher& matcher, std::vector<Piece>* out) const {
    if (matcher.empty() || piece.text.empty()) {
      if (!piece.text.empty()) out->push_back(piece);
      return;
    }
    const std::string_view s = piece.text;
    std::vector<AddedMatcher::Match> matches;
    matcher.Find(s, &matches);
    auto push = [&](size_t b, size_t e, int32_t id) {
      if (e > b) out->push_back({std::string(s.substr(b, e - b)), id, piece.origin && b == 0});
    };
    size_t start_offset = 0;
    for (const auto& m : matches) {
      const AddedToken& t = added[m.token];
      size_t start = m.b, stop = m.e;
      if (t.lstrip) start = std::max(start - TrailingWhiteSpace(s.substr(0, start)), start_offset);
      if (t.rstrip) stop += LeadingWhiteSpace(s.substr(stop));
      if (start_offset < start) push(start_offset, start, -1);
      push(start, stop, t.id);
      start_offset = stop;
    }
    if (start_offset < s.size()) push(start_offset, s.size(), -1);
  }

  Status PreTokenize(std::vector<Piece>& pieces) const {
    std::vector<Span> spans;
    for (const PreOp& op : pre_tokenizers) {
      std::vector<Piece> next;
      for (Piece& p : pieces) {
        if (p.id >= 0) {
          next.push_back(std::move(p));
          continue;
        }
        switch (op.kind) {
          case PreOp::kSplit:
            OPFUSE_RETURN_IF_ERROR(FindMatches(op.pattern, p.text, &spans));
            SplitBy(p, spans, op.behavior, &next);
            break;
          case PreOp::kByteLevel: {
            if (op.add_prefix_space && !p.text.empty() && p.text[0] != ' ') p.text.insert(0, 1, ' ');
            std::vector<Piece> parts;
            if (op.use_regex) {
              static const auto gpt2 = Regex::Compile(kGpt2Regex);
              if (!gpt2.ok()) return Internal("GPT-2 regex: " + gpt2.status().message());
              OPFUSE_RETURN_IF_ERROR(FindMatches(Pattern{"", *gpt2}, p.text, &spans));
              SplitBy(p, spans, Behavior::kIsolated, &parts);
            } else if (!p.text.empty()) {
              parts.push_back(std::move(p));
            }
            for (Piece& part : parts) {
              std::string mapped;
              mapped.reserve(part.text.size() * 2);
              for (unsigned char c : part.text) mapped += ByteToUtf8()[c];
              part.text = std::move(mapped);
              next.push_back(std::move(part));
            }
            break;
          }
          case PreOp::kMetaspace: {
            std::string t;
            for (char c : p.text) {
              if (c == ' ') t += op.replacement;
              else t += c;
            }
            const bool starts = t.compare(0, op.replacement.size(), op.replacement) == 0;
            if (!t.empty() && !starts &&
                (op.prepend == PrependScheme::kAlways || (op.prepend == PrependScheme::kFirst && p.origin)))
              t = op.replacement + t;
            Piece q{std::move(t), -1, p.origin};
            if (op.split) {
              OPFUSE_RETURN_IF_ERROR(FindMatches(Pattern{op.replacement, nullptr}, q.text, &spans));
              SplitBy(q, spans, Behavior::kMergedWithNext, &next);
            } else if (!q.text.empty()) {
              next.push_back(std::move(q));
            }
            break;
          }
        }
      }
      pieces = std::move(next);
    }
    return Status::Ok();
  }

  // BPE::merge_word + Word::merge_all.
  void MergeWord(std::string_view w, std::vector<int32_t>* out) const {
    struct Sym {
      int32_t c;
      int64_t prev, next;
      size_t len;
    };
    std::vector<Sym> syms;
    auto add = [&](int32_t c, size_t len) {
      const int64_t n = static_cast<int64_t>(syms.size());
      if (n > 0) syms.back().next = n;
      syms.push_back({c, n - 1, -1, len});
    };
    bool unk = false;  // a pending unknown-token symbol
    int32_t unk_c = 0;
    size_t unk_len = 0;
    std::string key;
    for (size_t i = 0; i < w.size();) {
      const size_t n = std::min(Utf8Len(static_cast<unsigned char>(w[i])), w.size() - i);
      key.assign(w.substr(i, n));
      if (auto it = vocab.find(key); it != vocab.end()) {
        if (unk) add(unk_c, unk_len), unk = false;
        add(it->second, n);
      } else {
        bool done = false;
        if (byte_fallback) {
          bool all = true;
          for (unsigned char c : key) all = all && byte_ids[c] >= 0;
          if (all) {
            for (unsigned char c : key) add(byte_ids[c], 1);
            done = true;  // a pending unk stays pending, as in HF
          }
        }
        if (!done && unk_id) {
          if (unk && fuse_unk) {
            unk_len += n;
          } else {
            if (unk) add(unk_c, unk_len);
            unk = true, unk_c = *unk_id, unk_len = n;
          }
        }
      }
      i += n;
    }
    if (unk) add(unk_c, unk_len);

    struct Merge {
      size_t pos;
      uint32_t rank;
      int32_t new_id;
    };
    // Lowest rank first, then leftmost position (HF's Merge ordering).
    auto later = [](const Merge& a, const Merge& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
    std::priority_queue<Merge, std::vector<Merge>, decltype(later)> queue(later);
    auto lookup = [&](int32_t a, int32_t b) -> const std::pair<uint32_t, int32_t>* {
      auto it = merges.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b));
      return it == merges.end() ? nullptr : &it->second;
    };
    for (size_t k = 0; k + 1 < syms.size(); ++k)
      if (const auto* m = lookup(syms[k].c, syms[k + 1].c)) queue.push({k, m->first, m->second});
    while (!queue.empty()) {
      const Merge top = queue.top();
      queue.pop();
      Sym& cur = syms[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      const size_t next_pos = static_cast<size_t>(cur.next);
      const Sym right = syms[next_pos];
      const auto* target = lookup(cur.c, right.c);
      if (!target || target->second != top.new_id) continue;  // an expired entry
      cur.c = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      syms[next_pos].len = 0;
      if (right.next > -1 && static_cast<size_t>(right.next) < syms.size()) syms[right.next].prev = static_cast<int64_t>(top.pos);
      if (cur.prev >= 0) {
        if (const auto* m = lookup(syms[cur.prev].c, cur.c)) queue.push({static_cast<size_t>(cur.prev), m->first, m->second});
      }
      if (cur.next >= 0 && static_cast<size_t>(cur.next) < syms.size()) {
        if (const auto* m = lookup(cur.c, syms[cur.next].c)) queue.push({top.pos, m->first, m->second});
      }
    }
    for (const Sym& s : syms)
      if (s.len != 0) out->push_back(s.c);
  }

  void Model(std::string_view w, std::vector<int32_t>* out) const {
    if (w.empty()) return;
    if (ignore_merges) {
      if (auto it = vocab.find(std::string(w)); it != vocab.end()) {
        out->push_back(it->second);
        return;
      }
    }
    const bool cacheable = w.size() < kCacheMaxWordBytes;
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mu);
      if (auto it = cache.find(std::string(w)); it != cache.end()) {
        out->insert(out->end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids;
    MergeWord(w, &ids);
    out->insert(out->end(), ids.begin(), ids.end());
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mu);
      if (cache.size() < kCacheCapacity) cache.emplace(std::string(w), std::move(ids));
    }
  }

  Status DecodeChain(std::vector<std::string>& tokens) const {
    for (const DecOp& op : decoders) {
      std::vector<std::string> next;
      switch (op.kind) {
        case DecOp::kByteLevel: {
          std::string bytes;
          for (const std::string& t : tokens) {
            std::string mapped;
            bool ok = true;
            for (size_t i = 0; i < t.size() && ok;) {
              const int b = CharToByte(NextCodePoint(t, i));
              if (b < 0) ok = false;
              else mapped += static_cast<char>(b);
            }
            bytes += ok ? mapped : t;
          }
          next.push_back(Utf8Lossy(bytes));
          break;
        }
        case DecOp::kReplace: {
          std::vector<Span> spans;
          for (const std::string& t : tokens) {
            OPFUSE_RETURN_IF_ERROR(FindMatches(op.pattern, t, &spans));
            std::string r;
            for (const Span& sp : spans) r += sp.match ? std::string_view(op.content) : std::string_view(t).substr(sp.b, sp.e - sp.b);
            next.push_back(std::move(r));
          }
          break;
        }
        case DecOp::kByteFallback: {
          std::string pending;
          auto flush = [&] {
            if (pending.empty()) return;
            if (FirstInvalidUtf8(pending) == std::string_view::npos) next.push_back(pending);
            else
              for (size_t k = 0; k < pending.size(); ++k) next.push_back("\xEF\xBF\xBD");
            pending.clear();
          };
          for (std::string& t : tokens) {
            std::optional<int> byte;
            if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') byte = ParseHexByte(t.substr(3, 2));
            if (byte) {
              pending += static_cast<char>(*byte);
            } else {
              flush();
              next.push_back(std::move(t));
            }
          }
          flush();
          break;
        }
        case DecOp::kFuse: {
          std::string all;
          for (const std::string& t : tokens) all += t;
          next.push_back(std::move(all));
          break;
        }
        case DecOp::kStrip: {
          for (const std::string& t : tokens) {
            const std::vector<char32_t> cps = CodePoints(t);
            size_t start_cut = 0, stop_cut = cps.size();
            for (size_t i = 0; i < std::min(op.start, cps.size()) && cps[i] == op.ch; ++i) start_cut = i + 1;
            for (size_t i = 0; i < std::min(op.stop, cps.size()) && cps[cps.size() - i - 1] == op.ch; ++i) stop_cut = cps.size() - i - 1;
            std::string r;
            for (size_t i = start_cut; i < stop_cut; ++i) AppendUtf8(r, cps[i]);
            next.push_back(std::move(r));
          }
          break;
        }
        case DecOp::kMetaspace: {
          for (size_t k = 0; k < tokens.size(); ++k) {
            std::string r;
            for (size_t i = 0; i < tokens[k].size();) {
              const char32_t c = NextCodePoint(tokens[k], i);
              if (c != op.ch) AppendUtf8(r, c);
              else if (k != 0 || op.prepend == PrependScheme::kNever) r += ' ';
            }
            next.push_back(std::move(r));
          }
          break;
        }
      }
      tokens = std::move(next);
    }
    return Status::Ok();
  }

  // Rust's u8::from_str_radix(s, 16) for a 2-byte s: two hex digits, or '+' and one.
  static std::optional<int> ParseHexByte(std::string_view s) {
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (s.size() != 2) return std::nullopt;
    if (s[0] == '+') return hex(s[1]) >= 0 ? std::optional<int>(hex(s[1])) : std::nullopt;
    if (hex(s[0]) < 0 || hex(s[1]) < 0) return std::nullopt;
    return hex(s[0]) * 16 + hex(s[1]);
  }
};

// ------------------------------------------------------------------------------------------ loading

namespace {

std::string TypeName(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "an invalid value";
  }
}

// A short rendering of a value for messages.
std::string Show(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::string Join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }
std::string Index(const std::string& path, size_t i) { return fmt::format("{}[{}]", path, i); }

class Loader {
 public:
  Loader(JsonBpeTokenizer::Impl& impl, std::string label) : t_(impl), label_(std::move(label)) {}

  Status Bad(const std::string& path, const std::string& msg) const {
    // Tokens and keys are the file's text (a token may be a newline): the message is made one line.
    return InvalidArgument(OneLine(path.empty() ? fmt::format("{}: {}", label_, msg) : fmt::format("{}: {}: {}", label_, path, msg)));
  }
  Status Unsupported(const std::string& path, const char* what, const std::string& type, const char* supported) const {
    return Bad(path, fmt::format("unsupported {} type \"{}\" (supported: {})", what, type, supported));
  }

  // obj[key] when present and not null; nullptr otherwise.
  static const json* Get(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  StatusOr<std::string> Str(const json& obj, const std::string& path, const char* key) const {
    const json* v = Get(obj, key);
    if (!v) return Bad(Join(path, key), "missing (expected a string)");
    if (!v->is_string()) return Bad(Join(path, key), "expected a string, got " + TypeName(*v));
    return v->get<std::string>();
  }
  StatusOr<bool> Bool(const json& obj, const std::string& path, const char* key, bool dflt) const {
    const json* v = Get(obj, key);
    if (!v) return dflt;
    if (!v->is_boolean()) return Bad(Join(path, key), "expected true or false, got " + TypeName(*v));
    return v->get<bool>();
  }
  StatusOr<size_t> Count(const json& obj, const std::string& path, const char* key) const {
    const json* v = Get(obj, key);
    if (!v) return Bad(Join(path, key), "missing (expected a non-negative integer)");
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0))
      return Bad(Join(path, key), "expected a non-negative integer, got " + Show(*v));
    return static_cast<size_t>(std::min<uint64_t>(v->get<uint64_t>(), 1u << 30));
  }
  StatusOr<std::string> Type(const json& obj, const std::string& path) const {
    if (!obj.is_object()) return Bad(path, "expected an object, got " + TypeName(obj));
    return Str(obj, path, "type");
  }
  StatusOr<const json*> Array(const json& obj, const std::string& path, const char* key) const {
    const json* v = Get(obj, key);
    if (!v) return Bad(Join(path, key), "missing (expected an array)");
    if (!v->is_array()) return Bad(Join(path, key), "expected an array, got " + TypeName(*v));
    return v;
  }
  StatusOr<char32_t> OneChar(const json& obj, const std::string& path, const char* key) const {
    OPFUSE_ASSIGN_OR_RETURN(std::string s, Str(obj, path, key));
    std::vector<char32_t> cps = CodePoints(s);
    if (cps.size() != 1) return Bad(Join(path, key), fmt::format("expected one character, got \"{}\"", s));
    return cps[0];
  }

  StatusOr<Pattern> ParsePattern(const json& obj, const std::string& path) const {
    const json* p = Get(obj, "pattern");
    const std::string where = Join(path, "pattern");
    if (!p || !p->is_object() || p->size() != 1)
      return Bad(where, "expected {\"String\": ...} or {\"Regex\": ...}, got " + (p ? Show(*p) : std::string("nothing")));
    const auto it = p->begin();
    if (!it.value().is_string()) return Bad(where + "." + it.key(), "expected a string, got " + TypeName(it.value()));
    const std::string text = it.value().get<std::string>();
    if (it.key() == "String") {
      if (text.empty()) return Bad(where + ".String", "empty pattern");
      return Pattern{text, nullptr};
    }
    if (it.key() == "Regex") {
      auto re = Regex::Compile(text);
      if (!re.ok()) return Bad(where + ".Regex", fmt::format("{} in \"{}\"", re.status().message(), text));
      return Pattern{"", *re};
    }
    return Bad(where, fmt::format("unsupported pattern kind \"{}\" (supported: String, Regex)", it.key()));
  }

  Status ParseNormalizer(const json& j, const std::string& path) {
    OPFUSE_ASSIGN_OR_RETURN(std::string type, Type(j, path));
    if (type == "Sequence") {
      OPFUSE_ASSIGN_OR_RETURN(const json* list, Array(j, path, "normalizers"));
      for (size_t i = 0; i < list->size(); ++i) OPFUSE_RETURN_IF_ERROR(ParseNormalizer((*list)[i], Index(Join(path, "normalizers"), i)));
      return Status::Ok();
    }
    if (type == "NFC") {
      t_.normalizers.push_back({NormOp::kNFC, "", {}});
      return Status::Ok();
    }
    if (type == "Prepend") {
      OPFUSE_ASSIGN_OR_RETURN(std::string prefix, Str(j, path, "prepend"));
      t_.normalizers.push_back({NormOp::kPrepend, prefix, {}});
      return Status::Ok();
    }
    if (type == "Replace") {
      OPFUSE_ASSIGN_OR_RETURN(Pattern p, ParsePattern(j, path));
      OPFUSE_ASSIGN_OR_RETURN(std::string content, Str(j, path, "content"));
      t_.normalizers.push_back({NormOp::kReplace, content, p});
      return Status::Ok();
    }
    return Unsupported(path, "normalizer", type, "NFC, Prepend, Replace, Sequence");
  }

  Status ParsePreTokenizer(const json& j, const std::string& path) {
    OPFUSE_ASSIGN_OR_RETURN(std::string type, Type(j, path));
    if (type == "Sequence") {
      OPFUSE_ASSIGN_OR_RETURN(const json* list, Array(j, path, "pretokenizers"));
      for (size_t i = 0; i < list->size(); ++i)
        OPFUSE_RETURN_IF_ERROR(ParsePreTokenizer((*list)[i], Index(Join(path, "pretokenizers"), i)));
      return Status::Ok();
    }
    PreOp op{};
    if (type == "Split") {
      op.kind = PreOp::kSplit;
      OPFUSE_ASSIGN_OR_RETURN(op.pattern, ParsePattern(j, path));
      OPFUSE_ASSIGN_OR_RETURN(std::string behavior, Str(j, path, "behavior"));
      static const std::pair<const char*, Behavior> kBehaviors[] = {{"Removed", Behavior::kRemoved},
                                                                    {"Isolated", Behavior::kIsolated},
                                                                    {"MergedWithPrevious", Behavior::kMergedWithPrevious},
                                                                    {"MergedWithNext", Behavior::kMergedWithNext},
                                                                    {"Contiguous", Behavior::kContiguous}};
      auto b = std::find_if(std::begin(kBehaviors), std::end(kBehaviors), [&](const auto& e) { return behavior == e.first; });
      if (b == std::end(kBehaviors))
        return Bad(Join(path, "behavior"),
                   fmt::format("unsupported split behavior \"{}\" (supported: Removed, Isolated, MergedWithPrevious, "
                               "MergedWithNext, Contiguous)",
                               behavior));
      op.behavior = b->second;
      OPFUSE_ASSIGN_OR_RETURN(bool invert, Bool(j, path, "invert", false));
      if (invert) return Bad(Join(path, "invert"), "invert true is not supported");
    } else if (type == "ByteLevel") {
      op.kind = PreOp::kByteLevel;
      OPFUSE_ASSIGN_OR_RETURN(op.add_prefix_space, Bool(j, path, "add_prefix_space", true));
      OPFUSE_ASSIGN_OR_RETURN(op.use_regex, Bool(j, path, "use_regex", true));  // trim_offsets: offsets only
    } else if (type == "Metaspace") {
      op.kind = PreOp::kMetaspace;
      OPFUSE_ASSIGN_OR_RETURN(char32_t r, OneChar(j, path, "replacement"));
      AppendUtf8(op.replacement, r);
      OPFUSE_ASSIGN_OR_RETURN(op.prepend, Scheme(j, path));
      OPFUSE_ASSIGN_OR_RETURN(op.split, Bool(j, path, "split", true));
    } else {
      return Unsupported(path, "pre_tokenizer", type, "ByteLevel, Metaspace, Split, Sequence");
    }
    t_.pre_tokenizers.push_back(std::move(op));
    return Status::Ok();
  }

  // Metaspace's prepend_scheme (default "always"), or the legacy add_prefix_space (false: "never").
  StatusOr<PrependScheme> Scheme(const json& j, const std::string& path) const {
    PrependScheme scheme = PrependScheme::kAlways;
    if (const json* v = Get(j, "prepend_scheme")) {
      const std::string s = v->is_string() ? v->get<std::string>() : Show(*v);
      if (s == "always") scheme = PrependScheme::kAlways;
      else if (s == "first") scheme = PrependScheme::kFirst;
      else if (s == "never") scheme = PrependScheme::kNever;
      else return Bad(Join(path, "prepend_scheme"), fmt::format("unsupported value \"{}\" (supported: always, first, never)", s));
    }
    OPFUSE_ASSIGN_OR_RETURN(bool add_prefix_space, Bool(j, path, "add_prefix_space", true));
    if (!add_prefix_space) {
      if (Get(j, "prepend_scheme") && scheme != PrependScheme::kNever)
        return Bad(Join(path, "add_prefix_space"), "false contradicts prepend_scheme");
      scheme = PrependScheme::kNever;
    }
    return scheme;
  }

  Status ParseDecoder(const json& j, const std::string& path) {
    OPFUSE_ASSIGN_OR_RETURN(std::string type, Type(j, path));
    if (type == "Sequence") {
      OPFUSE_ASSIGN_OR_RETURN(const json* list, Array(j, path, "decoders"));
      for (size_t i = 0; i < list->size(); ++i) OPFUSE_RETURN_IF_ERROR(ParseDecoder((*list)[i], Index(Join(path, "decoders"), i)));
      return Status::Ok();
    }
    DecOp op{};
    if (type == "ByteLevel") {
      op.kind = DecOp::kByteLevel;
    } else if (type == "Replace") {
      op.kind = DecOp::kReplace;
      OPFUSE_ASSIGN_OR_RETURN(op.pattern, ParsePattern(j, path));
      OPFUSE_ASSIGN_OR_RETURN(op.content, Str(j, path, "content"));
    } else if (type == "ByteFallback") {
      op.kind = DecOp::kByteFallback;
    } else if (type == "Fuse") {
      op.kind = DecOp::kFuse;
    } else if (type == "Strip") {
      op.kind = DecOp::kStrip;
      OPFUSE_ASSIGN_OR_RETURN(op.ch, OneChar(j, path, "content"));
      OPFUSE_ASSIGN_OR_RETURN(op.start, Count(j, path, "start"));
      OPFUSE_ASSIGN_OR_RETURN(op.stop, Count(j, path, "stop"));
    } else if (type == "Metaspace") {
      op.kind = DecOp::kMetaspace;
      OPFUSE_ASSIGN_OR_RETURN(op.ch, OneChar(j, path, "replacement"));
      OPFUSE_ASSIGN_OR_RETURN(op.prepend, Scheme(j, path));
    } else {
      return Unsupported(path, "decoder", type, "ByteLevel, ByteFallback, Fuse, Metaspace, Replace, Strip, Sequence");
    }
    t_.decoders.push_back(std::move(op));
    return Status::Ok();
  }

  // Only the BOS matters to opfuse: the leading special token of TemplateProcessing's `single`.
  Status ParsePostProcessor(const json& j, const std::string& path, bool* seen_template) {
    OPFUSE_ASSIGN_OR_RETURN(std::string type, Type(j, path));
    if (type == "Sequence") {
      OPFUSE_ASSIGN_OR_RETURN(const json* list, Array(j, path, "processors"));
      for (size_t i = 0; i < list->size(); ++i)
        OPFUSE_RETURN_IF_ERROR(ParsePostProcessor((*list)[i], Index(Join(path, "processors"), i), seen_template));
      return Status::Ok();
    }
    if (type == "ByteLevel") return Status::Ok();  // offsets only
    if (type != "TemplateProcessing") return Unsupported(path, "post_processor", type, "ByteLevel, TemplateProcessing, Sequence");
    if (*seen_template) return Bad(path, "more than one TemplateProcessing");
    *seen_template = true;
    OPFUSE_ASSIGN_OR_RETURN(const json* single, Array(j, path, "single"));
    if (single->empty()) return Status::Ok();
    const json& first = (*single)[0];
    const std::string where = Index(Join(path, "single"), 0);
    if (!first.is_object()) return Bad(where, "expected an object, got " + TypeName(first));
    const json* special = Get(first, "SpecialToken");
    if (!special) {
      if (Get(first, "Sequence")) return Status::Ok();  // "$A ...": no BOS
      return Bad(where, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}, got " + Show(first));
    }
    if (!special->is_object()) return Bad(where + ".SpecialToken", "expected an object, got " + TypeName(*special));
    OPFUSE_ASSIGN_OR_RETURN(std::string name, Str(*special, where + ".SpecialToken", "id"));
    // The ids come from special_tokens[name].ids (HF refuses a template whose token is not there).
    const json* st = Get(j, "special_tokens");
    const auto it = st && st->is_object() ? st->find(name) : json::const_iterator();
    if (!st || !st->is_object() || it == st->end() || !it->is_object())
      return Bad(where, fmt::format("special token \"{}\" is missing from {}.special_tokens", name, path));
    const std::string ids_path = fmt::format("{}.special_tokens[\"{}\"].ids", path, name);
    const json* ids = Get(*it, "ids");
    if (!ids || !ids->is_array()) return Bad(ids_path, "expected an array of ids");
    if (ids->size() != 1) return Bad(ids_path, fmt::format("a leading special token of {} ids is not supported", ids->size()));
    if (!(*ids)[0].is_number_integer()) return Bad(ids_path, "expected an integer id, got " + Show((*ids)[0]));
    const int64_t id = (*ids)[0].get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(t_.id_known.size()) || !t_.id_known[id])
      return Bad(ids_path, fmt::format("special token \"{}\" has id {}, which names no token", name, id));
    t_.template_bos = static_cast<int32_t>(id);
    return Status::Ok();
  }

  // Assigns an id to a token; every id is in [0, kMaxId) and names one token.
  Status SetId(int64_t id, const std::string& token, const std::string& path) {
    if (id < 0 || id >= kMaxId) return Bad(path, fmt::format("id {} of \"{}\" is out of range [0, {})", id, token, kMaxId));
    if (static_cast<size_t>(id) >= t_.id_to_token.size()) {
      t_.id_to_token.resize(id + 1);
      t_.id_known.resize(id + 1, 0);
    }
    if (t_.id_known[id] && t_.id_to_token[id] != token)
      return Bad(path, fmt::format("id {} is given to both \"{}\" and \"{}\"", id, t_.id_to_token[id], token));
    t_.id_to_token[id] = token;
    t_.id_known[id] = 1;
    return Status::Ok();
  }

  Status ParseModel(const json& j) {
    const std::string path = "model";
    if (!j.is_object()) return Bad(path, "expected an object, got " + TypeName(j));
    OPFUSE_ASSIGN_OR_RETURN(std::string type, Str(j, path, "type"));
    if (type != "BPE") return Unsupported(Join(path, "type"), "model", type, "BPE");
    if (const json* d = Get(j, "dropout")) {
      if (!d->is_number() || d->get<double>() != 0.0)
        return Bad(Join(path, "dropout"), fmt::format("{} is not supported (BPE dropout makes the ids random)", Show(*d)));
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (const json* v = Get(j, key); v && !(v->is_string() && v->get<std::string>().empty()))
        return Bad(Join(path, key), fmt::format("{} is not supported (only null or \"\")", Show(*v)));
    }
    OPFUSE_ASSIGN_OR_RETURN(t_.fuse_unk, Bool(j, path, "fuse_unk", false));
    OPFUSE_ASSIGN_OR_RETURN(t_.byte_fallback, Bool(j, path, "byte_fallback", false));
    OPFUSE_ASSIGN_OR_RETURN(t_.ignore_merges, Bool(j, path, "ignore_merges", false));

    const json* vocab = Get(j, "vocab");
    if (!vocab || !vocab->is_object())
      return Bad(Join(path, "vocab"), "expected an object of token -> id, got " + (vocab ? TypeName(*vocab) : std::string("nothing")));
    t_.vocab.reserve(vocab->size());
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
      const std::string where = fmt::format("model.vocab[\"{}\"]", it.key());
      if (!it.value().is_number_integer()) return Bad(where, "expected an integer id, got " + Show(it.value()));
      if (it.value().is_number_unsigned() && it.value().get<uint64_t>() >= static_cast<uint64_t>(kMaxId))
        return Bad(where, fmt::format("id {} of \"{}\" is out of range [0, {})", it.value().get<uint64_t>(), it.key(), kMaxId));
      const int64_t id = it.value().get<int64_t>();
      OPFUSE_RETURN_IF_ERROR(SetId(id, it.key(), where));
      t_.vocab.emplace(it.key(), static_cast<int32_t>(id));
    }
    if (const json* unk = Get(j, "unk_token")) {
      if (!unk->is_string()) return Bad(Join(path, "unk_token"), "expected a string, got " + TypeName(*unk));
      auto it = t_.vocab.find(unk->get<std::string>());
      if (it == t_.vocab.end()) return Bad(Join(path, "unk_token"), fmt::format("\"{}\" is not in the vocabulary", unk->get<std::string>()));
      t_.unk_id = it->second;
    }
    t_.byte_ids.fill(-1);
    for (int b = 0; b < 256; ++b)
      if (auto it = t_.vocab.find(fmt::format("<0x{:02X}>", b)); it != t_.vocab.end()) t_.byte_ids[b] = it->second;

    OPFUSE_ASSIGN_OR_RETURN(const json* merges, Array(j, path, "merges"));
    t_.merges.reserve(merges->size());
    uint32_t rank = 0;
    for (size_t i = 0; i < merges->size(); ++i) {
      const json& m = (*merges)[i];
      const std::string where = Index("model.merges", i);
      std::string a, b;
      if (m.is_string()) {  // "a b" (tokenizers < 0.20 files)
        const std::string s = m.get<std::string>();
        if (s.rfind("#version", 0) == 0) continue;
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          return Bad(where, fmt::format("\"{}\" is not two tokens separated by one space", s));
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
        a = m[0].get<std::string>(), b = m[1].get<std::string>();
      } else {
        return Bad(where, "expected \"a b\" or [\"a\", \"b\"], got " + Show(m));
      }
      const auto ia = t_.vocab.find(a), ib = t_.vocab.find(b), iab = t_.vocab.find(a + b);
      const std::string missing = ia == t_.vocab.end() ? a : ib == t_.vocab.end() ? b : iab == t_.vocab.end() ? a + b : "";
      if (ia == t_.vocab.end() || ib == t_.vocab.end() || iab == t_.vocab.end())
        return Bad(where, fmt::format("merge (\"{}\", \"{}\"): \"{}\" is not in the vocabulary", a, b, missing));
      const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) | static_cast<uint32_t>(ib->second);
      t_.merges[key] = {rank++, iab->second};  // a repeated pair keeps its last rank, as HF's map does
    }
    return Status::Ok();
  }

  // HF assigns added tokens their ids itself: a token in the vocabulary keeps its id, the others
  // get vocab-size, vocab-size + 1, ... in file order. A file that says otherwise is refused.
  Status ParseAddedTokens(const json& list) {
    if (!list.is_array()) return Bad("added_tokens", "expected an array, got " + TypeName(list));
    int64_t next_id = static_cast<int64_t>(t_.vocab.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const json& e = list[i];
      const std::string path = Index("added_tokens", i);
      if (!e.is_object()) return Bad(path, "expected an object, got " + TypeName(e));
      AddedToken t;
      OPFUSE_ASSIGN_OR_RETURN(t.content, Str(e, path, "content"));
      if (t.content.empty()) continue;  // HF ignores empty added tokens
      OPFUSE_ASSIGN_OR_RETURN(t.special, Bool(e, path, "special", false));
      OPFUSE_ASSIGN_OR_RETURN(t.lstrip, Bool(e, path, "lstrip", false));
      OPFUSE_ASSIGN_OR_RETURN(t.rstrip, Bool(e, path, "rstrip", false));
      OPFUSE_ASSIGN_OR_RETURN(t.normalized, Bool(e, path, "normalized", true));
      OPFUSE_ASSIGN_OR_RETURN(bool single_word, Bool(e, path, "single_word", false));
      if (single_word) return Bad(Join(path, "single_word"), fmt::format("true is not supported (token \"{}\")", t.content));
      const json* idv = Get(e, "id");
      if (!idv || !idv->is_number_integer()) return Bad(Join(path, "id"), "expected an integer id");
      const int64_t file_id = idv->get<int64_t>();
      if (t_.added_by_content.count(t.content)) return Bad(path, fmt::format("\"{}\" is listed twice", t.content));
      int64_t id;
      if (auto it = t_.vocab.find(t.content); it != t_.vocab.end()) id = it->second;
      else id = next_id++;
      if (id != file_id)
        return Bad(Join(path, "id"),
                   fmt::format("\"{}\" has id {} but Hugging Face assigns it {} (in the vocabulary: its id there; "
                               "otherwise vocabulary size + position among such added tokens)",
                               t.content, file_id, id));
      OPFUSE_RETURN_IF_ERROR(SetId(id, t.content, Join(path, "id")));
      t.id = static_cast<int32_t>(id);
      t.normalized_content = t.content;
      if (t.normalized && t_.has_normalizer) OPFUSE_RETURN_IF_ERROR(t_.Normalize(t.normalized_content));
      t_.added_by_content.emplace(t.content, static_cast<int>(t_.added.size()));
      t_.added_by_id.emplace(t.id, static_cast<int>(t_.added.size()));
      t_.added.push_back(std::move(t));
    }
    // The matchers: raw content for normalized=false, normalized content for normalized=true.
    std::unordered_map<std::string, int> seen_raw, seen_norm;
    for (size_t k = 0; k < t_.added.size(); ++k) {
      const AddedToken& t = t_.added[k];
      auto& seen = t.normalized ? seen_norm : seen_raw;
      const std::string& pattern = t.normalized ? t.normalized_content : t.content;
      if (pattern.empty()) continue;
      if (auto it = seen.find(pattern); it != seen.end())
        return Bad("added_tokens",
                   fmt::format("\"{}\" and \"{}\" match the same text after normalization", t_.added[it->second].content, t.content));
      seen.emplace(pattern, static_cast<int>(k));
      (t.normalized ? t_.normalized_matcher : t_.raw_matcher).Add(pattern, static_cast<int>(k));
    }
    t_.raw_matcher.Finish();
    t_.normalized_matcher.Finish();
    return Status::Ok();
  }

  Status ParseTokenizer(const json& root) {
    if (!root.is_object()) return Bad("", "expected a JSON object at the top level, got " + TypeName(root));
    if (const json* v = Get(root, "version"); v && !(v->is_string() && v->get<std::string>() == "1.0"))
      return Bad("version", fmt::format("unsupported version {} (expected \"1.0\")", Show(*v)));
    for (const char* key : {"truncation", "padding"})
      if (const json* v = Get(root, key)) return Bad(key, fmt::format("must be null, got {} (it changes the ids)", Show(*v)));
    const json* model = Get(root, "model");
    if (!model) return Bad("model", "missing");
    OPFUSE_RETURN_IF_ERROR(ParseModel(*model));
    if (const json* n = Get(root, "normalizer")) {
      t_.has_normalizer = true;
      OPFUSE_RETURN_IF_ERROR(ParseNormalizer(*n, "normalizer"));
    }
    if (const json* p = Get(root, "pre_tokenizer")) OPFUSE_RETURN_IF_ERROR(ParsePreTokenizer(*p, "pre_tokenizer"));
    if (const json* d = Get(root, "decoder")) {
      t_.has_decoder = true;
      OPFUSE_RETURN_IF_ERROR(ParseDecoder(*d, "decoder"));
    }
    if (const json* a = Get(root, "added_tokens")) OPFUSE_RETURN_IF_ERROR(ParseAddedTokens(*a));
    bool seen_template = false;
    if (const json* pp = Get(root, "post_processor")) OPFUSE_RETURN_IF_ERROR(ParsePostProcessor(*pp, "post_processor", &seen_template));
    return Status::Ok();
  }

  // tokenizer_config.json: add_bos_token, bos_token, eos_token (a string or {"content": ...}).
  Status ParseConfig(const json& root) {
    if (!root.is_object()) return Bad("", "expected a JSON object at the top level, got " + TypeName(root));
    std::optional<int32_t>* slots[] = {&t_.config_bos, &t_.config_eos};
    const char* keys[] = {"bos_token", "eos_token"};
    for (int k = 0; k < 2; ++k) {
      const json* v = Get(root, keys[k]);
      if (!v) continue;
      std::string content;
      if (v->is_string()) {
        content = v->get<std::string>();
      } else if (v->is_object()) {
        OPFUSE_ASSIGN_OR_RETURN(content, Str(*v, keys[k], "content"));
      } else {
        return Bad(keys[k], "expected a string or {\"content\": ...}, got " + TypeName(*v));
      }
      auto id = t_.TokenToId(content);
      if (!id) return Bad(keys[k], fmt::format("\"{}\" is not a token of tokenizer.json", content));
      *slots[k] = *id;
    }
    OPFUSE_ASSIGN_OR_RETURN(t_.clean_up_spaces, Bool(root, "", "clean_up_tokenization_spaces", false));
    OPFUSE_ASSIGN_OR_RETURN(bool add_bos_present, Bool(root, "", "add_bos_token", false));
    const bool has_add_bos = Get(root, "add_bos_token") != nullptr;
    if (has_add_bos && add_bos_present) {
      t_.bos_prepend = t_.config_bos ? t_.config_bos : t_.template_bos;
      if (!t_.bos_prepend) return Bad("add_bos_token", "true, but there is no bos_token");
    } else if (has_add_bos) {
      t_.bos_prepend.reset();
    }
    return Status::Ok();
  }

 private:
  JsonBpeTokenizer::Impl& t_;
  std::string label_;
};

StatusOr<json> ParseJsonText(std::string_view text, const std::string& label) {
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) {
    // Re-run for the position; the callback-free parse above never throws.
    std::string where;
    try {
      const json strict = json::parse(text.begin(), text.end());
      (void)strict;
    } catch (const json::parse_error& e) {
      where = fmt::format(" (at byte {})", e.byte);
    } catch (...) {
    }
    return InvalidArgument(fmt::format("{}: not valid JSON{}", label, where));
  }
  return j;
}

StatusOr<std::string> ReadFile(const std::string& path) {
  return ReadFileCapped(path, kMaxJsonFileBytes);
}

}  // namespace

JsonBpeTokenizer::JsonBpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JsonBpeTokenizer::~JsonBpeTokenizer() = default;

StatusOr<std::unique_ptr<JsonBpeTokenizer>> JsonBpeTokenizer::FromStrings(std::string_view tokenizer_json, std::string_view config_json,
                                                                          const std::string& label) {
  try {
    auto impl = std::make_unique<Impl>();
    {
      OPFUSE_ASSIGN_OR_RETURN(json root, ParseJsonText(tokenizer_json, label));
      Loader loader(*impl, label);
      OPFUSE_RETURN_IF_ERROR(loader.ParseTokenizer(root));
    }
    impl->bos_prepend = impl->template_bos;
    if (!config_json.empty()) {
      const std::string config_label =
          label.size() >= 14 && label.compare(label.size() - 14, 14, "tokenizer.json") == 0
              ? label.substr(0, label.size() - 14) + "tokenizer_config.json"
              : std::string("tokenizer_config.json");
      OPFUSE_ASSIGN_OR_RETURN(json config, ParseJsonText(config_json, config_label));
      Loader loader(*impl, config_label);
      OPFUSE_RETURN_IF_ERROR(loader.ParseConfig(config));
    }
    return std::unique_ptr<JsonBpeTokenizer>(new JsonBpeTokenizer(std::move(impl)));
  } catch (const std::exception& e) {  // nlohmann or allocation: never let one escape
    return InvalidArgument(fmt::format("{}: {}", label, e.what()));
  }
}

StatusOr<std::unique_ptr<JsonBpeTokenizer>> JsonBpeTokenizer::Load(const std::string& path) {
  OPFUSE_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::string config;
  const std::filesystem::path config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::is_regular_file(config_path, ec)) {
    OPFUSE_ASSIGN_OR_RETURN(config, ReadFile(config_path.string()));
    if (config.empty()) return InvalidArgument(fmt::format("{}: empty file", config_path.string()));
  }
  return FromStrings(text, config, path);
}

namespace {

// Everything before the model: 1. added tokens that are not normalized, on the raw text;
// 2. normalize the rest, then the normalized added tokens; 3. pre-tokenize.
Status Pieces(const JsonBpeTokenizer::Impl& t, std::string_view text, std::vector<Piece>* pieces) {
  if (size_t bad = FirstInvalidUtf8(text); bad != std::string_view::npos)
    return InvalidArgument(fmt::format("text is not valid UTF-8 (byte {})", bad));
  std::vector<Piece> raw;
  t.SplitAdded(Piece{std::string(text), -1, true}, t.raw_matcher, &raw);
  for (Piece& p : raw) {
    if (p.id >= 0) {
      pieces->push_back(std::move(p));
      continue;
    }
    OPFUSE_RETURN_IF_ERROR(t.Normalize(p.text));
    t.SplitAdded(p, t.normalized_matcher, pieces);
  }
  return t.PreTokenize(*pieces);
}

}  // namespace

StatusOr<std::vector<std::string>> JsonBpeTokenizer::PreTokenize(std::string_view text) const {
  try {
    std::vector<Piece> pieces;
    OPFUSE_RETURN_IF_ERROR(Pieces(*impl_, text, &pieces));
    std::vector<std::string> out;
    for (Piece& p : pieces) out.push_back(std::move(p.text));
    return out;
  } catch (const std::exception& e) {
    return Internal(fmt::format("tokenizer.json pre-tokenize failed: {}", e.what()));
  }
}

StatusOr<std::vector<int32_t>> JsonBpeTokenizer::Encode(std::string_view text) const {
  const Impl& t = *impl_;
  try {
    std::vector<Piece> pieces;
    OPFUSE_RETURN_IF_ERROR(Pieces(t, text, &pieces));
    std::vector<int32_t> ids;
    for (const Piece& p : pieces) {
      if (p.id >= 0) ids.push_back(p.id);
      else t.Model(p.text, &ids);
    }
    return ids;
  } catch (const std::exception& e) {
    return Internal(fmt::format("tokenizer.json encode failed: {}", e.what()));
  }
}

StatusOr<std::string> JsonBpeTokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& t = *impl_;
  try {
    std::vector<std::string> tokens;
    for (int32_t id : ids) {
      if (auto it = t.added_by_id.find(id); it != t.added_by_id.end()) {
        const AddedToken& a = t.added[it->second];
        if (skip_special_tokens && a.special) continue;
        tokens.push_back(a.normalized && t.has_normalizer ? a.normalized_content : a.content);
      } else if (id >= 0 && static_cast<size_t>(id) < t.id_known.size() && t.id_known[id]) {
        tokens.push_back(t.id_to_token[id]);
      }
    }
    if (!t.has_decoder) {
      std::string out;
      for (size_t k = 0; k < tokens.size(); ++k) out += (k ? " " : "") + tokens[k];
      return out;
    }
    OPFUSE_RETURN_IF_ERROR(t.DecodeChain(tokens));
    std::string out;
    for (const std::string& s : tokens) out += s;
    return out;
  } catch (const std::exception& e) {
    return Internal(fmt::format("tokenizer.json decode failed: {}", e.what()));
  }
}

int32_t JsonBpeTokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_known.size()); }

std::optional<std::string> JsonBpeTokenizer::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_known.size() || !impl_->id_known[id]) return std::nullopt;
  return impl_->id_to_token[id];
}

std::optional<int32_t> JsonBpeTokenizer::TokenToId(std::string_view token) const { return impl_->TokenToId(token); }
std::optional<int32_t> JsonBpeTokenizer::bos_to_prepend() const { return impl_->bos_prepend; }
bool JsonBpeTokenizer::clean_up_tokenization_spaces() const { return impl_->clean_up_spaces; }

std::string CleanUpTokenizationSpaces(std::string s) {
  // transformers' PreTrainedTokenizerBase.clean_up_tokenization, in its order.
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    for (size_t j; (j = s.find(from, i)) != std::string::npos; i = j + from.size()) out.append(s, i, j - i).append(to);
    out.append(s, i, std::string::npos);
    s = std::move(out);
  }
  return s;
}

std::optional<int32_t> JsonBpeTokenizer::bos_id() const { return impl_->config_bos ? impl_->config_bos : impl_->template_bos; }
std::optional<int32_t> JsonBpeTokenizer::eos_id() const { return impl_->config_eos; }

}  // namespace opfuse
