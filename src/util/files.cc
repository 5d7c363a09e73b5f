#include "util/files.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace opfuse {

namespace fs = std::filesystem;

namespace {
std::string Prefix(std::string_view what, const std::string& path) {
  return what.empty() ? path : fmt::format("{} {}", what, path);
}
}  // namespace

StatusOr<std::string> ReadFileCapped(const std::string& path, int64_t cap, std::string_view what) {
  const std::string p = Prefix(what, path);
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return NotFound(fmt::format("{}: no such file", p));
  if (fs::is_directory(st)) return InvalidArgument(fmt::format("{}: is a directory, not a file", p));
  std::ifstream f(path, std::ios::binary);
  if (!f) return InvalidArgument(fmt::format("{}: cannot open (permission denied?)", p));
  if (fs::is_regular_file(st)) {
    const auto size = fs::file_size(path, ec);
    if (!ec && static_cast<uint64_t>(size) > static_cast<uint64_t>(cap))
      return InvalidArgument(fmt::format("{}: {} bytes, larger than the {} MiB this kind of file may have", p, size,
                                         cap >> 20));
  }
  // Read in blocks up to cap + 1 bytes: a device or pipe (/dev/zero) is bounded as well.
  std::string out;
  char buf[1 << 16];
  while (f) {
    f.read(buf, sizeof buf);
    const std::streamsize n = f.gcount();
    if (n <= 0) break;
    if (static_cast<int64_t>(out.size()) + n > cap)
      return InvalidArgument(fmt::format("{}: larger than the {} MiB this kind of file may have", p, cap >> 20));
    out.append(buf, static_cast<size_t>(n));
  }
  if (f.bad()) return InvalidArgument(fmt::format("{}: read failed", p));
  return out;
}

Status CheckOutputFile(std::string_view flag, const std::string& path) {
  const std::string p = Prefix(flag, path);
  if (path.empty()) return InvalidArgument(fmt::format("{}: empty path", flag));
  std::error_code ec;
  const fs::path fp(path);
  if (fs::is_directory(fp, ec)) return InvalidArgument(fmt::format("{}: is a directory; give a file path", p));
  fs::path dir = fp.parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    return InvalidArgument(fmt::format("{}: folder {} does not exist", p, dir.string()));
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return InvalidArgument(fmt::format("{}: folder {} is not writable", p, dir.string()));
  if (fs::exists(fp, ec) && ::access(fp.c_str(), W_OK) != 0) return InvalidArgument(fmt::format("{}: not writable", p));
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::string_view data) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  std::error_code ec;
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return InvalidArgument(fmt::format("{}: cannot write (is its folder writable?)", path));
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    f.flush();
    if (!f) {
      f.close();
      fs::remove(tmp, ec);
      return InvalidArgument(fmt::format("{}: write failed (disk full?)", path));
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ec2;
    fs::remove(tmp, ec2);
    return InvalidArgument(fmt::format("{}: {}", path, ec.message()));
  }
  return Status::Ok();
}

}  // namespace opfuse
