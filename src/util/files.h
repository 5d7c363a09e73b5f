// Reading and writing the files a user names, bounded and atomic (issue 28):
//
//  * ReadFileCapped: a regular file of at most `cap` bytes, else one clear error — a directory is
//    "is a directory", /dev/zero or a 40 GB file is "larger than N MiB", never an unbounded read.
//    Every parser of a user's file reads through it, with a cap per kind of file (below).
//  * CheckOutputFile: what a command checks before any work for each output path it was given
//    (--output, --dump-logits, ...): not a directory, its folder exists and is writable.
//  * WriteFileAtomic: PATH.tmp.<pid>, then rename to PATH; the temporary file is removed on every
//    failure path, so a failed write leaves nothing behind and never a half-written PATH.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "opfuse/status.h"

namespace opfuse {

// Caps per kind of file: far above any real one, far below what would exhaust memory.
inline constexpr int64_t kMaxGraphFileBytes = int64_t{256} << 20;      // .ofg graph text
inline constexpr int64_t kMaxJsonFileBytes = int64_t{256} << 20;       // config.json, profiles, reports, tokenizer.json
inline constexpr int64_t kMaxSourceFileBytes = int64_t{16} << 20;      // an eval candidate (.cu)

// The whole file. NotFound when it does not exist; InvalidArgument when it is a directory, cannot
// be read or holds more than `cap` bytes. `what` prefixes the message ("config.json", "--candidate").
StatusOr<std::string> ReadFileCapped(const std::string& path, int64_t cap, std::string_view what = "");

// InvalidArgument("FLAG PATH: is a directory" / "...: folder ... does not exist" / "not writable")
// when a file cannot be written at `path`; nothing is created.
Status CheckOutputFile(std::string_view flag, const std::string& path);

// `data` into `path` atomically (see above).
Status WriteFileAtomic(const std::string& path, std::string_view data);

}  // namespace opfuse
