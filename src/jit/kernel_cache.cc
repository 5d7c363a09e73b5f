// JIT kernel cache implementation (see kernel_cache.h for the design).
//
// Design note
// -----------
// Hashing. KernelKey::Digest() = hex(XXH64(s, kSeedHi)) + hex(XXH64(s, kSeedLo)) where s is the
//   byte stream  u64le(len(tag)) tag  u64le(len(source)) source  u64le(len(arch)) arch
//                u64le(len(compiler)) compiler  u64le(len(options)) options
//   and tag = "opfuse.KernelKey.v1". XXH64 is Yann Collet's published xxHash64 algorithm,
//   re-implemented below (streaming, ~10 GB/s, no dependency) and checked against its reference
//   vectors in the tests. The two lanes use different seeds, which enter all four accumulators,
//   so they behave as two independent 64-bit hashes: 128 bits against accidental collisions.
//   It is NOT a defence against a crafted collision — the cache directory is trusted as much
//   as the user's home. Bytes are always read little-endian so the digest is machine independent.
//   The same XXH64 (other seeds) checksums the header and the payload of a disk entry.
//
// Disk entry format (version 1, all integers little-endian):
//     0  char[8]  magic "OPFUSEKC"
//     8  u32      format version (1)
//    12  u32      header size H = 104 + arch_len + compiler_len
//    16  char[32] digest (hex)
//    48  u16      arch_len        50  u16 compiler_len      52  u32 reserved (0)
//    56  u64      compile_ms (IEEE-754 bits)
//    64  u64      binary size     72  u64 log size          80  u64 payload size (= binary + log)
//    88  u64      payload checksum (XXH64, kPayloadSeed)
//    96  arch bytes, compiler bytes
//   H-8  u64      header checksum (XXH64 of bytes [0, H-8), kHeaderSeed)
//     H  payload: binary bytes then log bytes; the file is exactly H + payload size bytes.
//
// Concurrency. One mutex (mu_) guards the slot map and the stats; it is never held across disk
// I/O or a compile. A slot is created by the first caller for a digest ("owner"), which loads or
// compiles without the lock, then publishes the result and wakes the waiters (one condition
// variable for all slots; wake-ups are rare — only when a load/compile finishes). disk_mu_
// serialises the size bookkeeping and the eviction scan. Across processes nothing is locked:
// every write is temp file + rename in the destination folder, every read verifies.
//
// No fsync: after a power loss a renamed entry may be empty or garbled; the checksums catch it and
// it is recompiled, which is cheaper than an fsync on every compile.
#include "jit/kernel_cache.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

namespace opfuse::jit {
namespace {

namespace fs = std::filesystem;

// ------------------------------------------------------------------------------------ Hashing

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;

constexpr uint64_t kSeedHi = 0x6F70667573653132ULL;  // "opfuse12"
constexpr uint64_t kSeedLo = 0x9E3779B97F4A7C15ULL;  // golden ratio
constexpr uint64_t kHeaderSeed = 0x4F4B432D48445231ULL;
constexpr uint64_t kPayloadSeed = 0x4F4B432D50415931ULL;
constexpr std::string_view kKeyTag = "opfuse.KernelKey.v1";

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t Read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}
inline uint32_t Read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  return v;
}

inline uint64_t Round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = Rotl(acc, 31);
  return acc * kP1;
}
inline uint64_t MergeRound(uint64_t acc, uint64_t val) {
  acc ^= Round(0, val);
  return acc * kP1 + kP4;
}

// Streaming XXH64.
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed) : seed_(seed) {
    v_[0] = seed + kP1 + kP2;
    v_[1] = seed + kP2;
    v_[2] = seed;
    v_[3] = seed - kP1;
  }
  void Update(const void* data, size_t len) {
    auto* p = static_cast<const unsigned char*>(data);
    const unsigned char* end = p + len;
    total_ += len;
    if (buffered_ + len < 32) {
      if (len) std::memcpy(buf_ + buffered_, p, len);
      buffered_ += len;
      return;
    }
    if (buffered_) {
      size_t fill = 32 - buffered_;
      std::memcpy(buf_ + buffered_, p, fill);
      Stripe(buf_);
      p += fill;
      buffered_ = 0;
    }
    while (end - p >= 32) {
      Stripe(p);
      p += 32;
    }
    buffered_ = static_cast<size_t>(end - p);
    if (buffered_) std::memcpy(buf_, p, buffered_);
  }
  void UpdateU64(uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    Update(b, 8);
  }
  uint64_t Digest() const {
    uint64_t h;
    if (total_ >= 32) {
      h = Rotl(v_[0], 1) + Rotl(v_[1], 7) + Rotl(v_[2], 12) + Rotl(v_[3], 18);
      for (uint64_t v : v_) h = MergeRound(h, v);
    } else {
      h = seed_ + kP5;
    }
    h += total_;
    const unsigned char* p = buf_;
    size_t n = buffered_;
    while (n >= 8) {
      h ^= Round(0, Read64(p));
      h = Rotl(h, 27) * kP1 + kP4;
      p += 8;
      n -= 8;
    }
    if (n >= 4) {
      h ^= static_cast<uint64_t>(Read32(p)) * kP1;
      h = Rotl(h, 23) * kP2 + kP3;
      p += 4;
      n -= 4;
    }
    while (n > 0) {
      h ^= static_cast<uint64_t>(*p) * kP5;
      h = Rotl(h, 11) * kP1;
      ++p;
      --n;
    }
    h ^= h >> 33;
    h *= kP2;
    h ^= h >> 29;
    h *= kP3;
    h ^= h >> 32;
    return h;
  }

 private:
  void Stripe(const unsigned char* p) {
    v_[0] = Round(v_[0], Read64(p));
    v_[1] = Round(v_[1], Read64(p + 8));
    v_[2] = Round(v_[2], Read64(p + 16));
    v_[3] = Round(v_[3], Read64(p + 24));
  }
  uint64_t seed_;
  uint64_t v_[4];
  uint64_t total_ = 0;
  unsigned char buf_[32];
  size_t buffered_ = 0;
};

void AppendHex64(std::string& out, uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 15; i >= 0; --i) out.push_back(kHex[(v >> (4 * i)) & 0xF]);
}

bool IsHexDigest(std::string_view s) {
  if (s.size() != 32) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// ------------------------------------------------------------------------------- Entry format

constexpr char kMagic[8] = {'O', 'P', 'F', 'U', 'S', 'E', 'K', 'C'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kFixedHeader = 96;       // up to the arch bytes
constexpr size_t kMaxEntryBytes = 1ULL << 31;  // anything larger is not ours
constexpr std::string_view kEntrySuffix = ".okc";
constexpr std::string_view kTempMarker = ".okc.tmp.";

void PutU16(std::string& s, size_t off, uint16_t v) {
  for (int i = 0; i < 2; ++i) s[off + i] = static_cast<char>(v >> (8 * i));
}
void PutU32(std::string& s, size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[off + i] = static_cast<char>(v >> (8 * i));
}
void PutU64(std::string& s, size_t off, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[off + i] = static_cast<char>(v >> (8 * i));
}
uint16_t GetU16(std::string_view s, size_t off) {
  return static_cast<uint16_t>(static_cast<unsigned char>(s[off]) |
                               (static_cast<unsigned char>(s[off + 1]) << 8));
}
uint32_t GetU32(std::string_view s, size_t off) {
  return Read32(reinterpret_cast<const unsigned char*>(s.data() + off));
}
uint64_t GetU64(std::string_view s, size_t off) {
  return Read64(reinterpret_cast<const unsigned char*>(s.data() + off));
}

std::string EncodeEntry(std::string_view digest, std::string_view arch, std::string_view compiler,
                        const CachedKernel& k) {
  // Field lengths are bounded by u16; arch/compiler names are short ("sm_90", "nvrtc-13.0").
  const size_t arch_len = std::min<size_t>(arch.size(), 0xFFFF);
  const size_t comp_len = std::min<size_t>(compiler.size(), 0xFFFF);
  const size_t header = kFixedHeader + arch_len + comp_len + 8;
  const uint64_t payload = k.binary.size() + k.log.size();
  std::string s(header, '\0');
  s.reserve(header + payload);
  std::memcpy(s.data(), kMagic, 8);
  PutU32(s, 8, kFormatVersion);
  PutU32(s, 12, static_cast<uint32_t>(header));
  std::memcpy(s.data() + 16, digest.data(), std::min<size_t>(digest.size(), 32));
  PutU16(s, 48, static_cast<uint16_t>(arch_len));
  PutU16(s, 50, static_cast<uint16_t>(comp_len));
  PutU32(s, 52, 0);
  PutU64(s, 56, std::bit_cast<uint64_t>(k.compile_ms));
  PutU64(s, 64, k.binary.size());
  PutU64(s, 72, k.log.size());
  PutU64(s, 80, payload);
  Xxh64 ph(kPayloadSeed);
  ph.Update(k.binary.data(), k.binary.size());
  ph.Update(k.log.data(), k.log.size());
  PutU64(s, 88, ph.Digest());
  std::memcpy(s.data() + kFixedHeader, arch.data(), arch_len);
  std::memcpy(s.data() + kFixedHeader + arch_len, compiler.data(), comp_len);
  PutU64(s, header - 8, Hash64(std::string_view(s.data(), header - 8), kHeaderSeed));
  s += k.binary;
  s += k.log;
  return s;
}

// Why an entry is rejected is the Status message (one short phrase, used in the log line).
StatusOr<CachedKernel> DecodeEntry(std::string_view b, std::string_view digest,
                                   std::string_view arch, std::string_view compiler) {
  if (b.size() < 8) return Internal(fmt::format("truncated file ({} bytes)", b.size()));
  if (std::memcmp(b.data(), kMagic, 8) != 0) return Internal("bad magic (not an opfuse cache entry)");
  if (b.size() < kFixedHeader + 8) return Internal(fmt::format("truncated header ({} bytes)", b.size()));
  const uint32_t version = GetU32(b, 8);
  if (version != kFormatVersion)
    return Internal(fmt::format("format version {} (expected {})", version, kFormatVersion));
  const uint32_t header = GetU32(b, 12);
  const size_t arch_len = GetU16(b, 48), comp_len = GetU16(b, 50);
  if (header != kFixedHeader + arch_len + comp_len + 8)
    return Internal(fmt::format("bad header size {}", header));
  if (b.size() < header) return Internal(fmt::format("truncated header ({} of {} bytes)", b.size(), header));
  if (GetU64(b, header - 8) != Hash64(b.substr(0, header - 8), kHeaderSeed))
    return Internal("header checksum mismatch");
  const std::string_view file_digest = b.substr(16, 32);
  const std::string_view file_arch = b.substr(kFixedHeader, arch_len);
  const std::string_view file_comp = b.substr(kFixedHeader + arch_len, comp_len);
  if (file_digest != digest)
    return Internal(fmt::format("foreign entry (names key {})", file_digest));
  if (file_arch != arch || file_comp != compiler)
    return Internal(fmt::format("foreign entry (arch {}, compiler {}; expected {}, {})", file_arch,
                                file_comp, arch, compiler));
  const uint64_t bin_size = GetU64(b, 64), log_size = GetU64(b, 72), payload = GetU64(b, 80);
  if (bin_size > kMaxEntryBytes || log_size > kMaxEntryBytes || payload != bin_size + log_size)
    return Internal("inconsistent payload sizes");
  const uint64_t want = header + payload;
  if (b.size() < want)
    return Internal(fmt::format("truncated payload ({} of {} bytes)", b.size(), want));
  if (b.size() > want) return Internal(fmt::format("{} trailing bytes", b.size() - want));
  if (GetU64(b, 88) != Hash64(b.substr(header, payload), kPayloadSeed))
    return Internal("payload checksum mismatch");
  CachedKernel k;
  k.digest = std::string(digest);
  k.compile_ms = std::bit_cast<double>(GetU64(b, 56));
  k.binary.assign(b.data() + header, bin_size);
  k.log.assign(b.data() + header + bin_size, log_size);
  return k;
}

// --------------------------------------------------------------------------------- File I/O

// Reads a whole file; returns 0 or an errno value.
int ReadWholeFile(const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return e;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return EISDIR;
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxEntryBytes) {
    ::close(fd);
    return EFBIG;
  }
  out->resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out->size()) {
    ssize_t n = ::read(fd, out->data() + got, out->size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return e;
    }
    if (n == 0) break;  // shorter than fstat said: the verification reports it truncated
    got += static_cast<size_t>(n);
  }
  out->resize(got);
  ::close(fd);
  return 0;
}

struct timespec NowRealtime() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

// Sets atime and mtime to the precise current time (the kernel's own "now" is coarse, ~ms, which
// would make entries written in one burst indistinguishable for LRU).
void TouchPath(const std::string& path) {
  struct timespec t[2] = {NowRealtime(), NowRealtime()};
  (void)::utimensat(AT_FDCWD, path.c_str(), t, 0);
}

Status WriteAll(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Internal(std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

std::atomic<uint64_t> g_temp_counter{0};

// Writes `data` to `path` atomically: unique temp file in the same folder, then rename().
Status WriteAtomically(const std::string& path, std::string_view data) {
  fs::path p(path);
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  if (ec) return Internal(fmt::format("cannot create directory {}: {}", p.parent_path().string(), ec.message()));
  const std::string tmp =
      (p.parent_path() / fmt::format(".{}.tmp.{}.{}.{}", p.filename().string(), ::getpid(),
                                     g_temp_counter.fetch_add(1), NowRealtime().tv_nsec))
          .string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Internal(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  Status st = WriteAll(fd, data);
  if (st.ok()) {
    struct timespec t[2] = {NowRealtime(), NowRealtime()};
    (void)::futimens(fd, t);
  }
  if (::close(fd) != 0 && st.ok()) st = Internal(std::strerror(errno));
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return Internal(fmt::format("cannot write {}: {}", tmp, st.message()));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return Internal(fmt::format("cannot rename to {}: {}", path, std::strerror(e)));
  }
  return Status::Ok();
}

void LogLine(const std::string& msg) {
  std::string line = "opfuse cache: " + msg + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);  // one write: lines do not interleave
}

bool IsShardDir(const std::string& name) {
  return name.size() == 2 && IsHexDigest(name + std::string(30, '0'));
}
bool IsEntryName(const std::string& name) {
  return name.size() == 32 + kEntrySuffix.size() && name.ends_with(kEntrySuffix) &&
         IsHexDigest(std::string_view(name).substr(0, 32));
}
bool IsTempName(const std::string& name) {
  return name.starts_with('.') && name.find(kTempMarker) != std::string::npos;
}

}  // namespace

// ===================================================================================== API

uint64_t Hash64(std::string_view data, uint64_t seed) {
  Xxh64 h(seed);
  h.Update(data.data(), data.size());
  return h.Digest();
}

std::string KernelKey::Digest() const {
  Xxh64 hi(kSeedHi), lo(kSeedLo);
  auto field = [&](std::string_view f) {
    hi.UpdateU64(f.size());
    hi.Update(f.data(), f.size());
    lo.UpdateU64(f.size());
    lo.Update(f.data(), f.size());
  };
  field(kKeyTag);
  field(source);
  field(arch);
  field(compiler);
  field(options);
  std::string out;
  out.reserve(32);
  AppendHex64(out, hi.Digest());
  AppendHex64(out, lo.Digest());
  return out;
}

std::string ResolveCacheDir(const std::string& configured) {
  if (!configured.empty()) return configured;
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  if (std::string d = env("OPFUSE_CACHE_DIR"); !d.empty()) return d;
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty() && x[0] == '/') return x + "/opfuse";
  std::string home = env("HOME");
  if (home.empty()) {
    struct passwd pw, *res = nullptr;
    char buf[4096];
    if (::getpwuid_r(::getuid(), &pw, buf, sizeof buf, &res) == 0 && res && res->pw_dir)
      home = res->pw_dir;
  }
  if (home.empty()) return "";
  return home + "/.cache/opfuse";
}

std::string EncodeCacheEntry(const KernelKey& key, const CachedKernel& kernel) {
  return EncodeEntry(key.Digest(), key.arch, key.compiler, kernel);
}

StatusOr<CachedKernel> DecodeCacheEntry(std::string_view bytes, const KernelKey& key) {
  return DecodeEntry(bytes, key.Digest(), key.arch, key.compiler);
}

// ================================================================================ KernelCache

struct KernelCache::Impl {
  struct Slot {
    bool done = false;
    std::shared_ptr<const CachedKernel> value;   // set when done and ok
    Status error;                                // set when done and failed
    std::chrono::steady_clock::time_point last_touch;
  };

  CacheOptions opts;
  std::string dir;  // resolved; "" when the disk cache is off

  mutable std::mutex mu;
  std::condition_variable cv;
  std::unordered_map<std::string, std::shared_ptr<Slot>> slots;
  CacheStats stats;
  int write_failures_logged = 0;

  std::mutex disk_mu;             // size bookkeeping + eviction scans
  bool disk_scanned = false;
  int64_t disk_bytes = 0;         // bytes of entries on disk as far as this process knows

  static constexpr auto kMemoryTouchInterval = std::chrono::seconds(60);
  static constexpr int kMaxWriteFailureLogs = 3;

  std::string PathFor(const std::string& digest) const {
    std::string p;
    p.reserve(dir.size() + 4 + digest.size() + kEntrySuffix.size());
    p += dir;
    p += '/';
    p.append(digest, 0, 2);
    p += '/';
    p += digest;
    p += kEntrySuffix;
    return p;
  }

  void NoteWriteFailure(const std::string& why) {
    bool log = false, last = false;
    {
      std::lock_guard<std::mutex> lk(mu);
      ++stats.disk_write_failures;
      if (write_failures_logged < kMaxWriteFailureLogs) {
        log = true;
        last = ++write_failures_logged == kMaxWriteFailureLogs;
      }
    }
    if (log)
      LogLine(why + "; kernel kept in memory only" +
              (last ? " (further disk write failures are counted, not reported)" : ""));
  }

  // Rescans the directory: totals the entries, removes stale temp files and, when over the limit,
  // deletes least-recently-used entries (never `keep`). Caller holds disk_mu.
  void ScanAndEvict(const std::string& keep) {
    struct Entry {
      std::string path;
      int64_t size;
      struct timespec mtime;
    };
    std::vector<Entry> entries;
    int64_t total = 0;
    const time_t stale_before = NowRealtime().tv_sec - 3600;
    std::error_code ec;
    for (fs::directory_iterator shard(dir, ec), end; !ec && shard != end; shard.increment(ec)) {
      const std::string shard_name = shard->path().filename().string();
      if (!IsShardDir(shard_name)) continue;
      std::error_code ec2;
      for (fs::directory_iterator f(shard->path(), ec2), fend; !ec2 && f != fend; f.increment(ec2)) {
        const std::string name = f->path().filename().string();
        const std::string path = f->path().string();
        struct stat st;
        if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (IsEntryName(name)) {
          entries.push_back({path, static_cast<int64_t>(st.st_size), st.st_mtim});
          total += st.st_size;
        } else if (IsTempName(name) && st.st_mtim.tv_sec < stale_before) {
          ::unlink(path.c_str());
        }
      }
    }
    int64_t evicted = 0;
    if (opts.max_disk_bytes > 0 && total > opts.max_disk_bytes) {
      std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
        if (a.mtime.tv_sec != b.mtime.tv_sec) return a.mtime.tv_sec < b.mtime.tv_sec;
        if (a.mtime.tv_nsec != b.mtime.tv_nsec) return a.mtime.tv_nsec < b.mtime.tv_nsec;
        return a.path < b.path;
      });
      for (const Entry& e : entries) {
        if (total <= opts.max_disk_bytes) break;
        if (e.path == keep) continue;
        if (::unlink(e.path.c_str()) == 0) {
          ++evicted;
          total -= e.size;
        } else if (errno == ENOENT) {
          total -= e.size;  // another process removed it
        }
      }
    }
    disk_bytes = total;
    disk_scanned = true;
    if (evicted) {
      std::lock_guard<std::mutex> lk(mu);
      stats.evictions += evicted;
    }
  }

  void AccountWrite(const std::string& path, int64_t bytes) {
    std::lock_guard<std::mutex> lk(disk_mu);
    if (!disk_scanned) {
      ScanAndEvict(path);  // counts the new file too
      return;
    }
    disk_bytes += bytes;  // may over-count a replaced entry; the rescan corrects it
    if (opts.max_disk_bytes > 0 && disk_bytes > opts.max_disk_bytes) ScanAndEvict(path);
  }

  // Disk lookup then compile. Runs without mu held; only the owner of the slot calls it.
  StatusOr<std::shared_ptr<const CachedKernel>> LoadOrCompile(const KernelKey& key,
                                                              const std::string& digest,
                                                              const CompileFn& compile) {
    std::string path;
    bool bad_entry = false;  // an unusable file sits at `path`: replace or delete it
    if (!dir.empty()) {
      path = PathFor(digest);
      std::string bytes;
      const int err = ReadWholeFile(path, &bytes);
      if (err == 0) {
        auto decoded = DecodeEntry(bytes, digest, key.arch, key.compiler);
        if (decoded.ok()) {
          TouchPath(path);
          std::lock_guard<std::mutex> lk(mu);
          ++stats.disk_hits;
          return std::shared_ptr<const CachedKernel>(
              std::make_shared<CachedKernel>(std::move(decoded).value()));
        }
        LogLine(fmt::format("{}: {}; recompiling", path, decoded.status().message()));
        bad_entry = true;
        std::lock_guard<std::mutex> lk(mu);
        ++stats.corrupt_entries;
      } else if (err != ENOENT && err != ENOTDIR) {
        LogLine(fmt::format("{}: cannot read ({}); recompiling", path, std::strerror(err)));
        bad_entry = err == EISDIR || err == EFBIG;
        if (bad_entry) {
          std::lock_guard<std::mutex> lk(mu);
          ++stats.corrupt_entries;
        }
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu);
      ++stats.misses;
      ++stats.compiles;
    }
    const auto t0 = std::chrono::steady_clock::now();
    StatusOr<CachedKernel> compiled = Internal("compile not run");
    try {
      compiled = compile();
    } catch (const std::exception& e) {
      compiled = Internal(fmt::format("kernel compile threw: {}", e.what()));
    } catch (...) {
      compiled = Internal("kernel compile threw an unknown exception");
    }
    const double measured_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!compiled.ok()) {
      if (bad_entry) ::unlink(path.c_str());
      return compiled.status();
    }
    auto kernel = std::make_shared<CachedKernel>(std::move(compiled).value());
    kernel->digest = digest;
    if (kernel->compile_ms <= 0) kernel->compile_ms = measured_ms;
    {
      std::lock_guard<std::mutex> lk(mu);
      stats.compile_ms += kernel->compile_ms;
    }
    if (!dir.empty()) {
      const std::string bytes = EncodeEntry(digest, key.arch, key.compiler, *kernel);
      Status st = WriteAtomically(path, bytes);
      if (st.ok()) {
        AccountWrite(path, static_cast<int64_t>(bytes.size()));
      } else {
        NoteWriteFailure(st.message());
        if (bad_entry) ::unlink(path.c_str());
      }
    }
    return std::shared_ptr<const CachedKernel>(std::move(kernel));
  }
};

KernelCache::KernelCache(CacheOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(opts);
  if (impl_->opts.enable_disk) {
    impl_->dir = ResolveCacheDir(impl_->opts.dir);
    while (impl_->dir.size() > 1 && impl_->dir.back() == '/') impl_->dir.pop_back();
    if (impl_->dir.empty())
      LogLine("no cache directory (set OPFUSE_CACHE_DIR or HOME); disk cache off");
  }
}

KernelCache::~KernelCache() = default;

bool KernelCache::Contains(const KernelKey& key) const {
  const Impl& m = *impl_;
  const std::string digest = key.Digest();
  {
    std::lock_guard<std::mutex> lk(m.mu);
    auto it = m.slots.find(digest);
    if (it != m.slots.end() && it->second->done && it->second->value) return true;
  }
  if (m.dir.empty()) return false;
  std::error_code ec;
  return std::filesystem::is_regular_file(m.PathFor(digest), ec);
}

StatusOr<std::shared_ptr<const CachedKernel>> KernelCache::GetOrCompile(const KernelKey& key,
                                                                        const CompileFn& compile) {
  Impl& m = *impl_;
  const std::string digest = key.Digest();
  std::shared_ptr<Impl::Slot> slot;
  {
    std::unique_lock<std::mutex> lk(m.mu);
    auto it = m.slots.find(digest);
    if (it != m.slots.end()) {
      slot = it->second;
      if (!slot->done) m.cv.wait(lk, [&] { return slot->done; });
      if (!slot->value) return slot->error;  // the in-flight compile we waited for failed
      ++m.stats.memory_hits;
      bool touch = false;
      if (!m.dir.empty()) {
        const auto now = std::chrono::steady_clock::now();
        if (now - slot->last_touch > Impl::kMemoryTouchInterval) {
          slot->last_touch = now;
          touch = true;
        }
      }
      std::shared_ptr<const CachedKernel> value = slot->value;
      lk.unlock();
      if (touch) TouchPath(m.PathFor(digest));  // keeps hot entries young for the disk LRU
      return value;
    }
    slot = std::make_shared<Impl::Slot>();
    m.slots.emplace(digest, slot);
  }

  auto result = m.LoadOrCompile(key, digest, compile);
  {
    std::lock_guard<std::mutex> lk(m.mu);
    slot->done = true;
    slot->last_touch = std::chrono::steady_clock::now();
    if (result.ok()) slot->value = result.value();
    else slot->error = result.status();
    if (!result.ok() || !m.opts.enable_memory) {
      auto it = m.slots.find(digest);
      if (it != m.slots.end() && it->second == slot) m.slots.erase(it);
    }
  }
  m.cv.notify_all();
  return result;
}

CacheStats KernelCache::Stats() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->stats;
}

void KernelCache::ClearMemory() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  for (auto it = impl_->slots.begin(); it != impl_->slots.end();) {
    if (it->second->done) it = impl_->slots.erase(it);
    else ++it;
  }
}

Status KernelCache::ClearDisk() {
  Impl& m = *impl_;
  if (m.dir.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lk(m.disk_mu);
  // Only our own files (2-hex shard folders, <digest>.okc and temp files) are removed: the
  // directory may have been pointed at a folder that holds other things.
  std::string first_error;
  std::error_code ec;
  fs::directory_iterator shard(m.dir, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return Status::Ok();
    return Internal(fmt::format("cannot list {}: {}", m.dir, ec.message()));
  }
  for (fs::directory_iterator end; !ec && shard != end; shard.increment(ec)) {
    if (!IsShardDir(shard->path().filename().string())) continue;
    std::error_code ec2;
    for (fs::directory_iterator f(shard->path(), ec2), fend; !ec2 && f != fend; f.increment(ec2)) {
      const std::string name = f->path().filename().string();
      if (!IsEntryName(name) && !IsTempName(name)) continue;
      if (::unlink(f->path().c_str()) != 0 && errno != ENOENT && first_error.empty())
        first_error = fmt::format("cannot remove {}: {}", f->path().string(), std::strerror(errno));
    }
    ::rmdir(shard->path().c_str());  // only succeeds when empty
  }
  m.disk_bytes = 0;
  m.disk_scanned = false;
  if (!first_error.empty()) return Internal(first_error);
  return Status::Ok();
}

const std::string& KernelCache::dir() const { return impl_->dir; }

std::string KernelCache::EntryPath(const KernelKey& key) const {
  if (impl_->dir.empty()) return "";
  return impl_->PathFor(key.Digest());
}

KernelCache& KernelCache::Global() {
  static KernelCache* cache = new KernelCache();  // never destroyed: usable during exit
  return *cache;
}

}  // namespace opfuse::jit
