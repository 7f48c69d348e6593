#include "fs/hub/url.h"

#include <gtest/gtest.h>

namespace whfs::hub {
namespace {

TEST(Url, EncodeSegmentKeepsOnlyUnreserved) {
  EXPECT_EQ(encode_segment("refs/pr/1"), "refs%2Fpr%2F1");
  EXPECT_EQ(encode_segment("a+b c"), "a%2Bb%20c");
  EXPECT_EQ(encode_segment("main"), "main");
  EXPECT_EQ(encode_segment("x#y?z%"), "x%23y%3Fz%25");
  EXPECT_EQ(encode_segment("~._-"), "~._-");
}

TEST(Url, EncodePathKeepsSlashesAndEncodesPlus) {
  EXPECT_EQ(encode_path("flash_attn/sm89/torch2.9-cu128/flash_attn-2.8.3+cu128torch2.9-cp312.whl"),
            "flash_attn/sm89/torch2.9-cu128/flash_attn-2.8.3%2Bcu128torch2.9-cp312.whl");
  EXPECT_EQ(encode_path("caf\xc3\xa9/x y"), "caf%C3%A9/x%20y");
}

TEST(Url, OriginComparesSchemeHostAndPort) {
  auto a = origin_of("http://127.0.0.1:8080/api/x?q=1");
  auto b = origin_of("http://127.0.0.1:8080");
  auto c = origin_of("http://localhost:8080/x");
  auto d = origin_of("http://127.0.0.1:8081/x");
  auto e = origin_of("HTTPS://Hub.Example.com/x");
  ASSERT_TRUE(a && b && c && d && e);
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);  // another host name for the same address is another origin
  EXPECT_NE(*a, *d);
  EXPECT_EQ(e->host, "hub.example.com");
  EXPECT_EQ(e->port, 443);
  EXPECT_EQ(origin_of("http://[::1]:9/x")->host, "::1");
  EXPECT_FALSE(origin_of("/relative/path"));
  EXPECT_FALSE(origin_of("ftp://x/y"));
  EXPECT_FALSE(origin_of("http://h:99999/"));
}

TEST(Url, ResolveReference) {
  const std::string base = "http://127.0.0.1:5/datasets/a/b/resolve/main/x.md?q=1";
  EXPECT_EQ(resolve_reference(base, "/api/resolve-cache/datasets/a/b/sha/x.md?etag=%22e%22"),
            "http://127.0.0.1:5/api/resolve-cache/datasets/a/b/sha/x.md?etag=%22e%22");
  EXPECT_EQ(resolve_reference(base, "http://localhost:6/blob?sig=1"),
            "http://localhost:6/blob?sig=1");
  EXPECT_EQ(resolve_reference(base, "y.md"), "http://127.0.0.1:5/datasets/a/b/resolve/main/y.md");
  EXPECT_EQ(resolve_reference(base, "../z"), "http://127.0.0.1:5/datasets/a/b/resolve/z");
  EXPECT_EQ(resolve_reference(base, "//cdn.example/p"), "http://cdn.example/p");
  EXPECT_EQ(resolve_reference(base, "?other=2"),
            "http://127.0.0.1:5/datasets/a/b/resolve/main/x.md?other=2");
}

TEST(Url, RedactDropsTheQuery) {
  EXPECT_EQ(redact("http://cdn/x/abc?X-Amz-Signature=secret"), "http://cdn/x/abc?<redacted>");
  EXPECT_EQ(redact("http://hub/api/x"), "http://hub/api/x");
}

}  // namespace
}  // namespace whfs::hub
