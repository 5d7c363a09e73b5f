// Parser of `opfuse bench e2e --cases` (see e2e_cases.h).
#include "bench/e2e_cases.h"

#include <charconv>
#include <string_view>

#include <fmt/format.h>

#include "util/quote.h"

namespace opfuse::bench {

namespace {
bool Space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
std::string_view Trim(std::string_view s) {
  while (!s.empty() && Space(s.front())) s.remove_prefix(1);
  while (!s.empty() && Space(s.back())) s.remove_suffix(1);
  return s;
}
}  // namespace

StatusOr<E2eCase> ParseE2eCase(const std::string& text) {
  std::string_view body = Trim(text);
  if (!body.empty() && body.front() == '[') body.remove_prefix(1);
  body = Trim(body);
  if (!body.empty() && body.back() == ']') body.remove_suffix(1);
  E2eCase c;
  bool have_prefill = false;
  size_t pos = 0;
  while (pos <= body.size()) {
    size_t comma = body.find(',', pos);
    if (comma == std::string_view::npos) comma = body.size();
    const std::string_view part = Trim(body.substr(pos, comma - pos));
    const size_t eq = part.find('=');
    const std::string_view key = eq == std::string_view::npos ? part : Trim(part.substr(0, eq));
    const std::string_view digits = eq == std::string_view::npos ? std::string_view() : Trim(part.substr(eq + 1));
    const bool known = key == "prefill" || key == "decode" || key == "batch";
    const bool number = !digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos;
    if (!known || !number)
      return InvalidArgument(
          fmt::format("--cases {}: {} is not prefill=N, decode=N or batch=N", Quote(text), Quote(std::string(part))));
    // Digits only, so the one failure left is a value beyond int64: out of range.
    int64_t v = 0;
    if (auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v); ec != std::errc())
      return InvalidArgument(fmt::format("--cases {}: {}={} is out of range", Quote(text), key, digits));
    if (key == "prefill") c.prefill = v, have_prefill = true;
    else if (key == "decode") c.decode = v;
    else c.batch = v;
    pos = comma + 1;
  }
  if (!have_prefill || c.prefill < 1) return InvalidArgument(fmt::format("--cases {}: prefill must be >= 1", Quote(text)));
  if (c.batch < 1) return InvalidArgument(fmt::format("--cases {}: batch must be >= 1", Quote(text)));
  c.label = c.batch > 1 ? fmt::format("[prefill={}, decode={}, batch={}]", c.prefill, c.decode, c.batch)
                        : fmt::format("[prefill={}, decode={}]", c.prefill, c.decode);
  return c;
}

StatusOr<std::vector<E2eCase>> ParseE2eCases(const std::vector<std::string>& texts) {
  // CLI11 reads "[a, b]" as a list and splits it: join everything back, then cut before each prefill=.
  std::string joined;
  for (const auto& t : texts) joined += (joined.empty() ? "" : ",") + t;
  for (char& ch : joined)
    if (ch == '[' || ch == ']') ch = ',';
  std::vector<std::string> split;
  for (size_t pos = joined.find("prefill"); pos != std::string::npos;) {
    const size_t next = joined.find("prefill", pos + 1);
    std::string one = joined.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    while (!one.empty() && (one.back() == ',' || one.back() == ' ')) one.pop_back();
    split.push_back(one);
    pos = next;
  }
  if (split.empty() || joined.substr(0, joined.find("prefill")).find_first_not_of(", ") != std::string::npos)
    return InvalidArgument(fmt::format("--cases {}: each case starts with prefill=N", Quote(joined)));
  std::vector<E2eCase> cases;
  for (const auto& t : split) {
    OPFUSE_ASSIGN_OR_RETURN(E2eCase c, ParseE2eCase(t));
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace opfuse::bench
