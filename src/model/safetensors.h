// Safetensors: a memory-mapped, validate-before-use reader, an atomic writer, and loading of a
// Hugging Face model directory (one file, several `*.safetensors`, or the sharded form with
// `model.safetensors.index.json`).
//
// Format (https://github.com/huggingface/safetensors): 8-byte little-endian header length N, N
// bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}
// (may be padded with trailing spaces), then the data section. Offsets are relative to the data
// section. The reader trusts nothing: N must fit the file, the JSON must be an object of
// well-typed entries, each dtype known, shape product × dtype size must equal end − begin
// (without overflow), and the tensors must tile the data section exactly — sorted by offset they
// start at 0, touch without overlap or gap, and end at the end of the file (as the spec and the
// reference implementation require). Every error names the file, the tensor and the problem.
// ParseSafetensorsHeader works on a byte buffer so the fuzzer (tests/fuzz/fuzz_safetensors.cc)
// exercises exactly the code the mmap reader uses.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "opfuse/graph.h"
#include "opfuse/status.h"

namespace opfuse {

enum class StDType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU64, kU32, kU16, kU8, kBool, kF8E4M3, kF8E5M2 };
const char* StDTypeName(StDType t);  // as in the file: "F32", "BF16", ...
std::optional<StDType> StDTypeFromName(std::string_view name);
int StDTypeSize(StDType t);
// opfuse's compute dtypes that have a safetensors equivalent (F32, F16, BF16, I32, I64, BOOL).
std::optional<DType> ToDType(StDType t);
StDType FromDType(DType t);

struct StTensorInfo {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // offsets within the data section
  int64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
};

struct StHeader {
  uint64_t header_len = 0;   // N
  uint64_t data_start = 0;   // 8 + N
  std::vector<StTensorInfo> tensors;  // in file order (sorted by begin)
  std::map<std::string, std::string> metadata;
};

// Validates the header of a whole safetensors file held in `bytes` (file_size = bytes.size()).
// `what` names the file in error messages. Only the first 8 + N bytes are parsed; the data section
// is only checked for size.
StatusOr<StHeader> ParseSafetensorsHeader(std::span<const uint8_t> bytes, std::string_view what = "safetensors");

// A read-only memory-mapped safetensors file; the header is validated by Open before any use.
class SafetensorsFile {
 public:
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const StHeader& header() const { return header_; }
  const std::vector<StTensorInfo>& tensors() const { return header_.tensors; }
  const StTensorInfo* Find(std::string_view name) const;
  // The tensor's bytes inside the mapping (valid while this object lives).
  std::span<const uint8_t> Data(const StTensorInfo& t) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  StHeader header_;
  std::map<std::string, size_t, std::less<>> index_;
};

// What the writer needs per tensor; the data is produced by a fill callback so that multi-GB
// checkpoints are streamed (one tensor in memory at a time).
struct StTensorSpec {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
};
// fill(i, out) writes tensor i's bytes (out.size() == its nbytes).
using StFillFn = std::function<Status(size_t index, std::span<uint8_t> out)>;

// Writes `path` atomically: into `path.tmp.<pid>` then rename; nothing is left behind on error.
// The header is padded with spaces so the data section starts 8-byte aligned.
Status WriteSafetensors(const std::string& path, const std::vector<StTensorSpec>& tensors,
                        const std::map<std::string, std::string>& metadata, const StFillFn& fill);

// All tensors of a model directory: `model.safetensors.index.json` (its weight_map names each
// tensor's shard; every listed tensor must be in that shard, every shard tensor listed) or else
// every `*.safetensors` file in the directory (a name in two files is an error).
class SafetensorsDir {
 public:
  static StatusOr<SafetensorsDir> Open(const std::string& dir);
  struct Entry {
    const SafetensorsFile* file;
    const StTensorInfo* info;
  };
  const std::map<std::string, Entry, std::less<>>& tensors() const { return tensors_; }
  const Entry* Find(std::string_view name) const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry, std::less<>> tensors_;
};

}  // namespace opfuse
