// libopfuse_sentencepiece.so: a dlopen()ed module wrapping Debian's libsentencepiece behind a plain C
// interface (model/tokenizer.cc loads it).
//
// Why a module and not a direct link: opfuse binaries must start on machines without Debian
// libraries (the GPU machines; see "fmt header-only" in CMakeLists.txt), so libopfuse may not carry
// a DT_NEEDED on libsentencepiece.so.0. Only this module does; when it or the library is missing,
// the tokenizer falls back to token ids and says why. Only C types cross the boundary, so the
// module's libstdc++ and the (statically linked) one of the binary never share an object.
// Built only when SentencePiece is found (CMakeLists.txt); excluded from libopfuse's glob.
#include <sentencepiece_processor.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {
void CopyError(const std::string& m, char* err, size_t errlen) {
  if (!err || errlen == 0) return;
  std::strncpy(err, m.c_str(), errlen - 1);
  err[errlen - 1] = '\0';
}
}  // namespace

extern "C" {

// ABI version of this C interface; tokenizer.cc refuses a module with another one.
int opfuse_spm_abi_version() { return 1; }

void* opfuse_spm_load(const char* path, char* err, size_t errlen) {
  auto p = std::make_unique<sentencepiece::SentencePieceProcessor>();
  auto s = p->Load(path);
  if (!s.ok()) {
    CopyError(s.ToString(), err, errlen);
    return nullptr;
  }
  return p.release();
}

void opfuse_spm_free(void* h) { delete static_cast<sentencepiece::SentencePieceProcessor*>(h); }

int opfuse_spm_vocab_size(void* h) { return static_cast<sentencepiece::SentencePieceProcessor*>(h)->GetPieceSize(); }
int opfuse_spm_bos_id(void* h) { return static_cast<sentencepiece::SentencePieceProcessor*>(h)->bos_id(); }
int opfuse_spm_eos_id(void* h) { return static_cast<sentencepiece::SentencePieceProcessor*>(h)->eos_id(); }

// Encodes text into at most `cap` ids; returns the number of ids needed (call again with a larger
// buffer when it exceeds cap), or -1 on error (message in err).
long opfuse_spm_encode(void* h, const char* text, size_t len, int* out, size_t cap, char* err, size_t errlen) {
  std::vector<int> ids;
  auto s = static_cast<sentencepiece::SentencePieceProcessor*>(h)->Encode(std::string(text, len), &ids);
  if (!s.ok()) {
    CopyError(s.ToString(), err, errlen);
    return -1;
  }
  for (size_t i = 0; i < ids.size() && i < cap; ++i) out[i] = ids[i];
  return static_cast<long>(ids.size());
}

// Decodes ids into at most `cap` bytes (not NUL-terminated); returns the byte length needed, or -1.
long opfuse_spm_decode(void* h, const int* ids, size_t n, char* out, size_t cap, char* err, size_t errlen) {
  std::string text;
  auto s = static_cast<sentencepiece::SentencePieceProcessor*>(h)->Decode(std::vector<int>(ids, ids + n), &text);
  if (!s.ok()) {
    CopyError(s.ToString(), err, errlen);
    return -1;
  }
  std::memcpy(out, text.data(), std::min(cap, text.size()));
  return static_cast<long>(text.size());
}

}  // extern "C"
