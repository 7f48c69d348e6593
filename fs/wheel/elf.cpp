#include "fs/wheel/elf.h"

#include <algorithm>
#include <cstring>

#include "fs/wheel/little_endian.h"

namespace whfs::wheel {
namespace {

constexpr std::size_t kHeaderSize = 64;
constexpr std::size_t kSectionHeaderSize = 64;
constexpr std::size_t kSymbolSize = 24;
constexpr std::size_t kVerneedSize = 16;
constexpr std::size_t kVernauxSize = 16;

Unexpected<std::string> bad(const std::string& why) {
  return unexpected("not a valid ELF file: " + why);
}

// The NUL-terminated string at `at` of a string table, at most `max` bytes long.
Expected<std::string, std::string> string_at(std::string_view table, std::uint64_t at,
                                             std::uint64_t max, const char* what) {
  if (at >= table.size()) return bad(std::string(what) + " name points past its string table");
  const std::string_view rest = table.substr(static_cast<std::size_t>(at));
  const auto end = rest.find('\0');
  if (end == std::string_view::npos) return bad(std::string(what) + " name is not terminated");
  if (end > max) {
    return bad(std::string("a ") + what + " name of " + std::to_string(end) + " bytes (at most " +
               std::to_string(max) + ")");
  }
  return std::string(rest.substr(0, end));
}

// The bytes of the names a call copies out, counted against ElfLimits::max_name_bytes.
class NameBudget {
 public:
  explicit NameBudget(std::uint64_t max) : max_(max) {}
  Expected<void, std::string> take(const std::string& name, const char* what) {
    if (name.size() > max_ - used_) {
      return bad(std::string(what) + " names of over " + std::to_string(max_) + " bytes in all");
    }
    used_ += name.size();
    return {};
  }

 private:
  std::uint64_t max_;
  std::uint64_t used_ = 0;
};

// The section `index` links to, which must exist.
Expected<const ElfSection*, std::string> linked(const ElfFile& elf, const ElfSection& s) {
  if (s.link == 0 || s.link >= elf.sections.size()) {
    return bad(s.name + " links to section " + std::to_string(s.link) + ", which does not exist");
  }
  return &elf.sections[s.link];
}

}  // namespace

const ElfSection* ElfFile::find(std::string_view name) const {
  for (const auto& s : sections) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

bool is_elf(std::string_view head) {
  return head.starts_with(
      "\x7f"
      "ELF");
}

Expected<ElfFile, std::string> read_elf_header(std::string_view head) {
  if (!is_elf(head)) return bad("no ELF magic");
  if (head.size() < kHeaderSize) return bad("shorter than an ELF header");
  if (head[4] != 2 || head[5] != 1) {
    return unexpected(std::string("an ELF file that is not 64-bit little endian (not read)"));
  }
  ElfFile e;
  e.abi_version = static_cast<std::uint8_t>(head[8]);
  e.type = static_cast<std::uint16_t>(little_endian(head, 16, 2));
  e.machine = static_cast<std::uint16_t>(little_endian(head, 18, 2));
  e.flags = static_cast<std::uint32_t>(little_endian(head, 48, 4));
  return e;
}

Expected<ElfFile, std::string> read_elf(std::uint64_t file_size, ReadAt read,
                                        const ElfLimits& limits) {
  if (file_size < kHeaderSize) return bad("shorter than an ELF header");
  auto head = read(0, kHeaderSize);
  if (!head) return unexpected(head.error());
  auto e = read_elf_header(*head);
  if (!e) return e;
  e->file_size = file_size;
  const std::uint64_t shoff = little_endian(*head, 40, 8);
  const std::uint64_t shentsize = little_endian(*head, 58, 2);
  std::uint64_t shnum = little_endian(*head, 60, 2);
  std::uint64_t shstrndx = little_endian(*head, 62, 2);
  if (shoff == 0) return e;  // no section table (stripped to the bone): nothing to read
  if (shentsize != kSectionHeaderSize) {
    return bad("section headers of " + std::to_string(shentsize) + " bytes (64 expected)");
  }
  if (shoff > file_size || file_size - shoff < kSectionHeaderSize) {
    return bad("its section table lies outside the file");
  }
  if (shnum == 0 || shstrndx == 0xffff) {  // the real values are in section 0
    auto first = read(shoff, kSectionHeaderSize);
    if (!first) return unexpected(first.error());
    if (shnum == 0) shnum = little_endian(*first, 32, 8);
    if (shstrndx == 0xffff) shstrndx = little_endian(*first, 40, 4);
  }
  if (shnum > limits.max_sections) {
    return bad(std::to_string(shnum) + " sections (at most " + std::to_string(limits.max_sections) +
               " are read)");
  }
  if (shnum > (file_size - shoff) / kSectionHeaderSize) {
    return bad("its section table runs past the end of the file");
  }
  auto table = read(shoff, shnum * kSectionHeaderSize);
  if (!table) return unexpected(table.error());
  std::vector<std::uint64_t> name_offsets;
  e->sections.reserve(static_cast<std::size_t>(shnum));
  for (std::size_t i = 0; i < shnum; ++i) {
    const std::size_t at = i * kSectionHeaderSize;
    ElfSection s;
    name_offsets.push_back(little_endian(*table, at, 4));
    s.type = static_cast<std::uint32_t>(little_endian(*table, at + 4, 4));
    s.offset = little_endian(*table, at + 24, 8);
    s.size = little_endian(*table, at + 32, 8);
    s.link = static_cast<std::uint32_t>(little_endian(*table, at + 40, 4));
    s.info = static_cast<std::uint32_t>(little_endian(*table, at + 44, 4));
    if (s.type != kShtNobits && (s.offset > file_size || s.size > file_size - s.offset)) {
      return bad("section " + std::to_string(i) + " lies outside the file");
    }
    e->sections.push_back(std::move(s));
  }
  if (shstrndx == 0) return e;  // sections without names
  if (shstrndx >= shnum) return bad("its section name table does not exist");
  auto names = read_section(*e, e->sections[static_cast<std::size_t>(shstrndx)], read,
                            limits.max_table_bytes);
  if (!names) return unexpected(names.error());
  NameBudget budget(limits.max_name_bytes);
  for (std::size_t i = 0; i < e->sections.size(); ++i) {
    if (name_offsets[i] == 0) continue;
    auto name = string_at(*names, name_offsets[i], limits.max_name, "section");
    if (!name) return unexpected(name.error());
    if (auto ok = budget.take(*name, "section"); !ok) return unexpected(ok.error());
    e->sections[i].name = std::move(*name);
  }
  return e;
}

Expected<std::string, std::string> read_section(const ElfFile& elf, const ElfSection& s,
                                                ReadAt read, std::uint64_t max) {
  if (s.type == kShtNobits || s.size == 0) return std::string();
  if (s.size > max) {
    return bad("section " + (s.name.empty() ? std::string("?") : s.name) + " is " +
               std::to_string(s.size) + " bytes (at most " + std::to_string(max) + " are read)");
  }
  if (s.offset > elf.file_size || s.size > elf.file_size - s.offset) {
    return bad("section " + s.name + " lies outside the file");
  }
  auto bytes = read(s.offset, s.size);
  if (bytes && bytes->size() != s.size) return bad("section " + s.name + " was read short");
  return bytes;
}

Expected<std::vector<DynamicSymbol>, std::string> dynamic_symbols(const ElfFile& elf, ReadAt read,
                                                                  const ElfLimits& limits) {
  std::vector<DynamicSymbol> out;
  const ElfSection* dynsym = nullptr;
  for (const auto& s : elf.sections) {
    if (s.type == kShtDynsym) dynsym = &s;
  }
  if (dynsym == nullptr) return out;
  if (dynsym->size % kSymbolSize != 0) return bad(".dynsym is not a whole number of symbols");
  const std::uint64_t count = dynsym->size / kSymbolSize;
  if (count > limits.max_symbols) {
    return bad(std::to_string(count) + " dynamic symbols (at most " +
               std::to_string(limits.max_symbols) + " are read)");
  }
  auto strtab = linked(elf, *dynsym);
  if (!strtab) return unexpected(strtab.error());
  if (dynsym->offset > elf.file_size || dynsym->size > elf.file_size - dynsym->offset) {
    return bad("section .dynsym lies outside the file");
  }
  auto strings = read_section(elf, **strtab, read, limits.max_table_bytes);
  if (!strings) return unexpected(strings.error());
  out.reserve(static_cast<std::size_t>(count));
  NameBudget budget(limits.max_name_bytes);
  // The symbols a piece at a time: only their names are kept.
  constexpr std::uint64_t kPiece = 1u << 14;
  for (std::uint64_t first = 0; first < count; first += kPiece) {
    const std::uint64_t n = std::min(kPiece, count - first);
    auto syms = read(dynsym->offset + first * kSymbolSize, n * kSymbolSize);
    if (!syms) return unexpected(syms.error());
    if (syms->size() != n * kSymbolSize) return bad("section .dynsym was read short");
    for (std::size_t i = first == 0 ? 1 : 0; i < n; ++i) {
      const std::size_t at = i * kSymbolSize;
      const std::uint64_t name_at = little_endian(*syms, at, 4);
      if (name_at == 0) continue;
      auto name = string_at(*strings, name_at, limits.max_name, "symbol");
      if (!name) return unexpected(name.error());
      if (auto ok = budget.take(*name, "symbol"); !ok) return unexpected(ok.error());
      const auto info = static_cast<std::uint8_t>((*syms)[at + 4]);
      const std::uint64_t shndx = little_endian(*syms, at + 6, 2);
      out.push_back({std::move(*name), shndx != 0, (info >> 4) == 2});
    }
  }
  return out;
}

Expected<std::vector<NeededVersion>, std::string> needed_versions(const ElfFile& elf, ReadAt read,
                                                                  const ElfLimits& limits) {
  std::vector<NeededVersion> out;
  const ElfSection* verneed = nullptr;
  for (const auto& s : elf.sections) {
    if (s.type == kShtGnuVerneed) verneed = &s;
  }
  if (verneed == nullptr) return out;
  auto strtab = linked(elf, *verneed);
  if (!strtab) return unexpected(strtab.error());
  auto bytes = read_section(elf, *verneed, read, limits.max_table_bytes);
  if (!bytes) return unexpected(bytes.error());
  auto strings = read_section(elf, **strtab, read, limits.max_table_bytes);
  if (!strings) return unexpected(strings.error());
  const std::string_view b = *bytes;
  // sh_info holds the number of files; each names its versions in a chain of its own. Every
  // step moves forward, so a loop in the chain ends at the section's end or the count.
  std::uint64_t at = 0;
  NameBudget budget(limits.max_name_bytes);
  for (std::uint64_t file = 0; file < verneed->info; ++file) {
    if (at > b.size() || b.size() - at < kVerneedSize) {
      return bad(".gnu.version_r entry " + std::to_string(file) + " runs past its section");
    }
    const std::uint64_t count = little_endian(b, static_cast<std::size_t>(at) + 2, 2);
    auto file_name = string_at(*strings, little_endian(b, static_cast<std::size_t>(at) + 4, 4),
                               limits.max_name, "version file");
    if (!file_name) return unexpected(file_name.error());
    const std::uint64_t aux = little_endian(b, static_cast<std::size_t>(at) + 8, 4);
    const std::uint64_t next = little_endian(b, static_cast<std::size_t>(at) + 12, 4);
    std::uint64_t v = at + aux;
    for (std::uint64_t i = 0; i < count; ++i) {
      if (out.size() >= limits.max_versions) {
        return bad("over " + std::to_string(limits.max_versions) + " needed versions");
      }
      if (v > b.size() || b.size() - v < kVernauxSize) {
        return bad("a .gnu.version_r version of " + *file_name + " runs past its section");
      }
      auto name = string_at(*strings, little_endian(b, static_cast<std::size_t>(v) + 8, 4),
                            limits.max_name, "version");
      if (!name) return unexpected(name.error());
      if (auto ok = budget.take(*file_name, "version"); !ok) return unexpected(ok.error());
      if (auto ok = budget.take(*name, "version"); !ok) return unexpected(ok.error());
      out.push_back({*file_name, std::move(*name)});
      const std::uint64_t step = little_endian(b, static_cast<std::size_t>(v) + 12, 4);
      if (step == 0) break;
      v += step;
    }
    if (next == 0) break;
    at += next;
  }
  return out;
}

std::pair<int, int> glibc_version_of(std::string_view version) {
  if (!version.starts_with("GLIBC_")) return {0, 0};
  version.remove_prefix(6);
  int parts[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    std::size_t n = 0;
    int value = 0;
    while (n < version.size() && n < 4 && version[n] >= '0' && version[n] <= '9') {
      value = value * 10 + (version[n] - '0');
      ++n;
    }
    if (n == 0) return {0, 0};
    parts[i] = value;
    version.remove_prefix(n);
    if (i == 0) {
      if (!version.starts_with('.')) return {0, 0};
      version.remove_prefix(1);
    }
  }
  if (!version.empty() && !version.starts_with('.')) return {0, 0};
  return {parts[0], parts[1]};
}

}  // namespace whfs::wheel
