#include "fs/wheel/zip.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fs/wheel/wheel_metadata.h"
#include "tests/support/zip_writer.h"

namespace whfs::wheel {
namespace {

using test::make_zip;
using Member = test::Member;

std::span<const std::byte> bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// Takes one member out the way the metadata service does: tail, directory, header, data.
Expected<std::string, std::string> take(const std::string& zip, const std::string& file,
                                        std::size_t tail_len) {
  const std::string tail = zip.substr(zip.size() - std::min(zip.size(), tail_len));
  auto cd = find_central_directory(bytes(tail), zip.size());
  if (!cd) return unexpected(cd.error());
  const std::string dir = zip.substr(cd->offset, cd->size);
  auto entries = parse_central_directory(bytes(dir), cd->entries);
  if (!entries) return unexpected(entries.error());
  const ZipEntry* e = find_dist_info_file(*entries, file);
  if (e == nullptr) return unexpected(std::string("no ") + file);
  auto at = member_data_offset(bytes(zip.substr(e->local_header_offset, 30)), *e);
  if (!at) return unexpected(at.error());
  return extract_member(bytes(zip.substr(*at, e->compressed_size)), *e, 1 << 20);
}

const std::string kMetadata =
    "Metadata-Version: 2.1\nName: flash_attn\nVersion: 2.8.3+cu128torch2.9\n"
    "Requires-Python: >=3.9\n\nThe long description.\nName: not a header\n";

TEST(Zip, TakesOneMemberOutOfAWheel) {
  const std::string zip = make_zip({{"flash_attn/__init__.py", std::string(5000, 'x')},
                                    {"flash_attn-2.8.3.dist-info/METADATA", kMetadata, true},
                                    {"flash_attn-2.8.3.dist-info/RECORD", "r", false}});
  EXPECT_EQ(take(zip, "METADATA", 100).value(), kMetadata);
  EXPECT_EQ(take(zip, "RECORD", 1 << 20).value(), "r");
}

TEST(Zip, CommentsAndZip64) {
  const std::string with_comment =
      make_zip({{"a-1.dist-info/METADATA", kMetadata}}, std::string(300, 'c'));
  EXPECT_EQ(take(with_comment, "METADATA", 400).value(), kMetadata);
  bool more = false;
  const std::string short_tail = with_comment.substr(with_comment.size() - 100);
  EXPECT_FALSE(find_central_directory(bytes(short_tail), with_comment.size(), &more));
  EXPECT_TRUE(more);  // the record lies further back: read the longest tail
  const std::string z64 = make_zip({{"a-1.dist-info/METADATA", kMetadata, true}}, "", true);
  EXPECT_EQ(take(z64, "METADATA", 200).value(), kMetadata);
}

TEST(Zip, WhatIsWrongIsSaid) {
  const std::string zip = make_zip({{"a-1.dist-info/METADATA", kMetadata, true}});
  EXPECT_FALSE(find_central_directory(bytes(std::string(100, 'x')), 100));
  EXPECT_FALSE(find_central_directory(bytes(std::string("PK")), 2));
  // A central directory that claims to lie outside the file.
  std::string far = zip;
  far[far.size() - 3] = '\x7f';  // the offset's highest byte
  EXPECT_FALSE(find_central_directory(bytes(far), far.size()));
  // A flipped byte in the deflated data: inflate or CRC-32 fails.
  std::string bad = zip;
  bad[60] = static_cast<char>(bad[60] ^ 0x55);
  EXPECT_FALSE(take(bad, "METADATA", 200));
  // A member larger than allowed.
  auto cd = find_central_directory(bytes(zip), zip.size());
  auto entries = parse_central_directory(bytes(zip.substr(cd->offset, cd->size)), cd->entries);
  ASSERT_TRUE(entries);
  EXPECT_FALSE(extract_member(bytes(std::string(10, 'x')), entries->front(), 10));
  // More entries than the directory holds.
  EXPECT_FALSE(parse_central_directory(bytes(zip.substr(cd->offset, cd->size)), 2));
  EXPECT_FALSE(parse_central_directory(bytes(std::string()), 5, 4));
}

TEST(Zip, TheWheelsOwnDistInfo) {
  std::vector<ZipEntry> entries(4);
  entries[0].name = "pkg/METADATA";
  entries[1].name = "pkg-1.dist-info/METADATA";
  entries[2].name = "pkg-1.dist-info/sub/METADATA";
  entries[3].name = "pkg-1.data/METADATA";
  ASSERT_NE(find_dist_info_file(entries, "METADATA"), nullptr);
  EXPECT_EQ(find_dist_info_file(entries, "METADATA")->name, "pkg-1.dist-info/METADATA");
  entries.push_back(entries[1]);
  entries.back().name = "other-2.dist-info/METADATA";
  EXPECT_EQ(find_dist_info_file(entries, "METADATA"), nullptr);  // which one is the wheel's?
  EXPECT_EQ(find_dist_info_file(entries, "RECORD"), nullptr);
}

TEST(WheelMetadata, Headers) {
  const std::string text =
      "Wheel-Version: 1.0\r\nGenerator: bdist_wheel (0.45.1)\r\nRoot-Is-Purelib: false\r\n"
      "Tag: cp312-cp312-linux_x86_64\r\nTag: cp312-cp312-manylinux_2_28_x86_64\r\n"
      "Home-page: https://example.org/x\r\nSummary:\r\nName-Like: no\r\nVersion : no\r\n"
      "Padded: \t 1.0 \t\r\n\r\nBody: not a header\r\n";
  EXPECT_EQ(metadata_header(text, "Wheel-Version"), "1.0");  // no CR left
  EXPECT_EQ(metadata_header(text, "wheel-version"), "1.0");
  EXPECT_EQ(metadata_header(text, "ROOT-IS-PURELIB"), "false");
  EXPECT_EQ(metadata_header(text, "Tag"), "cp312-cp312-linux_x86_64");  // the first
  EXPECT_EQ(metadata_header(text, "Home-page"), "https://example.org/x");
  EXPECT_EQ(metadata_header(text, "Summary"), "");  // present, empty
  EXPECT_EQ(metadata_header(text, "Padded"), "1.0");
  EXPECT_EQ(metadata_header(text, "Name"), std::nullopt);     // "Name-Like" is another header
  EXPECT_EQ(metadata_header(text, "Version"), std::nullopt);  // "Version :" is no header
  EXPECT_EQ(metadata_header(text, "Body"), std::nullopt);     // after the empty line
  EXPECT_EQ(metadata_header("A: 1\n\nB: 2\n", "B"), std::nullopt);
  EXPECT_EQ(metadata_header("Name: x", "Name"), "x");  // no line end at all
  EXPECT_EQ(metadata_header("", "Name"), std::nullopt);
}

TEST(WheelMetadata, HeadersRecordAndWhatIsServed) {
  EXPECT_EQ(requires_python_of(kMetadata), ">=3.9");
  EXPECT_EQ(requires_python_of("Name: x\nrequires-python:  >=3.10 ,<4 \r\n"), ">=3.10 ,<4");
  EXPECT_EQ(requires_python_of("Name: x\n\nRequires-Python: >=3.9\n"), "");  // in the body
  const std::string record =
      "flash_attn/__init__.py,sha256=AAAA,4\n"
      "flash_attn-2.8.3.dist-info/METADATA,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n"
      "flash_attn-2.8.3.dist-info/RECORD,,\n";
  EXPECT_EQ(record_sha256(record, "flash_attn-2.8.3.dist-info/METADATA"),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");  // sha256("")
  EXPECT_FALSE(record_sha256(record, "flash_attn-2.8.3.dist-info/RECORD"));
  EXPECT_FALSE(record_sha256(record, "flash_attn/__init__.py"));  // not 32 bytes
  EXPECT_FALSE(record_sha256(record, "missing"));
  // The served file: the name as the index lists it, the rest as it is (the body too).
  EXPECT_EQ(served_metadata(kMetadata),
            "Metadata-Version: 2.1\nName: flash-attn\nVersion: 2.8.3+cu128torch2.9\n"
            "Requires-Python: >=3.9\n\nThe long description.\nName: not a header\n");
  EXPECT_EQ(served_metadata("Name:Flash.Attn\r\nVersion: 1\r\n"),
            "Name: flash-attn\r\nVersion: 1\r\n");
  // Header names are case-insensitive (pip reads METADATA with Python's email parser).
  EXPECT_EQ(served_metadata("NAME: Flash_Attn\nName-Suffix: A_B\n"),
            "NAME: flash-attn\nName-Suffix: A_B\n");
}

}  // namespace
}  // namespace whfs::wheel
