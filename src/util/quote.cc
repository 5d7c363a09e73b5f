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

}  // namespace opfuse
