// Safetensors reader (mmap + header validation), writer (temp + rename) and directory loading.
// See safetensors.h for the format and the rules enforced.
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/quote.h"
#include "util/files.h"

namespace opfuse {
namespace {

using json = nlohmann::json;

struct DTypeRow {
  StDType t;
  const char* name;
  int size;
};
constexpr DTypeRow kDTypes[] = {
    {StDType::kF64, "F64", 8},   {StDType::kF32, "F32", 4},   {StDType::kF16, "F16", 2},
    {StDType::kBF16, "BF16", 2}, {StDType::kI64, "I64", 8},   {StDType::kI32, "I32", 4},
    {StDType::kI16, "I16", 2},   {StDType::kI8, "I8", 1},     {StDType::kU64, "U64", 8},
    {StDType::kU32, "U32", 4},   {StDType::kU16, "U16", 2},   {StDType::kU8, "U8", 1},
    {StDType::kBool, "BOOL", 1}, {StDType::kF8E4M3, "F8_E4M3", 1}, {StDType::kF8E5M2, "F8_E5M2", 1},
};

// The reference implementation refuses headers above 100 MB; so do we.
constexpr uint64_t kMaxHeaderLen = 100ull << 20;

std::string ShapeStr(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

}  // namespace

const char* StDTypeName(StDType t) {
  for (const auto& r : kDTypes)
    if (r.t == t) return r.name;
  return "?";
}
std::optional<StDType> StDTypeFromName(std::string_view name) {
  for (const auto& r : kDTypes)
    if (name == r.name) return r.t;
  return std::nullopt;
}
int StDTypeSize(StDType t) {
  for (const auto& r : kDTypes)
    if (r.t == t) return r.size;
  return 0;
}
std::optional<DType> ToDType(StDType t) {
  switch (t) {
    case StDType::kF32: return DType::kF32;
    case StDType::kF16: return DType::kF16;
    case StDType::kBF16: return DType::kBF16;
    case StDType::kI32: return DType::kI32;
    case StDType::kI64: return DType::kI64;
    case StDType::kBool: return DType::kBool;
    default: return std::nullopt;
  }
}
StDType FromDType(DType t) {
  switch (t) {
    case DType::kF32: return StDType::kF32;
    case DType::kF16: return StDType::kF16;
    case DType::kBF16: return StDType::kBF16;
    case DType::kI32: return StDType::kI32;
    case DType::kI64: return StDType::kI64;
    case DType::kBool: return StDType::kBool;
  }
  return StDType::kF32;
}

int64_t StTensorInfo::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

StatusOr<StHeader> ParseSafetensorsHeader(std::span<const uint8_t> bytes, std::string_view what) {
  const uint64_t file_size = bytes.size();
  if (file_size < 8)
    return InvalidArgument(fmt::format("{}: truncated: {} bytes, fewer than the 8-byte header length", what, file_size));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxHeaderLen)
    return InvalidArgument(fmt::format("{}: header length {} exceeds the 100 MB limit (corrupt file?)", what, n));
  if (n > file_size - 8)
    return InvalidArgument(fmt::format("{}: header length {} runs past the end of the file ({} bytes): truncated or lying length",
                                       what, n, file_size));
  if (n < 2) return InvalidArgument(fmt::format("{}: header length {} is too small for a JSON object", what, n));
  StHeader h;
  h.header_len = n;
  h.data_start = 8 + n;
  const char* text = reinterpret_cast<const char*>(bytes.data() + 8);
  if (text[0] != '{') return InvalidArgument(fmt::format("{}: header does not start with '{{'", what));
  // A name given twice would silently take the last entry (nlohmann keeps it): refused instead,
  // found by tracking the keys of each open object while parsing.
  std::vector<std::set<std::string>> open_keys;
  std::string duplicate;
  const json::parser_callback_t track = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) open_keys.emplace_back();
    else if (ev == json::parse_event_t::object_end && !open_keys.empty()) open_keys.pop_back();
    else if (ev == json::parse_event_t::key && !open_keys.empty() && parsed.is_string() &&
             !open_keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  json j = json::parse(text, text + n, track, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(fmt::format("{}: header is not valid JSON", what));
  if (!duplicate.empty())
    return InvalidArgument(fmt::format("{}: header names {} twice (a duplicate tensor entry)", what, Quote(duplicate)));
  if (!j.is_object()) return InvalidArgument(fmt::format("{}: header is not a JSON object", what));
  const uint64_t data_size = file_size - h.data_start;

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return InvalidArgument(fmt::format("{}: __metadata__ must be an object of strings", what));
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          return InvalidArgument(fmt::format("{}: __metadata__ value for {} is not a string", what, Quote(m.key())));
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& why) { return InvalidArgument(fmt::format("{}: tensor {}: {}", what, Quote(name), why)); };
    if (name.empty()) return bad("empty tensor name");
    if (!v.is_object()) return bad("entry is not an object");
    for (auto k = v.begin(); k != v.end(); ++k)
      if (k.key() != "dtype" && k.key() != "shape" && k.key() != "data_offsets")
        return bad(fmt::format("unknown field {}", Quote(k.key())));
    StTensorInfo t;
    t.name = name;
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) return bad("missing or non-string 'dtype'");
    auto d = StDTypeFromName(dt->get<std::string>());
    if (!d) return bad(fmt::format("unknown dtype {}", Quote(dt->get<std::string>())));
    t.dtype = *d;
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) return bad("missing or non-array 'shape'");
    if (sh->size() > 16) return bad(fmt::format("rank {} is implausible (max 16)", sh->size()));
    unsigned __int128 numel = 1;
    for (const auto& e : *sh) {
      if (!e.is_number_unsigned() && !(e.is_number_integer() && e.get<int64_t>() >= 0))
        return bad(fmt::format("shape entry {} is not a non-negative integer", e.dump()));
      const uint64_t dim = e.get<uint64_t>();
      if (dim > (uint64_t{1} << 62)) return bad(fmt::format("shape entry {} is too large", dim));
      t.shape.push_back(static_cast<int64_t>(dim));
      numel *= dim;
      if (numel > (static_cast<unsigned __int128>(1) << 62)) return bad(fmt::format("shape {} overflows", sh->dump()));
    }
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      return bad("'data_offsets' must be [begin, end] with non-negative integers");
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.end < t.begin) return bad(fmt::format("data_offsets [{}, {}] end before begin", t.begin, t.end));
    if (t.end > data_size)
      return bad(fmt::format("data_offsets [{}, {}] run past the data section ({} bytes): truncated file?", t.begin, t.end,
                             data_size));
    const unsigned __int128 want = numel * static_cast<unsigned>(StDTypeSize(t.dtype));
    if (want != t.end - t.begin)
      return bad(fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] span {}", ShapeStr(t.shape),
                             StDTypeName(t.dtype), static_cast<uint64_t>(want), t.begin, t.end, t.end - t.begin));
    h.tensors.push_back(std::move(t));
  }
  // The tensors must tile the data section: sorted by offset, no overlap, no hole, nothing after.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const StTensorInfo& a, const StTensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const StTensorInfo* prev = nullptr;
  for (const auto& t : h.tensors) {
    if (t.begin < pos)
      return InvalidArgument(fmt::format("{}: tensor {} data_offsets [{}, {}] overlap tensor {} [{}, {}]", what, Quote(t.name),
                                         t.begin, t.end, Quote(prev->name), prev->begin, prev->end));
    if (t.begin > pos)
      return InvalidArgument(fmt::format("{}: gap of {} bytes before tensor {} (data_offsets [{}, {}]); the spec requires the "
                                         "data section to be fully indexed",
                                         what, t.begin - pos, Quote(t.name), t.begin, t.end));
    pos = t.end;
    prev = &t;
  }
  if (pos != data_size)
    return InvalidArgument(fmt::format("{}: the tensors cover {} bytes of the {}-byte data section ({} bytes unindexed at the end)",
                                       what, pos, data_size, data_size - pos));
  return h;
}

// ------------------------------------------------------------------------------------ reader
StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(fmt::format("{}: not a regular file", path));
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      return Internal(fmt::format("{}: mmap failed: {}", path, std::strerror(errno)));
    }
    f->map_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  auto h = ParseSafetensorsHeader({f->map_, f->size_}, path);
  if (!h.ok()) return h.status();  // f's destructor unmaps
  f->header_ = std::move(h).value();
  for (size_t i = 0; i < f->header_.tensors.size(); ++i) f->index_[f->header_.tensors[i].name] = i;
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
}

const StTensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

std::span<const uint8_t> SafetensorsFile::Data(const StTensorInfo& t) const {
  return {map_ + header_.data_start + t.begin, static_cast<size_t>(t.end - t.begin)};
}

// ------------------------------------------------------------------------------------ writer
Status WriteSafetensors(const std::string& path, const std::vector<StTensorSpec>& tensors,
                        const std::map<std::string, std::string>& metadata, const StFillFn& fill) {
  json j = json::object();
  if (!metadata.empty()) j["__metadata__"] = metadata;
  uint64_t off = 0;
  std::set<std::string> names;
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") return InvalidArgument(fmt::format("safetensors writer: bad tensor name {}", Quote(t.name)));
    if (!names.insert(t.name).second) return InvalidArgument(fmt::format("safetensors writer: duplicate tensor {}", Quote(t.name)));
    uint64_t n = StDTypeSize(t.dtype);
    for (auto d : t.shape) {
      if (d < 0) return InvalidArgument(fmt::format("safetensors writer: tensor {} has a negative dim", Quote(t.name)));
      n *= static_cast<uint64_t>(d);
    }
    j[t.name] = {{"dtype", StDTypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + n}}};
    sizes.push_back(n);
    off += n;
  }
  std::string header = j.dump();
  header.append((8 - (8 + header.size()) % 8) % 8, ' ');
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return InvalidArgument(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  auto fail = [&](Status s) {
    std::fclose(f);
    std::remove(tmp.c_str());
    return s;
  };
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  if (std::fwrite(len, 1, 8, f) != 8 || std::fwrite(header.data(), 1, header.size(), f) != header.size())
    return fail(Internal(fmt::format("writing {}: {}", tmp, std::strerror(errno))));
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < tensors.size(); ++i) {
    buf.assign(sizes[i], 0);
    Status s = fill(i, std::span<uint8_t>(buf.data(), buf.size()));
    if (!s.ok()) return fail(s);
    if (!buf.empty() && std::fwrite(buf.data(), 1, buf.size(), f) != buf.size())
      return fail(Internal(fmt::format("writing {}: {}", tmp, std::strerror(errno))));
  }
  if (std::fflush(f) != 0 || ::fsync(::fileno(f)) != 0)
    return fail(Internal(fmt::format("writing {}: {}", tmp, std::strerror(errno))));
  if (std::fclose(f) != 0) {
    std::remove(tmp.c_str());
    return Internal(fmt::format("closing {}: {}", tmp, std::strerror(errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Internal(fmt::format("renaming {} to {}: {}", tmp, path, std::strerror(errno)));
  }
  return Status::Ok();
}

// ------------------------------------------------------------------------------------ directory
StatusOr<SafetensorsDir> SafetensorsDir::Open(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound(fmt::format("{}: not a directory", dir));
  SafetensorsDir d;
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index_path, ec)) {
    OPFUSE_ASSIGN_OR_RETURN(std::string text, ReadFileCapped(index_path.string(), kMaxJsonFileBytes));
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return InvalidArgument(fmt::format("{}: not a JSON object", index_path.string()));
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object() || wm->empty())
      return InvalidArgument(fmt::format("{}: missing or empty 'weight_map'", index_path.string()));
    std::map<std::string, std::vector<std::string>> by_shard;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string())
        return InvalidArgument(fmt::format("{}: weight_map[{}] is not a file name", index_path.string(), Quote(it.key())));
      const std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
        return InvalidArgument(fmt::format("{}: weight_map[{}] = {} is not a plain file name", index_path.string(), Quote(it.key()), Quote(shard)));
      by_shard[shard].push_back(it.key());
    }
    for (const auto& [shard, names] : by_shard) {
      OPFUSE_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open((fs::path(dir) / shard).string()));
      std::set<std::string> listed(names.begin(), names.end());
      for (const auto& name : names) {
        const StTensorInfo* info = f->Find(name);
        if (!info)
          return InvalidArgument(fmt::format("{}: lists tensor {} in {}, which does not contain it", index_path.string(), Quote(name), Quote(shard)));
        d.tensors_[name] = {f.get(), info};
      }
      for (const auto& t : f->tensors())
        if (!listed.count(t.name))
          return InvalidArgument(fmt::format("{}: tensor {} is in {} but the index does not list it there", index_path.string(),
                                             Quote(t.name), Quote(shard)));
      d.files_.push_back(std::move(f));
    }
    return d;
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  if (ec) return InvalidArgument(fmt::format("{}: cannot list: {}", dir, ec.message()));
  if (files.empty()) return NotFound(fmt::format("{}: no *.safetensors file and no model.safetensors.index.json", dir));
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    OPFUSE_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(p.string()));
    for (const auto& t : f->tensors()) {
      auto [it, fresh] = d.tensors_.try_emplace(t.name, Entry{f.get(), &t});
      if (!fresh)
        return InvalidArgument(fmt::format("{}: tensor {} is in both {} and {}", dir, Quote(t.name), it->second.file->path(), p.string()));
    }
    d.files_.push_back(std::move(f));
  }
  return d;
}

const SafetensorsDir::Entry* SafetensorsDir::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace opfuse
