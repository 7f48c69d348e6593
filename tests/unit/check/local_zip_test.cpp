// LocalZip and MemberReader over hostile members: inflating stops at the declared size, a size
// the compressed bytes cannot give is refused before inflating, and random reads of a deflated
// member (from restart points) give its bytes without holding it whole.
#include "fs/check/local_zip.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>

#include "tests/support/fakehub.h"
#include "tests/support/zip_writer.h"

namespace whfs::check {
namespace {

using whfs::test::make_zip;
using whfs::test::Member;

// Sets the uncompressed size that `name`'s local header and central directory entry declare.
std::string declaring(std::string zip, const std::string& name, std::uint32_t size) {
  auto set = [&](std::size_t at) {
    for (int i = 0; i < 4; ++i) zip[at + i] = static_cast<char>((size >> (8 * i)) & 0xff);
  };
  for (std::size_t at = 0; (at = zip.find("PK\x03\x04", at)) != std::string::npos; ++at) {
    if (zip.compare(at + 30, name.size(), name) == 0) set(at + 22);
  }
  for (std::size_t at = 0; (at = zip.find("PK\x01\x02", at)) != std::string::npos; ++at) {
    if (zip.compare(at + 46, name.size(), name) == 0) set(at + 24);
  }
  return zip;
}

// Text that deflates in many blocks (not just runs of one byte).
std::string text(std::size_t size) {
  std::mt19937 rng(7);
  static constexpr char kWords[][8] = {"wheel ", "torch ", "cuda ", "sm_90 ", "glibc ", "ptx\n"};
  std::string out;
  while (out.size() < size) out += kWords[rng() % 6];
  out.resize(size);
  return out;
}

class LocalZipTest : public ::testing::Test {
 protected:
  LocalZip open(const std::string& zip) {
    const std::string path = dir_.path() + "/w" + std::to_string(++files_) + ".whl";
    std::ofstream(path, std::ios::binary) << zip;
    auto f = CheckedFile::open(path);
    EXPECT_TRUE(f) << f.error();
    return LocalZip(*f);
  }

  static wheel::ZipEntry entry(const LocalZip& zip, const std::string& name) {
    auto entries = zip.directory();
    EXPECT_TRUE(entries) << entries.error();
    for (const auto& e : *entries) {
      if (e.name == name) return e;
    }
    ADD_FAILURE() << "no " << name;
    return {};
  }

  whfs::test::TempDir dir_{"local-zip"};
  int files_ = 0;
};

TEST_F(LocalZipTest, InflatingStopsAtTheDeclaredSize) {
  // 8 MiB that declares 100 bytes: no more than 100 reach the sink, and the error names it.
  const LocalZip zip = open(
      declaring(make_zip({{"pkg/_C.so", std::string(8 << 20, '\0'), true}}), "pkg/_C.so", 100));
  const auto e = entry(zip, "pkg/_C.so");
  ASSERT_EQ(e.size, 100u);
  std::uint64_t given = 0;
  auto streamed = zip.stream_member(e, [&](const char*, std::size_t n) { given += n; });
  ASSERT_FALSE(streamed);
  EXPECT_EQ(streamed.error(),
            "pkg/_C.so: its compressed data gives more than the 100 bytes it declares");
  EXPECT_LE(given, 100u);
  auto held = zip.member(e, 2ull << 30);
  ASSERT_FALSE(held);
  EXPECT_EQ(held.error(), streamed.error());
  auto reader = MemberReader::open(zip, e);
  ASSERT_FALSE(reader);
  EXPECT_EQ(reader.error(), streamed.error());
}

TEST_F(LocalZipTest, ASizeItsCompressedBytesCannotGiveIsRefusedBeforeInflating) {
  const LocalZip zip = open(
      declaring(make_zip({{"pkg/big.so", std::string(4096, 'x'), true}}), "pkg/big.so", 1u << 30));
  const auto e = entry(zip, "pkg/big.so");
  bool called = false;
  auto streamed = zip.stream_member(e, [&](const char*, std::size_t) { called = true; });
  ASSERT_FALSE(streamed);
  EXPECT_EQ(streamed.error(), "pkg/big.so declares 1073741824 bytes from " +
                                  std::to_string(e.compressed_size) +
                                  " compressed (deflate gives at most 1032 bytes a byte)");
  EXPECT_FALSE(called);
  EXPECT_EQ(zip.member(e, 2ull << 30).error(), streamed.error());
}

TEST_F(LocalZipTest, AMemberShorterThanDeclaredIsRefused) {
  const LocalZip zip =
      open(declaring(make_zip({{"pkg/a.so", std::string(100, 'a'), true}}), "pkg/a.so", 200));
  const auto e = entry(zip, "pkg/a.so");
  EXPECT_EQ(zip.member(e, 1 << 20).error(),
            "pkg/a.so: its compressed data gives 100 bytes, not the 200 it declares");
  EXPECT_EQ(zip.member(e, 150).error(),
            "pkg/a.so is 200 bytes uncompressed (at most 150 are read)");
}

TEST_F(LocalZipTest, RandomReadsOfADeflatedMemberFromRestartPoints) {
  const std::string data = text(6 << 20);
  const LocalZip zip = open(make_zip({{"pkg/_C.so", data, true}, {"pkg/stored.so", data}}));
  constexpr std::uint64_t kSpan = 256 << 10;
  auto r = MemberReader::open(zip, entry(zip, "pkg/_C.so"), kSpan);
  ASSERT_TRUE(r) << r.error();
  MemberReader& m = **r;
  EXPECT_EQ(m.size(), data.size());
  // A point at the first block boundary after each span (this text's blocks are ~400 KiB).
  EXPECT_GE(m.points(), 8u);
  EXPECT_LE(m.points(), data.size() / kSpan + 1);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 300; ++i) {
    const std::uint64_t off = rng() % data.size();
    const std::uint64_t len =
        std::min<std::uint64_t>(rng() % (i % 10 == 0 ? 3 << 20 : 5000), data.size() - off);
    auto got = m.read(off, len);
    ASSERT_TRUE(got) << got.error();
    ASSERT_EQ(*got, data.substr(off, len)) << off << "+" << len;
  }
  // A jump forward inflates from the point before it (a span and a block at most), not from
  // where the last read ended.
  ASSERT_TRUE(m.read(0, 10));
  std::uint64_t before = m.inflated_by_reads();
  ASSERT_EQ(*m.read(data.size() - 100, 100), data.substr(data.size() - 100));
  EXPECT_LT(m.inflated_by_reads() - before, kSpan + (1 << 20));
  // A read just behind the last one comes from the bytes kept: nothing inflated.
  before = m.inflated_by_reads();
  ASSERT_EQ(*m.read(data.size() - 5000, 4000), data.substr(data.size() - 5000, 4000));
  EXPECT_EQ(m.inflated_by_reads(), before);
  EXPECT_EQ(m.read(data.size() - 1, 2).error(), "a read past the end of the object");

  auto stored = MemberReader::open(zip, entry(zip, "pkg/stored.so"));
  ASSERT_TRUE(stored) << stored.error();
  EXPECT_EQ(*(*stored)->read(12345, 678), data.substr(12345, 678));
  EXPECT_EQ((*stored)->points(), 0u);
}

TEST_F(LocalZipTest, ACorruptCrcIsFoundAtOpen) {
  const LocalZip zip = open(make_zip(
      {{"pkg/x.so", text(100000), true, true}, {"pkg/stored.so", text(1000), false, true}}));
  auto r = MemberReader::open(zip, entry(zip, "pkg/x.so"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), "pkg/x.so: CRC-32 mismatch");
  auto stored = MemberReader::open(zip, entry(zip, "pkg/stored.so"));
  ASSERT_FALSE(stored);
  EXPECT_EQ(stored.error(), "pkg/stored.so: CRC-32 mismatch");
}

}  // namespace
}  // namespace whfs::check
