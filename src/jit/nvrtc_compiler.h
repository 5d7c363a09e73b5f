// NVRTC: CUDA C source -> CUBIN for one GPU architecture. Needs no GPU, so CI compiles every
// generated kernel for sm_90. When the build has no NVRTC (no CUDA toolkit), CompileCuda returns
// Unavailable with that reason, and callers fall back (logged) to the unfused path.
#pragma once
#include <string>
#include <vector>

#include "opfuse/status.h"

namespace opfuse::jit {

struct NvrtcOutput {
  std::string cubin;
  std::string log;
  double compile_ms = 0;
};

bool NvrtcAvailable();
// "nvrtc-13.0" (or "nvrtc-none"); part of the cache key.
std::string NvrtcVersion();
// The options CompileCuda passes for `arch` (part of the cache key).
std::vector<std::string> NvrtcOptions(const std::string& arch);
// The number of an architecture name: 90 for "sm_90" or "sm_90a"; -1 unless it is sm_ + 2-3 digits +
// an optional a/f suffix (arch- and family-specific features).
int ArchNumber(const std::string& arch);
// InvalidArgument naming `source` (e.g. "--arch" or "OPFUSE_ARCH") unless `arch` is sm_XY[a|f] with XY
// an architecture this NVRTC compiles for (nvrtcGetSupportedArchs); with no NVRTC only the form is checked.
Status ValidateArch(const std::string& arch, const std::string& source);
// arch like "sm_90" or "sm_90a". A compile error returns InvalidArgument carrying the compiler log.
StatusOr<NvrtcOutput> CompileCuda(const std::string& source, const std::string& program_name, const std::string& arch);

}  // namespace opfuse::jit
