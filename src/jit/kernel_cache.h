// JIT kernel cache: memory + disk, so that a kernel is compiled once, ever.
//
// Design note
// -----------
// * Key. A KernelKey holds everything that determines the compiled binary: generated source,
//   target arch, compiler identity (NVRTC version) and the joined compile options. Its Digest()
//   is a 128-bit hash written as 32 lowercase hex digits. The hash is our own, non-cryptographic
//   (see kernel_cache.cc "Hashing"): two XXH64 passes with different seeds over a length-prefixed
//   serialisation of a version tag and the four fields, so field boundaries cannot be shifted
//   ("ab"+"c" != "a"+"bc") and the value is identical on every run, compiler and machine
//   (bytes are read little-endian explicitly). Changing the serialisation means changing the tag.
// * Lookup order. GetOrCompile: memory (a map digest -> entry, microseconds) -> disk (a verified
//   file) -> CompileFn. A compiled kernel is stored in memory and on disk; a disk hit is promoted
//   to memory. Concurrent calls for one key are coalesced: the first caller loads/compiles, the
//   others wait for it and count as memory hits. A compile failure is handed to every caller
//   waiting on it and is never cached (the next call tries again).
// * Disk layout. <dir>/<first 2 hex of digest>/<digest>.okc; each file is a header (magic
//   "OPFUSEKC", format version, digest, arch, compiler, compile ms, binary/log/payload sizes,
//   payload checksum, header checksum) followed by the payload (CUBIN bytes then the compiler log).
//   Files are written to a unique temp file in the same folder and rename()d into place, so a
//   reader (in this or another process) sees the old complete file or the new complete file,
//   never a partial one. Loads verify magic, version, header checksum, that the header names this
//   very key (digest, arch, compiler; otherwise the entry is "foreign"), the exact file size and
//   the payload checksum. A corrupt or foreign entry is reported on stderr as one line
//   ("opfuse cache: <path>: <why>; recompiling"), counted in corrupt_entries, recompiled and
//   replaced (or deleted when it cannot be replaced) — never trusted.
// * Size limit. When the bytes this process knows to be on disk exceed max_disk_bytes, the
//   directory is rescanned and least-recently-used entries (oldest mtime; mtime is set on write and
//   on every disk hit, and at most once a minute on memory hits) are deleted until the total fits.
//   The entry just written is never evicted. Stale temp files (a writer that crashed) older than an
//   hour are removed by the same scan.
// * Failures of the disk (cannot create the directory, write, rename) are logged and counted in
//   disk_write_failures; the compiled kernel is still returned. The disk cache never fails a call.
// * Two processes on one directory are safe: all writes are temp+rename, all reads open one inode
//   and verify it. They may both compile a key neither has seen (no cross-process lock; both
//   results are identical and the last rename wins).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "opfuse/status.h"

namespace opfuse::jit {

struct KernelKey {             // everything that determines the compiled binary
  std::string source;          // generated CUDA source
  std::string arch;            // e.g. "sm_90"
  std::string compiler;        // e.g. "nvrtc-13.0"
  std::string options;         // compile options joined
  // 128-bit hex digest (32 chars) over all four fields (length-prefixed); stable across runs and
  // machines.
  std::string Digest() const;
};

struct CachedKernel {
  std::string digest;          // KernelKey::Digest() of the key it was compiled from
  std::string binary;          // CUBIN bytes
  std::string log;             // compiler log (warnings)
  double compile_ms = 0;       // time of the original compile (also on a disk hit)
};

// Counters of one KernelCache object. memory_hits includes callers that waited for another
// thread's in-flight load/compile of the same key; misses = lookups found neither in memory nor
// (valid) on disk, each of which calls the CompileFn once (compiles, failed ones included);
// corrupt_entries = disk entries rejected on load (corrupt, truncated or foreign).
struct CacheStats {
  int64_t memory_hits = 0, disk_hits = 0, misses = 0, compiles = 0, corrupt_entries = 0,
          evictions = 0, disk_write_failures = 0;
  double compile_ms = 0;       // sum over the compiles of this cache object
};

struct CacheOptions {
  std::string dir;             // "" = from OPFUSE_CACHE_DIR, else $XDG_CACHE_HOME/opfuse,
                               //      else ~/.cache/opfuse
  bool enable_memory = true;
  bool enable_disk = true;
  int64_t max_disk_bytes = 512LL << 20;
};

// Fills binary, log and compile_ms (when compile_ms is left 0 the cache measures the call).
using CompileFn = std::function<StatusOr<CachedKernel>()>;

class KernelCache {
 public:
  explicit KernelCache(CacheOptions opts = {});
  ~KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  // Memory hit -> disk hit (verified) -> compile (then stored in memory and on disk).
  // Thread-safe; concurrent calls for the same key compile it once (others wait for it).
  StatusOr<std::shared_ptr<const CachedKernel>> GetOrCompile(const KernelKey& key,
                                                             const CompileFn& compile);
  CacheStats Stats() const;
  // Whether GetOrCompile(key) would not compile: a completed entry in memory, or an entry file on
  // disk (not verified here; a corrupt file is still recompiled on load). Used by should_fuse to
  // count compile cost.
  bool Contains(const KernelKey& key) const;
  void ClearMemory();   // drops completed entries (in-flight compiles finish normally)
  Status ClearDisk();   // deletes this cache's *.okc entries and temp files under dir()
  const std::string& dir() const;   // resolved directory ("" when the disk cache is off)

  // <dir>/<first 2 hex>/<digest>.okc for this key ("" when the disk cache is off).
  std::string EntryPath(const KernelKey& key) const;

  static KernelCache& Global();  // process-wide cache with default options

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- building blocks, exposed for tests and tools (e.g. a cache "verify" command) ----

// XXH64 (the published xxHash 64-bit algorithm, reimplemented here; matches its test vectors).
uint64_t Hash64(std::string_view data, uint64_t seed = 0);

// The directory CacheOptions{.dir = configured} resolves to ("" when no home can be found).
std::string ResolveCacheDir(const std::string& configured);

// Serialises one disk entry (header + payload) for `key`.
std::string EncodeCacheEntry(const KernelKey& key, const CachedKernel& kernel);
// Verifies and parses a disk entry; the error message says why it was rejected (truncated,
// bad magic, checksum mismatch, foreign entry ...). Checks it names `key` (digest, arch, compiler).
StatusOr<CachedKernel> DecodeCacheEntry(std::string_view bytes, const KernelKey& key);

}  // namespace opfuse::jit
