#include "fs/common/base64.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace whfs {
namespace {

std::span<const std::byte> bytes_of(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

std::vector<std::uint8_t> vec(std::string_view s) { return {s.begin(), s.end()}; }

TEST(Base64, StandardAndUrlSafe) {
  EXPECT_EQ(base64(std::string_view("")), "");
  EXPECT_EQ(base64(std::string_view("f")), "Zg==");
  EXPECT_EQ(base64(std::string_view("fo")), "Zm8=");
  EXPECT_EQ(base64(std::string_view("foo")), "Zm9v");
  EXPECT_EQ(base64(std::string_view("\xfb\xff\xbf", 3)), "+/+/");
  const std::string raw("\xfb\xff\xbf\x01", 4);
  EXPECT_EQ(base64url_nopad(std::as_bytes(std::span(raw.data(), raw.size()))), "-_-_AQ");
}

TEST(Base64, Rfc4648Vectors) {
  const std::pair<std::string_view, std::string_view> vectors[] = {{"", ""},
                                                                   {"f", "Zg=="},
                                                                   {"fo", "Zm8="},
                                                                   {"foo", "Zm9v"},
                                                                   {"foob", "Zm9vYg=="},
                                                                   {"fooba", "Zm9vYmE="},
                                                                   {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(base64(plain), encoded) << plain;
    EXPECT_EQ(base64(bytes_of(plain)), encoded) << plain;
    std::string unpadded(encoded);
    while (!unpadded.empty() && unpadded.back() == '=') unpadded.pop_back();
    EXPECT_EQ(base64url_nopad(bytes_of(plain)), unpadded) << plain;
    EXPECT_EQ(base64url_decode(encoded), vec(plain)) << encoded;
    EXPECT_EQ(base64url_decode(unpadded), vec(plain)) << unpadded;
  }
}

TEST(Base64, UrlSafeDecodeOfARecordHash) {
  // sha256("") as a wheel's RECORD writes it.
  const auto raw = base64url_decode("47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU");
  ASSERT_TRUE(raw);
  ASSERT_EQ(raw->size(), 32u);
  EXPECT_EQ((*raw)[0], 0xe3);
  EXPECT_EQ((*raw)[31], 0x55);
}

TEST(Base64, RoundTrips) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  std::uint32_t seed = 12345;
  for (std::size_t len = 0; len <= 300; ++len) {
    std::string data = all.substr(0, std::min<std::size_t>(len, all.size()));
    while (data.size() < len) {
      seed = seed * 1103515245u + 12345u;
      data.push_back(static_cast<char>(seed >> 16));
    }
    const std::string url = base64url_nopad(bytes_of(data));
    EXPECT_EQ(url.find_first_of("+/="), std::string::npos);
    EXPECT_EQ(base64url_decode(url), vec(data)) << len;
    // The standard encoding of the same bytes, its alphabet made URL-safe, decodes padded.
    std::string standard = base64(bytes_of(data));
    EXPECT_EQ(standard.size() % 4, 0u);
    for (char& c : standard) {
      if (c == '+') c = '-';
      if (c == '/') c = '_';
    }
    EXPECT_EQ(base64url_decode(standard), vec(data)) << len;
  }
}

TEST(Base64, UrlSafeDecodeRefusesBadInput) {
  // The standard alphabet and other characters, 4n+1 characters, padding that is incomplete,
  // too long or not at the end.
  for (const char* bad :
       {"+/+/",   "Zm9v+A", "Zm9/", "Zm 9v", "Zm9v\n", " Zm9v",   "Zm9v.", "Zm\xc3\xa9",
        "Z",      "Zm9vY",  "=",    "==",    "Zg=",    "Zg===",   "Zm8==", "Zm9v=",
        "Zm9v==", "Z===",   "====", "Zg=g",  "=Zg",    "Zg==Zg=="}) {
    EXPECT_EQ(base64url_decode(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(base64url_decode(std::string_view("Zm\0v", 4)), std::nullopt);
  EXPECT_EQ(base64url_decode(""), std::vector<std::uint8_t>());
}

}  // namespace
}  // namespace whfs
