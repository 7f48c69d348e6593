#include "fs/hub/url.h"

#include <gtest/gtest.h>

#include "fs/hub/range_sink.h"

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
  EXPECT_EQ(redact("http://cdn/x/abc?X-Amz-Signature=secret"), "http://cdn/x/abc");
  EXPECT_EQ(redact("http://hub/api/x"), "http://hub/api/x");
}

TEST(Url, SignedUrlExpiry) {
  // S3: signed at 2026-11-30T12:00:00Z for an hour.
  EXPECT_EQ(signed_url_expiry("https://s3/x?X-Amz-Date=20261130T120000Z&X-Amz-Expires=3600"),
            std::optional<std::time_t>(1796040000 + 3600));
  EXPECT_EQ(signed_url_expiry("https://cf/x?a=1&Expires=1796043600&Signature=s"),
            std::optional<std::time_t>(1796043600));
  EXPECT_EQ(signed_url_expiry("https://cdn/x"), std::nullopt);
  // Garbage or numbers that would overflow say nothing rather than something wrong.
  EXPECT_EQ(signed_url_expiry("https://s3/x?X-Amz-Date=20261130T120000Z&X-Amz-Expires=-5"),
            std::nullopt);
  EXPECT_EQ(signed_url_expiry("https://cf/x?Expires=99999999999999999999999"), std::nullopt);
  EXPECT_EQ(signed_url_expiry("https://cf/x?Expires=12abc"), std::nullopt);
  EXPECT_EQ(signed_url_expiry("https://s3/x?X-Amz-Date=2026113xT120000Z&X-Amz-Expires=60"),
            std::nullopt);
}

TEST(Url, QueryValue) {
  EXPECT_EQ(query_value("http://h/p?a=1&b=two", "b"), "two");
  EXPECT_EQ(query_value("http://h/p?ab=1&b=2", "b"), "2");
  EXPECT_EQ(query_value("http://h/p?a=1", "b"), "");
  EXPECT_EQ(query_value("http://h/p", "a"), "");
}

TEST(ContentRangeTest, ParsesTheFormsAServerSends) {
  auto r = parse_content_range("bytes 0-99/1234");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first, 0u);
  EXPECT_EQ(r->last, 99u);
  EXPECT_EQ(r->total, std::optional<std::uint64_t>(1234));
  r = parse_content_range("bytes 5-5/*");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->total, std::nullopt);
  for (const char* bad : {"", "bytes", "bytes 9-3/10", "bytes 0-9/9", "bytes 0-9", "items 0-9/10",
                          "bytes -9/10", "bytes 0-99999999999999999999999/*", "bytes 0-9/1x"}) {
    EXPECT_EQ(parse_content_range(bad), std::nullopt) << bad;
  }
}

TEST(RangeSinkTest, Takes206AtTheOffsetAndSkipsA200ToIt) {
  std::vector<std::byte> out;  // what the sink hands on
  auto take = [&](std::span<const std::byte> b) { out.insert(out.end(), b.begin(), b.end()); };
  std::uint64_t got = 0;
  HttpResponse head;
  head.status = 206;
  head.headers["content-range"] = "bytes 10-13/100";
  const std::vector<std::byte> body{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  RangeSink sink(take, 4, &got, 10, 100);
  EXPECT_TRUE(sink(head, body));
  EXPECT_EQ(got, 4u);
  EXPECT_EQ(out, body);
  EXPECT_TRUE(sink.mismatch().empty());

  // A 200 is the whole file: the sink skips to its offset and stops when it has the range.
  std::vector<std::byte> whole(100);
  for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<std::byte>(i);
  got = 0;
  out.clear();
  HttpResponse ok;
  ok.status = 200;
  ok.headers["content-length"] = "100";
  RangeSink skip(take, 4, &got, 10, 100);
  EXPECT_FALSE(skip(ok, whole));  // full: the rest is not wanted
  EXPECT_EQ(got, 4u);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0], std::byte{10});
  EXPECT_EQ(out[3], std::byte{13});
  EXPECT_TRUE(skip.mismatch().empty());

  // In pieces, as a transfer delivers them: each byte handed on once, in order, none past
  // the range.
  got = 0;
  out.clear();
  RangeSink pieces(take, 3, &got, 10, 100);
  EXPECT_TRUE(pieces(head, std::span(body).first(2)));
  EXPECT_TRUE(pieces(head, std::span(body).subspan(2, 0)));
  EXPECT_FALSE(pieces(head, std::span(body).subspan(2)));  // a byte past the range: stop
  EXPECT_EQ(got, 3u);
  EXPECT_EQ(out, std::vector<std::byte>(body.begin(), body.begin() + 3));
}

TEST(RangeSinkTest, RefusesWhatIsNotTheAskedRange) {
  const std::vector<std::byte> body(4);
  auto refused = [&](int status, std::map<std::string, std::string> headers) {
    std::uint64_t got = 0;
    std::size_t handed = 0;
    auto take = [&](std::span<const std::byte> b) { handed += b.size(); };
    HttpResponse head;
    head.status = status;
    head.headers = std::move(headers);
    RangeSink sink(take, 4, &got, 10, 100);
    const bool more = sink(head, body);
    return !more && got == 0 && handed == 0 && !sink.mismatch().empty();
  };
  EXPECT_TRUE(refused(206, {{"content-range", "bytes 0-3/100"}}));    // wrong offset
  EXPECT_TRUE(refused(206, {{"content-range", "bytes 10-13/200"}}));  // another size
  EXPECT_TRUE(refused(206, {}));                                      // no Content-Range
  EXPECT_TRUE(refused(200, {{"content-length", "99"}}));              // another size
  EXPECT_TRUE(refused(206, {{"content-range", "bytes 10-13/100"}, {"content-encoding", "gzip"}}));
  EXPECT_TRUE(refused(302, {}));
}

}  // namespace
}  // namespace whfs::hub
