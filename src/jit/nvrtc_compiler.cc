// NVRTC wrapper (see nvrtc_compiler.h). Every NVRTC call is checked; the log is returned with
// errors so a failing generated kernel can be diagnosed from the message alone.
#include "jit/nvrtc_compiler.h"

#include <algorithm>
#include <chrono>
#include <regex>

#include <fmt/format.h>

#ifdef OPFUSE_WITH_NVRTC
#include <nvrtc.h>
#endif

namespace opfuse::jit {

bool NvrtcAvailable() {
#ifdef OPFUSE_WITH_NVRTC
  return true;
#else
  return false;
#endif
}

std::string NvrtcVersion() {
#ifdef OPFUSE_WITH_NVRTC
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS) return fmt::format("nvrtc-{}.{}", major, minor);
#endif
  return "nvrtc-none";
}

int ArchNumber(const std::string& arch) {
  size_t i = 3;
  bool ok = arch.size() >= 5 && arch.compare(0, 3, "sm_") == 0;
  int num = 0;
  for (; ok && i < arch.size() && arch[i] >= '0' && arch[i] <= '9' && i < 6; ++i) num = num * 10 + (arch[i] - '0');
  ok = ok && i >= 5 && (i == arch.size() || (i + 1 == arch.size() && (arch[i] == 'a' || arch[i] == 'f')));
  return ok ? num : -1;
}

Status ValidateArch(const std::string& arch, const std::string& source) {
  const int num = ArchNumber(arch);
  if (num < 0)
    return InvalidArgument(fmt::format("{} '{}': not a GPU architecture (expected sm_XY, e.g. sm_90 or sm_90a)", source, arch));
#ifdef OPFUSE_WITH_NVRTC
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) == NVRTC_SUCCESS && n > 0) {
    std::vector<int> archs(static_cast<size_t>(n));
    if (nvrtcGetSupportedArchs(archs.data()) == NVRTC_SUCCESS &&
        std::find(archs.begin(), archs.end(), num) == archs.end())
      return InvalidArgument(fmt::format("{} '{}': {} does not compile for it (it supports sm_{} to sm_{})", source, arch,
                                         NvrtcVersion(), archs.front(), archs.back()));
  }
#else
  (void)num;
#endif
  return Status::Ok();
}

std::vector<std::string> NvrtcOptions(const std::string& arch) {
  return {"--gpu-architecture=" + arch, "--std=c++17", "--fmad=true"};
}

StatusOr<NvrtcOutput> CompileCuda(const std::string& source, const std::string& program_name, const std::string& arch) {
#ifndef OPFUSE_WITH_NVRTC
  (void)source;
  (void)program_name;
  (void)arch;
  return Unavailable("NVRTC is not built into this opfuse (no CUDA toolkit at build time)");
#else
  static const std::regex kArch("sm_[0-9]+a?");
  if (!std::regex_match(arch, kArch)) return InvalidArgument(fmt::format("bad --arch '{}': expected e.g. sm_90 or sm_90a", arch));
  auto t0 = std::chrono::steady_clock::now();
  nvrtcProgram prog;
  nvrtcResult rc = nvrtcCreateProgram(&prog, source.c_str(), (program_name + ".cu").c_str(), 0, nullptr, nullptr);
  if (rc != NVRTC_SUCCESS) return Internal(fmt::format("nvrtcCreateProgram: {}", nvrtcGetErrorString(rc)));
  auto opts = NvrtcOptions(arch);
  std::vector<const char*> copts;
  for (const auto& o : opts) copts.push_back(o.c_str());
  rc = nvrtcCompileProgram(prog, static_cast<int>(copts.size()), copts.data());
  NvrtcOutput out;
  size_t log_size = 0;
  if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    out.log.resize(log_size);
    nvrtcGetProgramLog(prog, out.log.data());
    while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
  }
  if (rc != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&prog);
    return InvalidArgument(fmt::format("NVRTC failed to compile {} for {}: {}\n{}", program_name, arch, nvrtcGetErrorString(rc), out.log));
  }
  size_t size = 0;
  rc = nvrtcGetCUBINSize(prog, &size);
  if (rc == NVRTC_SUCCESS) {
    out.cubin.resize(size);
    rc = nvrtcGetCUBIN(prog, out.cubin.data());
  }
  nvrtcDestroyProgram(&prog);
  if (rc != NVRTC_SUCCESS || out.cubin.empty())
    return Internal(fmt::format("NVRTC produced no CUBIN for {} ({}): {}", program_name, arch, nvrtcGetErrorString(rc)));
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
#endif
}

}  // namespace opfuse::jit
