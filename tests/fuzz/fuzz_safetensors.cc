// libFuzzer target for the safetensors header validator (built by the asan preset: OPFUSE_FUZZ=ON).
//
// Feeds arbitrary bytes, as a whole file, to ParseSafetensorsHeader — the code SafetensorsFile::Open
// runs on the mmap before anything is used. It must never crash, hang or trip ASan/UBSan. When the
// header is accepted, the promises the reader makes must hold, or the target aborts (libFuzzer then
// saves the input): every tensor lies inside the data section, its byte span equals shape product ×
// dtype size, and sorted by offset the tensors tile the data section exactly. Reading every byte of
// every tensor makes ASan catch any span that escapes the buffer. Rejections must be one line.
// Seeds: tests/fuzz/corpus_fuzz_safetensors/ (see tests/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Copy into an exactly-sized heap buffer so ASan sees any read past the end.
  std::vector<uint8_t> buf(data, data + size);
  auto h = opfuse::ParseSafetensorsHeader(std::span<const uint8_t>(buf.data(), buf.size()), "fuzz");
  if (!h.ok()) {
    if (h.status().message().find('\n') != std::string::npos) {
      std::fprintf(stderr, "multi-line error: %s\n", h.status().message().c_str());
      std::abort();
    }
    return 0;
  }
  const uint64_t data_size = size - h->data_start;
  if (h->data_start != 8 + h->header_len || h->data_start > size) std::abort();
  uint64_t pos = 0;
  unsigned sum = 0;
  for (const auto& t : h->tensors) {
    uint64_t n = static_cast<uint64_t>(opfuse::StDTypeSize(t.dtype));
    for (auto d : t.shape) {
      if (d < 0) std::abort();
      n *= static_cast<uint64_t>(d);
    }
    if (t.begin != pos || t.end < t.begin || t.end > data_size || t.end - t.begin != n) {
      std::fprintf(stderr, "accepted tensor '%s' breaks the layout invariants\n", t.name.c_str());
      std::abort();
    }
    for (uint64_t i = t.begin; i < t.end; ++i) sum += buf[h->data_start + i];
    pos = t.end;
  }
  if (pos != data_size) std::abort();
  return static_cast<int>(sum & 0);
}
