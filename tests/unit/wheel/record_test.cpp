// A wheel's RECORD: the CSV parse (record.h) and the one-member lookup of wheel_metadata.h that
// reads through it.
#include "fs/wheel/record.h"

#include <gtest/gtest.h>

#include <string>

#include "fs/wheel/wheel_metadata.h"

namespace whfs::wheel {
namespace {

// sha256("") as RECORD writes it, and as hex.
constexpr const char* kEmptySha256 = "sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU";
constexpr const char* kEmptyHex =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

TEST(Record, CsvLinesWithQuotesAndEmptyFields) {
  auto r = parse_record(
      "a/b.py,sha256=xyz,12\r\n\"we,ird\"\"name\",sha256=q,3\n\npkg.dist-info/RECORD,,\n");
  ASSERT_TRUE(r) << r.error();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].path, "a/b.py");
  EXPECT_EQ((*r)[0].hash, "sha256=xyz");
  EXPECT_EQ((*r)[0].size, 12u);
  EXPECT_EQ((*r)[1].path, "we,ird\"name");
  EXPECT_EQ((*r)[2].hash, "");
  EXPECT_EQ((*r)[2].size, std::nullopt);
  EXPECT_EQ(parse_record("a,b,c,d\n").error(), "RECORD line 1 has more than three fields");
  EXPECT_EQ(parse_record("x,y,1\n\"a,b\n").error(), "RECORD line 2 has an unterminated quote");
  EXPECT_EQ(parse_record("a,sha256=x,12k\n").error(),
            "RECORD line 1: size \"12k\" is not a number");
}

TEST(Record, Sha256OfAQuotedPathWithAComma) {
  const std::string record = std::string("pkg/plain.py,sha256=AAAA,4\r\n") + "\"pkg/a,b.py\"," +
                             kEmptySha256 + ",0\r\n" + "\"pkg/say \"\"hi\"\".txt\"," +
                             kEmptySha256 + ",0\r\n" + "pkg-1.dist-info/RECORD,,\r\n";
  EXPECT_EQ(record_sha256(record, "pkg/a,b.py"), kEmptyHex);
  EXPECT_EQ(record_sha256(record, "pkg/say \"hi\".txt"), kEmptyHex);
  EXPECT_FALSE(record_sha256(record, "pkg/a"));  // a prefix up to the comma is not the name
  EXPECT_FALSE(record_sha256(record, "\"pkg/a"));
  EXPECT_FALSE(record_sha256(record, "pkg-1.dist-info/RECORD"));
}

TEST(Record, Sha256FromAMalformedRecordIsNone) {
  const std::string line = std::string("pkg-1.dist-info/METADATA,") + kEmptySha256 + ",0\n";
  ASSERT_EQ(record_sha256(line, "pkg-1.dist-info/METADATA"), kEmptyHex);
  EXPECT_FALSE(record_sha256(line + "\"open,quote\n", "pkg-1.dist-info/METADATA"));
  EXPECT_FALSE(record_sha256(line + "a,b,c,d\n", "pkg-1.dist-info/METADATA"));
  EXPECT_FALSE(record_sha256(line + "a,sha256=x,12k\n", "pkg-1.dist-info/METADATA"));
}

}  // namespace
}  // namespace whfs::wheel
