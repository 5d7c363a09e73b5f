// libFuzzer target for the .ofg text parser (built by the asan preset: OPFUSE_FUZZ=ON).
//
// Feeds arbitrary bytes to ParseGraph. The parser must never crash, hang or trip ASan/UBSan on
// any input; when the input parses, the printed graph must read back to the same text:
//   print(parse(print(g))) == print(g)     (and the reprint must parse at all)
// A mismatch aborts, so libFuzzer saves the input as a crash. Seeds: tests/fuzz/corpus/ and
// examples/graphs/ (see tests/CMakeLists.txt and scripts/test.sh).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "opfuse/graph.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto g = opfuse::ParseGraph(text);
  if (!g.ok()) {
    // Every parse error is one "line N: ..." message.
    const std::string& m = g.status().message();
    if (m.rfind("line ", 0) != 0 || m.find('\n') != std::string::npos) {
      std::fprintf(stderr, "parse error without 'line N:' prefix or with a newline: %s\n", m.c_str());
      std::abort();
    }
    return 0;
  }
  const std::string printed = opfuse::PrintGraph(*g);
  auto g2 = opfuse::ParseGraph(printed);
  if (!g2.ok()) {
    std::fprintf(stderr, "printed graph does not parse: %s\n--- printed ---\n%s", g2.status().message().c_str(),
                 printed.c_str());
    std::abort();
  }
  const std::string reprinted = opfuse::PrintGraph(*g2);
  if (reprinted != printed) {
    std::fprintf(stderr, "round trip mismatch\n--- printed ---\n%s--- reprinted ---\n%s", printed.c_str(),
                 reprinted.c_str());
    std::abort();
  }
  return 0;
}
