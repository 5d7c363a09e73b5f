// `opfuse bench e2e --cases`: "[prefill=128, decode=32]" / "[prefill=128, decode=32, batch=8]"
// (repeatable, or several in one string; CLI11 may have split a "[a, b]" list at its commas). A value
// must be digits within int64, prefill >= 1 and batch >= 1; anything else is one-line InvalidArgument
// naming the text. Fuzzed by tests/fuzz/fuzz_cli_lists.cc.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "opfuse/status.h"

namespace opfuse::bench {

struct E2eCase {
  std::string label;  // "[prefill=128, decode=16]" as DESIGN.md writes it (batch shown when > 1)
  int64_t prefill = 0, decode = 0, batch = 1;
};

// One case, e.g. "prefill=128, decode=32".
StatusOr<E2eCase> ParseE2eCase(const std::string& text);
// Every case of the --cases values (each may hold several, or a fragment CLI11 split off).
StatusOr<std::vector<E2eCase>> ParseE2eCases(const std::vector<std::string>& texts);

}  // namespace opfuse::bench
