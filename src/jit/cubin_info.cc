// See cubin_info.h. The ELF64 layout (little-endian, as NVRTC writes it for x86-64 hosts):
//   header: e_shoff at 0x28 (u64), e_shentsize / e_shnum / e_shstrndx at 0x3A (3 x u16);
//   section header (64 bytes): name u32, type u32, flags u64, addr u64, offset u64, size u64,
//     link u32, info u32, addralign u64, entsize u64;
//   .symtab entries (24 bytes): name u32, info u8, other u8, shndx u16, value u64, size u64;
//   .nv.info: a list of attributes, each a format byte and an attribute byte, then by format: none
//     (1), one byte (2), a u16 (3), or a u16 size and that many bytes (4). EIATTR_REGCOUNT (0x2f),
//     format 4, holds the kernel's symbol index (u32) and its register count (u32).
#include "jit/cubin_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace opfuse::jit {
namespace {

constexpr uint8_t kEiattrRegcount = 0x2f;

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool Has(uint64_t off, uint64_t n) const { return off <= b_.size() && n <= b_.size() - off; }
  template <typename T>
  T At(uint64_t off) const {
    T v;
    std::memcpy(&v, b_.data() + off, sizeof(T));
    return v;
  }
  std::string_view Bytes(uint64_t off, uint64_t n) const { return b_.substr(off, n); }

 private:
  std::string_view b_;
};

struct Section {
  uint32_t name, type;
  uint64_t offset, size;
  uint32_t link;
  bool has_data;  // bytes inside the file to read (not SHT_NOBITS, offset + size in bounds)
};

}  // namespace

StatusOr<std::map<std::string, int>> CubinRegisterCounts(std::string_view cubin) {
  const Reader r(cubin);
  if (!r.Has(0, 64) || std::memcmp(cubin.data(), "\x7f" "ELF", 4) != 0)
    return InvalidArgument("cubin: not an ELF file");
  if (cubin[4] != 2 || cubin[5] != 1) return InvalidArgument("cubin: not a little-endian ELF64 file");
  const uint64_t shoff = r.At<uint64_t>(0x28);
  const uint16_t shentsize = r.At<uint16_t>(0x3A), shnum = r.At<uint16_t>(0x3C), shstrndx = r.At<uint16_t>(0x3E);
  if (shentsize < 64 || shnum == 0 || shstrndx >= shnum || !r.Has(shoff, uint64_t{shentsize} * shnum))
    return InvalidArgument("cubin: section headers out of bounds");
  std::vector<Section> secs(shnum);
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t h = shoff + uint64_t{shentsize} * i;
    secs[i] = {r.At<uint32_t>(h), r.At<uint32_t>(h + 4), r.At<uint64_t>(h + 24), r.At<uint64_t>(h + 32),
               r.At<uint32_t>(h + 40), false};
    const bool nobits = secs[i].type == 8;  // SHT_NOBITS: no bytes in the file, whatever offset and size say
    if (!nobits && !r.Has(secs[i].offset, secs[i].size))
      return InvalidArgument(fmt::format("cubin: section {} out of bounds", i));
    secs[i].has_data = !nobits;
  }
  // a NUL-terminated string at `off` of string section `s`
  auto str = [&](const Section& s, uint64_t off) -> StatusOr<std::string> {
    if (!s.has_data) return InvalidArgument("cubin: a string table without data");
    if (off >= s.size) return InvalidArgument("cubin: string offset out of bounds");
    const std::string_view t = r.Bytes(s.offset + off, s.size - off);
    const size_t end = t.find('\0');
    if (end == std::string_view::npos) return InvalidArgument("cubin: unterminated string");
    return std::string(t.substr(0, end));
  };
  const Section& shstr = secs[shstrndx];
  const Section* info = nullptr;
  const Section* symtab = nullptr;
  for (const Section& s : secs) {
    OPFUSE_ASSIGN_OR_RETURN(std::string name, str(shstr, s.name));
    if (name == ".nv.info") info = &s;
    if (s.type == 2 /* SHT_SYMTAB */) symtab = &s;
  }
  if (!info) return NotFound("cubin: no .nv.info section");
  if (!info->has_data) return InvalidArgument("cubin: .nv.info without data");
  if (!symtab || symtab->link >= shnum) return InvalidArgument("cubin: no symbol table");
  const Section& symstr = secs[symtab->link];
  std::map<std::string, int> out;
  for (uint64_t p = 0; p < info->size;) {
    if (info->size - p < 2) return InvalidArgument("cubin: truncated .nv.info attribute");
    const uint8_t format = r.At<uint8_t>(info->offset + p), attr = r.At<uint8_t>(info->offset + p + 1);
    p += 2;
    uint64_t value_off = p, value_size = 0;
    switch (format) {
      case 1: break;
      case 2: value_size = 1; break;
      case 3: value_size = 2; break;
      case 4:
        if (info->size - p < 2) return InvalidArgument("cubin: truncated .nv.info attribute");
        value_size = r.At<uint16_t>(info->offset + p);
        value_off = p + 2;
        break;
      default: return InvalidArgument(fmt::format("cubin: unknown .nv.info attribute format {}", format));
    }
    if (value_off > info->size || value_size > info->size - value_off)
      return InvalidArgument("cubin: .nv.info attribute out of bounds");
    if (attr == kEiattrRegcount) {
      if (format != 4 || value_size != 8) return InvalidArgument("cubin: malformed EIATTR_REGCOUNT");
      const uint32_t sym = r.At<uint32_t>(info->offset + value_off);
      const uint32_t regs = r.At<uint32_t>(info->offset + value_off + 4);
      if (uint64_t{sym} * 24 + 24 > symtab->size) return InvalidArgument("cubin: EIATTR_REGCOUNT names no symbol");
      if (regs > 255) return InvalidArgument(fmt::format("cubin: {} registers per thread (at most 255)", regs));
      OPFUSE_ASSIGN_OR_RETURN(std::string name, str(symstr, r.At<uint32_t>(symtab->offset + uint64_t{sym} * 24)));
      out[name] = static_cast<int>(regs);
    }
    p = value_off + value_size;
  }
  return out;
}

int ResidentThreadsSm90(int registers, int threads_per_block) {
  if (threads_per_block <= 0 || threads_per_block > 1024) return 0;
  const int warps = (threads_per_block + 31) / 32;
  const int regs_per_warp = std::max(1, (registers * 32 + 255) / 256) * 256;
  const int by_regs = 65536 / (regs_per_warp * warps);
  const int blocks = std::min({by_regs, 32, 2048 / threads_per_block});
  return blocks * threads_per_block;
}

}  // namespace opfuse::jit
