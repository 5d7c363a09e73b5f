// libFuzzer target for the cubin reader (src/jit/cubin_info.h; asan preset).
//
// Feeds arbitrary bytes to CubinRegisterCounts. It must never crash, hang or trip ASan/UBSan; every
// rejection is InvalidArgument or NotFound with a one-line message starting "cubin: "; an accepted
// file gives register counts in [0, 255] for non-empty kernel names.
// Seeds: tests/fuzz/corpus_fuzz_cubin/ (nvcc -cubin -arch=sm_90 of two small kernels).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "jit/cubin_info.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto regs = opfuse::jit::CubinRegisterCounts(bytes);
  if (!regs.ok()) {
    const auto code = regs.status().code();
    const std::string& m = regs.status().message();
    if ((code != opfuse::StatusCode::kInvalidArgument && code != opfuse::StatusCode::kNotFound) ||
        m.find('\n') != std::string::npos || m.rfind("cubin: ", 0) != 0) {
      std::fprintf(stderr, "bad rejection: %s\n", regs.status().ToString().c_str());
      std::abort();
    }
    return 0;
  }
  for (const auto& [name, n] : *regs) {
    if (n < 0 || n > 255) {
      std::fprintf(stderr, "register count %d for '%s'\n", n, name.c_str());
      std::abort();
    }
  }
  return 0;
}
