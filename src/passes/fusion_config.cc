// FusionConfig's environment and kill-switch handling (see include/opfuse/config.h).
// Valid names come from the pattern registry and the pipeline, so adding a pattern or an optional
// pass adds its kill switch without touching this file.
#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "fusion/patterns.h"
#include "opfuse/config.h"
#include "passes/pipeline.h"

namespace opfuse {

std::vector<std::string> FusionConfig::KnownNames() {
  std::vector<std::string> names;
  for (const auto& p : fusion::AllPatterns()) names.push_back(p.name);
  for (const auto& p : Pipeline())
    if (p.can_disable) names.push_back(p.name);
  names.push_back("gemv");  // the CUDA executor's decode GEMV (src/kernels/gemv.h): cuBLASLt instead
  names.push_back("pdl");   // programmatic dependent launch of the library kernels (kernels/pdl.cuh)
  names.push_back("auto_graph");  // the CUDA executor's replay of repeated plans as CUDA graphs
  names.push_back("matmul_norm");  // fuse_matmul's norm prologue (rms_norm / add_rms_norm inside the GEMV group)
  names.push_back("matmul_rope");  // fuse_matmul's rope epilogue (q/k rotated by the GEMV)
  return names;
}

Status FusionConfig::Disable(std::string_view list, std::string_view source) {
  const auto known = KnownNames();
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string_view item = list.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    start = comma == std::string_view::npos ? list.size() + 1 : comma + 1;
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (item.empty()) continue;
    std::string name(item);
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string valid;
      for (const auto& k : known) valid += (valid.empty() ? "" : ", ") + k;
      return InvalidArgument(fmt::format("{}: unknown name '{}' (valid: {})", source, name, valid));
    }
    names.push_back(std::move(name));
  }
  disabled.insert(names.begin(), names.end());
  return Status::Ok();
}

Status FusionConfig::ApplyEnv() {
  const char* env = std::getenv("OPFUSE_DISABLE");
  if (!env) return Status::Ok();
  return Disable(env, "OPFUSE_DISABLE");
}

StatusOr<FusionConfig> FusionConfig::FromEnv() {
  FusionConfig c;
  OPFUSE_RETURN_IF_ERROR(c.ApplyEnv());
  return c;
}

}  // namespace opfuse
