#include "fs/common/units.h"

#include <gtest/gtest.h>

namespace whfs {
namespace {

TEST(ParseSize, AcceptsBinarySuffixes) {
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("1K"), 1024u);
  EXPECT_EQ(parse_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_size("20G"), 20ull << 30);
  EXPECT_EQ(parse_size("20gb"), 20ull << 30);
  EXPECT_EQ(parse_size("1.5G"), 3ull << 29);
  EXPECT_EQ(parse_size("2T"), 2ull << 40);
}

TEST(ParseSize, RejectsGarbage) {
  for (const char* bad : {"", "G", "-1G", "12X", "1.2.3", "ten", "1e3", "99999999999999999999T"}) {
    EXPECT_EQ(parse_size(bad), std::nullopt) << bad;
  }
}

TEST(ParseDuration, AcceptsSuffixes) {
  using std::chrono::seconds;
  EXPECT_EQ(parse_duration("0"), seconds(0));
  EXPECT_EQ(parse_duration("45"), seconds(45));
  EXPECT_EQ(parse_duration("30s"), seconds(30));
  EXPECT_EQ(parse_duration("10m"), seconds(600));
  EXPECT_EQ(parse_duration("1.5h"), seconds(5400));
  EXPECT_EQ(parse_duration("2d"), seconds(172800));
}

TEST(ParseDuration, RejectsGarbage) {
  for (const char* bad : {"", "m", "-5s", "5 weeks", "1e9d", "99999999d"}) {
    EXPECT_EQ(parse_duration(bad), std::nullopt) << bad;
  }
}

TEST(FormatBytes, PicksUnit) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(20ull << 30), "20.0 GiB");
}

}  // namespace
}  // namespace whfs
