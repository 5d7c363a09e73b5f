// See quote.h.
#include "util/quote.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace opfuse {
namespace {

std::string JsonString(std::string_view s) {
  // ensure_ascii: control characters and every non-ASCII code point become \uXXXX escapes;
  // invalid UTF-8 becomes U+FFFD instead of throwing.
  return nlohmann::json(std::string(s)).dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string Quote(std::string_view s) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x7f && c != '\'' && c != '\\';
  });
  return plain ? "'" + std::string(s) + "'" : JsonString(s);
}

std::string PathKey(std::string_view key) {
  const bool plain = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || c == '_';
  });
  return plain ? std::string(key) : JsonString(key);
}

std::string OneLine(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (char c : message) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      static const char* kHex = "0123456789abcdef";
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

}  // namespace opfuse
