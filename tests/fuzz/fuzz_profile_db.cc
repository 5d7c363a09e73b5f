// libFuzzer target for the profile database loader (src/scheduler/profile_db.h; asan preset).
//
// Feeds arbitrary bytes to ProfileDb::Parse. It must never crash, hang or trip ASan/UBSan; every
// rejection is InvalidArgument with a one-line message; an accepted profile must survive
// save-format round trips: Parse(ToJson(db)) succeeds and prints the same text again.
// Seeds: tests/fuzz/corpus/profile_*.json (plus the shared seed folders of tests/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "scheduler/profile_db.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto db = opfuse::scheduler::ProfileDb::Parse(text, "fuzz");
  if (!db.ok()) {
    const std::string& m = db.status().message();
    if (db.status().code() != opfuse::StatusCode::kInvalidArgument || m.find('\n') != std::string::npos ||
        m.rfind("fuzz: ", 0) != 0) {
      std::fprintf(stderr, "bad rejection: %s\n", db.status().ToString().c_str());
      std::abort();
    }
    return 0;
  }
  const std::string printed = db->ToJson();
  auto again = opfuse::scheduler::ProfileDb::Parse(printed, "reprint");
  if (!again.ok() || again->ToJson() != printed) {
    std::fprintf(stderr, "round trip failed: %s\n%s\n", again.ok() ? "text differs" : again.status().ToString().c_str(),
                 printed.c_str());
    std::abort();
  }
  return 0;
}
