// The fusion profile database (see profile_db.h): strict loading, atomic saving, merging.
#include "scheduler/profile_db.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "opfuse/graph.h"
#include "util/files.h"
#include "util/quote.h"

namespace opfuse::scheduler {
namespace {

using Json = nlohmann::json;

struct Ctx {
  std::string origin;
  Status Err(const std::string& path, const std::string& what) const {
    return InvalidArgument(fmt::format("{}: {}: {}", origin, path, what));
  }
};

Status GetString(const Ctx& c, const Json& obj, const std::string& path, const char* key, bool required,
                 std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return required ? c.Err(path + "." + key, "missing (a string is required)") : Status::Ok();
  if (!it->is_string()) return c.Err(path + "." + key, "must be a string");
  *out = it->get<std::string>();
  if (required && out->empty()) return c.Err(path + "." + key, "must not be empty");
  return Status::Ok();
}

Status GetNumber(const Ctx& c, const Json& v, const std::string& path, double* out) {
  if (!v.is_number()) return c.Err(path, "must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < 0) return c.Err(path, "must be a finite number >= 0");
  *out = d;
  return Status::Ok();
}

Status GetInt(const Ctx& c, const Json& v, const std::string& path, int64_t min, int64_t* out) {
  if (!v.is_number_integer()) return c.Err(path, "must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return c.Err(path, "too large");
  const int64_t i = v.get<int64_t>();
  if (i < min) return c.Err(path, fmt::format("must be >= {}", min));
  *out = i;
  return Status::Ok();
}

Status CheckKeys(const Ctx& c, const Json& obj, const std::string& path, std::initializer_list<const char*> known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok |= it.key() == k;
    if (!ok) {
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return c.Err(path + "." + PathKey(it.key()), "unknown key (expected one of: " + list + ")");
    }
  }
  return Status::Ok();
}

Status ParseDevice(const Ctx& c, const Json& d, DeviceInfo* out) {
  if (!d.is_object()) return c.Err("device", "must be an object");
  OPFUSE_RETURN_IF_ERROR(CheckKeys(c, d, "device", {"name", "sm", "driver", "copy_gbps", "launch_us"}));
  OPFUSE_RETURN_IF_ERROR(GetString(c, d, "device", "name", true, &out->name));
  OPFUSE_RETURN_IF_ERROR(GetString(c, d, "device", "sm", true, &out->sm));
  OPFUSE_RETURN_IF_ERROR(GetString(c, d, "device", "driver", false, &out->driver));
  if (d.contains("copy_gbps")) OPFUSE_RETURN_IF_ERROR(GetNumber(c, d["copy_gbps"], "device.copy_gbps", &out->copy_gbps));
  if (d.contains("launch_us")) OPFUSE_RETURN_IF_ERROR(GetNumber(c, d["launch_us"], "device.launch_us", &out->launch_us));
  return Status::Ok();
}

Status ParseEntry(const Ctx& c, const Json& e, const std::string& path, ProfileEntry* out) {
  if (!e.is_object()) return c.Err(path, "must be an object");
  OPFUSE_RETURN_IF_ERROR(CheckKeys(c, e, path, {"pattern", "dtype", "shape", "variants_us", "samples"}));
  OPFUSE_RETURN_IF_ERROR(GetString(c, e, path, "pattern", true, &out->pattern));
  OPFUSE_RETURN_IF_ERROR(GetString(c, e, path, "dtype", true, &out->dtype));
  if (!DTypeFromName(out->dtype)) return c.Err(path + ".dtype", "unknown dtype " + Json(out->dtype).dump());
  auto shape = e.find("shape");
  if (shape == e.end()) return c.Err(path + ".shape", "missing (an object {\"rows\", \"cols\"} is required)");
  if (!shape->is_object()) return c.Err(path + ".shape", "must be an object {\"rows\", \"cols\"}");
  OPFUSE_RETURN_IF_ERROR(CheckKeys(c, *shape, path + ".shape", {"rows", "cols"}));
  for (auto [key, dst] : {std::pair{"rows", &out->rows}, std::pair{"cols", &out->cols}}) {
    if (!shape->contains(key)) return c.Err(path + ".shape." + key, "missing");
    OPFUSE_RETURN_IF_ERROR(GetInt(c, (*shape)[key], path + ".shape." + key, 1, dst));
  }
  auto var = e.find("variants_us");
  if (var == e.end()) return c.Err(path + ".variants_us", "missing");
  if (!var->is_object()) return c.Err(path + ".variants_us", "must be an object");
  OPFUSE_RETURN_IF_ERROR(CheckKeys(c, *var, path + ".variants_us", {"unfused", "library", "jit", "cublaslt"}));
  if (var->empty()) return c.Err(path + ".variants_us", "no variant measured");
  if (var->contains("cublaslt") && out->pattern.rfind("matmul:", 0) != 0)
    return c.Err(path + ".variants_us.cublaslt", "only a fuse_matmul group (pattern \"matmul:...\") has a cuBLASLt form");
  for (auto [key, dst] : {std::pair{"unfused", &out->unfused_us}, std::pair{"library", &out->library_us},
                          std::pair{"jit", &out->jit_us}, std::pair{"cublaslt", &out->cublaslt_us}}) {
    if (!var->contains(key)) continue;
    double d = 0;
    OPFUSE_RETURN_IF_ERROR(GetNumber(c, (*var)[key], path + ".variants_us." + key, &d));
    *dst = d;
  }
  if (e.contains("samples")) OPFUSE_RETURN_IF_ERROR(GetInt(c, e["samples"], path + ".samples", 0, &out->samples));
  return Status::Ok();
}

}  // namespace

StatusOr<ProfileDb> ProfileDb::Parse(std::string_view text, std::string_view origin) {
  Ctx c{std::string(origin)};
  Json j;
  try {
    j = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return InvalidArgument(fmt::format("{}: malformed JSON at byte {}", c.origin, e.byte));
  } catch (const std::exception& e) {  // nlohmann's other errors (e.g. depth) — kept inside this function
    return InvalidArgument(fmt::format("{}: malformed JSON ({})", c.origin, e.what()));
  }
  if (!j.is_object()) return c.Err("(top)", "must be a JSON object {\"schema\", \"device\", \"entries\"}");
  ProfileDb db;
  auto schema = j.find("schema");
  if (schema == j.end()) return c.Err("schema", "missing (expected schema 1)");
  int64_t version = 0;
  OPFUSE_RETURN_IF_ERROR(GetInt(c, *schema, "schema", 0, &version));
  if (version != kProfileSchema)
    return c.Err("schema", fmt::format("version {} is not supported (this opfuse reads schema {})", version, kProfileSchema));
  if (!j.contains("device")) return c.Err("device", "missing");
  OPFUSE_RETURN_IF_ERROR(ParseDevice(c, j["device"], &db.device));
  auto entries = j.find("entries");
  if (entries == j.end()) return c.Err("entries", "missing");
  if (!entries->is_array()) return c.Err("entries", "must be an array");
  db.entries.reserve(entries->size());
  for (size_t i = 0; i < entries->size(); ++i) {
    ProfileEntry e;
    OPFUSE_RETURN_IF_ERROR(ParseEntry(c, (*entries)[i], fmt::format("entries[{}]", i), &e));
    db.entries.push_back(std::move(e));
  }
  return db;
}

StatusOr<ProfileDb> ProfileDb::Load(const std::string& path) {
  OPFUSE_ASSIGN_OR_RETURN(std::string text, ReadFileCapped(path, kMaxJsonFileBytes, "profile"));
  return Parse(text, path);
}

std::string ProfileDb::ToJson() const {
  nlohmann::ordered_json j;
  j["schema"] = schema;
  nlohmann::ordered_json d;
  d["name"] = device.name;
  d["sm"] = device.sm;
  if (!device.driver.empty()) d["driver"] = device.driver;
  if (device.copy_gbps > 0) d["copy_gbps"] = device.copy_gbps;
  if (device.launch_us > 0) d["launch_us"] = device.launch_us;
  j["device"] = d;
  j["entries"] = nlohmann::ordered_json::array();
  for (const auto& e : entries) {
    nlohmann::ordered_json v = nlohmann::ordered_json::object();
    if (e.unfused_us) v["unfused"] = *e.unfused_us;
    if (e.library_us) v["library"] = *e.library_us;
    if (e.jit_us) v["jit"] = *e.jit_us;
    if (e.cublaslt_us) v["cublaslt"] = *e.cublaslt_us;
    j["entries"].push_back({{"pattern", e.pattern},
                            {"dtype", e.dtype},
                            {"shape", {{"rows", e.rows}, {"cols", e.cols}}},
                            {"variants_us", v},
                            {"samples", e.samples}});
  }
  return j.dump(2) + "\n";
}

Status ProfileDb::Save(const std::string& path) const { return WriteFileAtomic(path, ToJson()); }

Status ProfileDb::Merge(const ProfileDb& other) {
  if (Status s = CheckDevice(device, other.device); !s.ok())
    return InvalidArgument("refusing to merge profiles from different devices: " + s.message());
  using Key = std::tuple<std::string, std::string, int64_t, int64_t>;
  std::map<Key, size_t> index;
  for (size_t i = 0; i < entries.size(); ++i)
    index[{entries[i].pattern, entries[i].dtype, entries[i].rows, entries[i].cols}] = i;
  for (const auto& e : other.entries) {
    Key k{e.pattern, e.dtype, e.rows, e.cols};
    auto it = index.find(k);
    if (it != index.end()) {
      entries[it->second] = e;
    } else {
      index[k] = entries.size();
      entries.push_back(e);
    }
  }
  if (device.copy_gbps <= 0) device.copy_gbps = other.device.copy_gbps;
  if (device.launch_us <= 0) device.launch_us = other.device.launch_us;
  return Status::Ok();
}

std::vector<const ProfileEntry*> ProfileDb::Series(std::string_view pattern, std::string_view dtype, int64_t cols) const {
  std::map<int64_t, const ProfileEntry*> by_rows;
  for (const auto& e : entries)
    if (e.pattern == pattern && e.dtype == dtype && e.cols == cols) by_rows[e.rows] = &e;
  std::vector<const ProfileEntry*> out;
  for (const auto& [rows, e] : by_rows) out.push_back(e);
  return out;
}

Status CheckDevice(const DeviceInfo& recorded, const DeviceInfo& current) {
  if (recorded.name != current.name)
    return Unavailable(fmt::format("profile measured on {}, this device is {}", Quote(recorded.name), Quote(current.name)));
  if (recorded.sm != current.sm)
    return Unavailable(fmt::format("profile measured on sm {}, this device is sm {}", Quote(recorded.sm), Quote(current.sm)));
  return Status::Ok();
}

}  // namespace opfuse::scheduler
