#pragma once
// Just enough of ELF to tell whether a shared object of a wheel can run on a target, without
// loading it: its section table, its dynamic symbols (defined and undefined), the symbol
// versions it needs (.gnu.version_r: GLIBC_2.34 ...) and a section's bytes (.nv_fatbin).
// ELF64 little endian only (x86_64, aarch64, ppc64le); anything else is an error that says so.
//
// The bytes are hostile (a wheel from anyone): every offset and size is checked against the
// file, and counts and sizes are bounded by ElfLimits. Bytes are read through ReadAt, so that a
// library of torch is read in the few pieces needed and never as a whole.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fs/common/expected.h"
#include "fs/common/function_ref.h"

namespace whfs::wheel {

// What one call may hold, whatever the file says: with these defaults dynamic_symbols() holds
// at most some 200 MiB (a string table, the names, 1M entries).
struct ElfLimits {
  std::uint64_t max_sections = 1u << 16;
  std::uint64_t max_symbols = 1u << 20;       // libtorch_cpu.so exports some 10^5
  std::uint64_t max_table_bytes = 64u << 20;  // one .dynstr, .gnu.version_r or .shstrtab
  std::uint64_t max_name = 1u << 16;          // one symbol or section name
  // All the names one call returns together: many entries may point at one long name.
  std::uint64_t max_name_bytes = 64u << 20;
  std::uint64_t max_versions = 1u << 16;  // entries of .gnu.version_r, all files together
};

// `length` bytes at `offset` of the file; the callee checks nothing about ELF.
using ReadAt =
    FunctionRef<Expected<std::string, std::string>(std::uint64_t offset, std::uint64_t length)>;

inline constexpr std::uint32_t kShtNobits = 8;
inline constexpr std::uint32_t kShtDynsym = 11;
inline constexpr std::uint32_t kShtGnuVerneed = 0x6ffffffe;
inline constexpr std::uint16_t kEtDyn = 3;
inline constexpr std::uint16_t kEmCuda = 190;

struct ElfSection {
  std::string name;
  std::uint32_t type = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint32_t link = 0;
  std::uint32_t info = 0;
};

struct ElfFile {
  std::uint64_t file_size = 0;
  std::uint16_t type = 0;  // 3: a shared object
  std::uint16_t machine = 0;
  std::uint8_t abi_version = 0;  // e_ident[EI_ABIVERSION]
  std::uint32_t flags = 0;       // e_flags
  std::vector<ElfSection> sections;

  const ElfSection* find(std::string_view name) const;
};

// Whether `head` (the first bytes of a file) starts with the ELF magic.
bool is_elf(std::string_view head);

// The header and section table of the file of `file_size` bytes. The error says what is wrong
// ("not a valid ELF file: its section table runs past the end").
Expected<ElfFile, std::string> read_elf(std::uint64_t file_size, ReadAt read,
                                        const ElfLimits& limits = {});

// The header alone, from the first 64 bytes (a cubin inside a fat binary).
Expected<ElfFile, std::string> read_elf_header(std::string_view head);

// The file bytes of a section, at most `max` of them.
Expected<std::string, std::string> read_section(const ElfFile& elf, const ElfSection& s,
                                                ReadAt read, std::uint64_t max);

struct DynamicSymbol {
  std::string name;  // mangled, as the linker sees it
  bool defined = false;
  bool weak = false;
};

// The symbols of .dynsym (the first, null one left out); none when there is no .dynsym.
Expected<std::vector<DynamicSymbol>, std::string> dynamic_symbols(const ElfFile& elf, ReadAt read,
                                                                  const ElfLimits& limits = {});

struct NeededVersion {
  std::string file;     // libc.so.6
  std::string version;  // GLIBC_2.34
};

// The versions of .gnu.version_r; none when there is no such section.
Expected<std::vector<NeededVersion>, std::string> needed_versions(const ElfFile& elf, ReadAt read,
                                                                  const ElfLimits& limits = {});

// "GLIBC_2.34" -> {2, 34}; "GLIBC_2.2.5" -> {2, 2}; anything else -> {0, 0}.
std::pair<int, int> glibc_version_of(std::string_view version);

}  // namespace whfs::wheel
