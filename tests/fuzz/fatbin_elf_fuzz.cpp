// Fuzzes the readers `wheelhouse check` runs over a wheel's shared objects (fs/wheel/elf.h,
// fatbin.h): the input is a whole ELF file, and also a .nv_fatbin section by itself. Any
// crash, sanitizer report or read outside the input is a bug; so is an accepted section or
// entry that lies outside what was read.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fs/wheel/elf.h"
#include "fs/wheel/fatbin.h"

namespace {

using whfs::Expected;

// Reads inside `bytes` only; a read past its end is a bug of the caller's bounds checks.
struct Reader {
  std::string_view bytes;
  Expected<std::string, std::string> operator()(std::uint64_t off, std::uint64_t len) const {
    if (off > bytes.size() || len > bytes.size() - off) std::abort();
    return std::string(bytes.substr(off, len));
  }
};

void fatbin(std::string_view bytes) {
  const Reader read{bytes};
  whfs::wheel::FatbinLimits limits;
  limits.max_entries = 4096;
  auto r = whfs::wheel::read_fatbin(bytes.size(), read, limits);
  if (!r) return;
  for (const auto& c : *r) {
    if (c.offset >= bytes.size()) std::abort();
    for (const auto& e : c.entries) {
      if (e.offset >= bytes.size()) std::abort();
      (void)whfs::wheel::code_name(e);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  fatbin(bytes);
  const Reader read{bytes};
  whfs::wheel::ElfLimits limits;
  limits.max_sections = 256;
  limits.max_symbols = 1u << 14;
  auto elf = whfs::wheel::read_elf(size, read, limits);
  if (!elf) return 0;
  for (const auto& s : elf->sections) {
    if (s.type != whfs::wheel::kShtNobits && (s.offset > size || s.size > size - s.offset)) {
      std::abort();
    }
  }
  (void)whfs::wheel::dynamic_symbols(*elf, read, limits);
  if (auto v = whfs::wheel::needed_versions(*elf, read, limits)) {
    for (const auto& n : *v) (void)whfs::wheel::glibc_version_of(n.version);
  }
  if (const auto* s = elf->find(".nv_fatbin"); s != nullptr && s->type != whfs::wheel::kShtNobits) {
    fatbin(bytes.substr(s->offset, s->size));
  }
  return 0;
}
