// read_fatbin and the ELF readers over hostile bytes: the documented layout is read back, and
// every bound holds (entries past their container, counts, header sizes, truncated tables).
#include "fs/wheel/fatbin.h"

#include <gtest/gtest.h>

#include "fs/wheel/elf.h"
#include "tests/support/fatbin_writer.h"

namespace whfs::wheel {
namespace {

using whfs::test::ptx;
using whfs::test::sass;

Expected<std::string, std::string> slice(std::string_view b, std::uint64_t off, std::uint64_t n) {
  if (off > b.size() || n > b.size() - off) return unexpected(std::string("past the end"));
  return std::string(b.substr(off, n));
}

Expected<std::vector<FatbinContainer>, std::string> parse(const std::string& s,
                                                          const FatbinLimits& l = {}) {
  return read_fatbin(
      s.size(), [&](std::uint64_t o, std::uint64_t n) { return slice(s, o, n); }, l);
}

TEST(Fatbin, TheDocumentedLayoutIsReadBack) {
  auto c = whfs::test::FatEntrySpec{2, 86, false, true};  // compressed
  auto p = ptx(90);
  p.arch_specific = true;
  const std::string s = whfs::test::fatbin_section({{sass(80), ptx(80)}, {sass(90, true), c, p}});
  auto r = parse(s);
  ASSERT_TRUE(r) << r.error();
  ASSERT_EQ(r->size(), 2u);
  ASSERT_EQ((*r)[0].entries.size(), 2u);
  ASSERT_EQ((*r)[1].entries.size(), 3u);
  const auto& e = (*r)[0].entries;
  EXPECT_EQ(e[0].kind, FatbinEntry::Kind::kSass);
  EXPECT_EQ(e[0].arch, 80);
  EXPECT_EQ(e[0].arch_specific, false);
  EXPECT_EQ(code_name(e[0]), "sm_80");
  EXPECT_EQ(e[1].kind, FatbinEntry::Kind::kPtx);
  EXPECT_EQ(e[1].version_major, 8);
  EXPECT_EQ(e[1].version_minor, 5);
  EXPECT_EQ(code_name(e[1]), "compute_80");
  const auto& f = (*r)[1].entries;
  EXPECT_EQ(code_name(f[0]), "sm_90a");
  EXPECT_TRUE(f[1].compressed);
  EXPECT_FALSE(f[1].arch_specific.has_value());
  EXPECT_EQ(code_name(f[1]), "sm_86");
  EXPECT_EQ(code_name(f[2]), "compute_90a");
  EXPECT_EQ((*r)[1].offset, whfs::test::fatbin_container({sass(80), ptx(80)}).size() + 8);
  // An empty section, or zero padding only, holds nothing.
  EXPECT_TRUE(parse("")->empty());
  EXPECT_TRUE(parse(std::string(5000, '\0'))->empty());
}

TEST(Fatbin, MalformedInputIsRefusedWithWhereAndWhy) {
  const std::string good = whfs::test::fatbin_section({{sass(80)}});
  auto error = [](const std::string& s) {
    auto r = parse(s);
    EXPECT_FALSE(r);
    return r ? std::string() : r.error();
  };
  EXPECT_EQ(error("garbage!garbage!"),
            "not a valid fat binary: at offset 0 of .nv_fatbin, no container magic 0xBA55ED50");
  EXPECT_NE(error(good.substr(0, good.size() - 1)).find("runs past the end"), std::string::npos);
  std::string big_entry = good;
  big_entry[16 + 8] = '\x7f';  // payload_size far past the container
  EXPECT_NE(error(big_entry).find("runs past its container"), std::string::npos);
  std::string small_header = good;
  small_header[16 + 4] = 8;  // an entry header of 8 bytes would never advance
  EXPECT_NE(error(small_header).find("an entry header of 8 bytes"), std::string::npos);
  std::string trailing = good + "\x01";
  EXPECT_NE(error(trailing).find("at offset " + std::to_string(good.size())), std::string::npos);
  FatbinLimits l;
  l.max_entries = 2;
  auto many = parse(whfs::test::fatbin_section({{sass(80), sass(86), sass(89)}}), l);
  ASSERT_FALSE(many);
  EXPECT_NE(many.error().find("over 2 entries"), std::string::npos);
  l = {};
  l.max_containers = 1;
  auto two = parse(whfs::test::fatbin_section({{sass(80)}, {sass(86)}}), l);
  ASSERT_FALSE(two);
  EXPECT_NE(two.error().find("over 1 containers"), std::string::npos);
}

// An ELF64 shared object: .shstrtab, .dynsym with `count` symbols that all name the one
// `name_size`-byte string of .dynstr, and the section table at the end.
std::string elf_of_repeated_names(std::size_t count, std::size_t name_size) {
  auto le = [](std::string& s, std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  const std::string shstrtab = std::string("\0.shstrtab\0.dynsym\0.dynstr\0", 27);
  const std::string dynstr = '\0' + std::string(name_size, 'n') + '\0';
  std::string dynsym(24, '\0');
  for (std::size_t i = 0; i < count; ++i) {
    le(dynsym, 1, 4);     // st_name
    le(dynsym, 0x12, 1);  // a global function
    le(dynsym, 0, 1);
    le(dynsym, 1, 2);  // defined
    dynsym.append(16, '\0');
  }
  std::string body = shstrtab + dynstr + dynsym;
  const std::uint64_t shoff = 64 + body.size();
  std::string file = std::string(
                         "\x7f"
                         "ELF\x02\x01\x01",
                         7) +
                     std::string(9, '\0');
  le(file, 3, 2);
  le(file, 62, 2);
  le(file, 1, 4);
  le(file, 0, 8);
  le(file, 0, 8);
  le(file, shoff, 8);
  le(file, 0, 4);
  le(file, 64, 2);
  le(file, 0, 2);
  le(file, 0, 2);
  le(file, 64, 2);
  le(file, 4, 2);
  le(file, 1, 2);
  file += body;
  auto section = [&](std::uint32_t name, std::uint32_t type, std::uint64_t off, std::uint64_t size,
                     std::uint32_t link) {
    le(file, name, 4);
    le(file, type, 4);
    le(file, 0, 8);  // flags
    le(file, 0, 8);  // address
    le(file, off, 8);
    le(file, size, 8);
    le(file, link, 4);
    le(file, 0, 4);
    le(file, 1, 8);
    le(file, 0, 8);
  };
  file.append(64, '\0');
  section(1, 3, 64, shstrtab.size(), 0);
  section(19, 3, 64 + shstrtab.size(), dynstr.size(), 0);
  section(11, kShtDynsym, 64 + shstrtab.size() + dynstr.size(), dynsym.size(), 2);
  return file;
}

TEST(Elf, NamesCopiedOutAreBoundedInAll) {
  // 1000 symbols naming one 1000-byte string: 1 MB of names from a 25 kB file.
  const std::string file = elf_of_repeated_names(1000, 1000);
  auto read = [&](std::uint64_t o, std::uint64_t n) { return slice(file, o, n); };
  auto elf = read_elf(file.size(), read);
  ASSERT_TRUE(elf) << elf.error();
  auto all = dynamic_symbols(*elf, read);
  ASSERT_TRUE(all) << all.error();
  ASSERT_EQ(all->size(), 1000u);
  EXPECT_EQ(all->back().name, std::string(1000, 'n'));
  ElfLimits l;
  l.max_name_bytes = 500000;
  auto capped = dynamic_symbols(*elf, read, l);
  ASSERT_FALSE(capped);
  EXPECT_EQ(capped.error(), "not a valid ELF file: symbol names of over 500000 bytes in all");
  EXPECT_EQ(ElfLimits{}.max_name_bytes, 64u << 20);
}

TEST(Elf, HeadersAndTablesAreBounded) {
  auto read_of = [](const std::string& s) {
    return read_elf(s.size(), [&](std::uint64_t o, std::uint64_t n) { return slice(s, o, n); });
  };
  EXPECT_EQ(read_of("\x7f"
                    "ELF")
                .error(),
            "not a valid ELF file: shorter than an ELF header");
  std::string h = whfs::test::cubin_header(80, false);
  h[4] = 1;  // 32-bit
  EXPECT_NE(read_of(h).error().find("not 64-bit little endian"), std::string::npos);
  h = whfs::test::cubin_header(80, false);
  // A section table at 64 with 100 sections of 64 bytes, in a file of 64 + 128 bytes.
  h.replace(40, 8, std::string("\x40\0\0\0\0\0\0\0", 8));
  h.replace(58, 2, std::string("\x40\0", 2));
  h.replace(60, 2, std::string("\x64\0", 2));
  EXPECT_EQ(read_of(h + std::string(128, '\0')).error(),
            "not a valid ELF file: its section table runs past the end of the file");
  ElfLimits l;
  l.max_sections = 10;
  const std::string file = h + std::string(64 * 100, '\0');
  auto capped = read_elf(
      file.size(), [&](std::uint64_t o, std::uint64_t n) { return slice(file, o, n); }, l);
  ASSERT_FALSE(capped);
  EXPECT_EQ(capped.error(), "not a valid ELF file: 100 sections (at most 10 are read)");
  EXPECT_EQ(glibc_version_of("GLIBC_2.34"), std::make_pair(2, 34));
  EXPECT_EQ(glibc_version_of("GLIBC_2.2.5"), std::make_pair(2, 2));
  EXPECT_EQ(glibc_version_of("GLIBC_PRIVATE"), std::make_pair(0, 0));
  EXPECT_EQ(glibc_version_of("GLIBCXX_3.4.30"), std::make_pair(0, 0));
}

}  // namespace
}  // namespace whfs::wheel
