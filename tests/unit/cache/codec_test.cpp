// Binary encodings: records, keys, metadata; decoding garbage must fail cleanly.

#include "cache/codec.h"

#include <gtest/gtest.h>

#include <random>

#include "cache/metadata_codec.h"
#include "cache/records.h"
#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

std::span<const std::byte> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

TEST(ByteReaderTest, NeverReadsPastTheEnd) {
  ByteWriter w;
  w.u32(7);
  w.str("abc");
  const std::string data = w.take();
  ByteReader r(data);
  EXPECT_EQ(r.u32(), 7u);
  EXPECT_EQ(r.str(10), "abc");
  EXPECT_TRUE(r.done());
  EXPECT_EQ(r.u64(), 0u);  // past the end: zero, and failed from now on
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.remaining(), 0u);

  ByteReader limited(data);
  limited.u32();
  EXPECT_EQ(limited.str(2), "");  // longer than allowed
  EXPECT_FALSE(limited.ok());
}

TEST(RecordsTest, RoundTrips) {
  ContentRecord c{123456789, 3, 4, 9, true, 1700000000123};
  auto c2 = decode_content(bytes_of(encode(c)));
  ASSERT_TRUE(c2);
  EXPECT_EQ(c2->size, c.size);
  EXPECT_EQ(c2->present, 3u);
  EXPECT_EQ(c2->total, 4u);
  EXPECT_EQ(c2->epoch, 9u);
  EXPECT_TRUE(c2->verified);
  EXPECT_EQ(c2->last_access_ms, c.last_access_ms);

  Usage u{1, 2, 3, 4};
  EXPECT_EQ(decode_usage(bytes_of(encode(u))), u);
  Counters k{1, 2, 3, 4, 5, 6};
  EXPECT_EQ(decode_counters(bytes_of(encode(k))), k);
  FormatRecord f{std::string(kFormatName), 32744, 4096, 99};
  auto f2 = decode_format(bytes_of(encode(f)));
  ASSERT_TRUE(f2);
  EXPECT_EQ(f2->block_size, 32744u);
  EXPECT_EQ(f2->page_size, 4096u);
}

TEST(RecordsTest, RejectsTruncatedAndInconsistent) {
  const std::string c = encode(ContentRecord{10, 1, 1, 0, false, 5});
  for (std::size_t n = 0; n < c.size(); ++n) {
    EXPECT_FALSE(decode_content(bytes_of(c.substr(0, n)))) << n;
  }
  EXPECT_FALSE(decode_content(bytes_of(encode(ContentRecord{10, 5, 1, 0, false, 5}))));
  EXPECT_FALSE(decode_content(bytes_of(c + "x")));
  // Another format's record: only its name is read.
  FormatRecord other{"wheelhouse-fs-cache/2", 0, 0, 0};
  std::string enc = encode(other) + "future fields";
  auto f = decode_format(bytes_of(enc));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->name, "wheelhouse-fs-cache/2");
}

TEST(KeysTest, BlockKeysSortByIndexAndDecode) {
  const auto id = testing::sha256_of(testing::make_bytes(10, 1));
  const auto k1 = block_key(id, 1);
  const auto k256 = block_key(id, 256);
  EXPECT_TRUE(std::lexicographical_compare(k1.bytes().begin(), k1.bytes().end(),
                                           k256.bytes().begin(), k256.bytes().end()));
  EXPECT_EQ(block_index_in(k256.bytes(), content_key(id).bytes()), 256u);
  const auto other = testing::git_blob_of(testing::make_bytes(10, 1));
  EXPECT_FALSE(block_index_in(k256.bytes(), content_key(other).bytes()));
  EXPECT_EQ(content_id_from_key(content_key(other).bytes()), other);
  auto lru = decode_lru_key(lru_key(77, id).bytes());
  ASSERT_TRUE(lru);
  EXPECT_EQ(lru->last_access_ms, 77u);
  EXPECT_EQ(lru->id, id);
}

TEST(GeometryTest, BlocksFillWholePages) {
  // 8 pages of 4096: the value (checksum + payload) plus LMDB's 16-byte header is 32768.
  EXPECT_EQ(BlockGeometry::payload_for_pages(8, 4096), 32744u);
  BlockGeometry g(32744, 4096);
  EXPECT_EQ(g.footprint(37, 8 + 32744), 8u * 4096 + 8 + 37 + 8 + 2);
  EXPECT_EQ(g.footprint(37, 8 + 32745) - g.footprint(37, 8 + 32744), 4096u);  // one more page
  EXPECT_LT(g.footprint(37, 100), 4096u);  // small values live in the leaf
  EXPECT_EQ(g.block_count(0), 0u);
  EXPECT_EQ(g.block_count(32744), 1u);
  EXPECT_EQ(g.block_count(32745), 2u);
  EXPECT_EQ(g.block_length(32745, 1), 1u);
  EXPECT_EQ(g.block_length(32745, 2), 0u);
}

TEST(ChecksumTest, CoversKeyAndPayload) {
  const auto id = testing::sha256_of(testing::make_bytes(10, 1));
  const auto data = testing::make_bytes(1000, 2);
  const auto sum = block_checksum(block_key(id, 0).bytes(), data);
  EXPECT_NE(sum, block_checksum(block_key(id, 1).bytes(), data));
  auto flipped = data;
  flipped[500] ^= std::byte{1};
  EXPECT_NE(sum, block_checksum(block_key(id, 0).bytes(), flipped));
}

TEST(MetadataCodecTest, RevisionRoundTrip) {
  const auto key = metadata_key({"https://huggingface.co", "org/repo", "main"});
  RevisionRecord rev{
      "abc123", std::chrono::system_clock::time_point(std::chrono::milliseconds(1700000000123)),
      ""};
  EXPECT_EQ(decode_revision(bytes_of(encode_revision(key, rev)), key), rev);
  // Another key's record (a hash collision, or a moved value) is not ours.
  const auto other = metadata_key({"https://huggingface.co", "org/repo", "dev"});
  EXPECT_FALSE(decode_revision(bytes_of(encode_revision(key, rev)), other));
}

TEST(MetadataCodecTest, PartsCannotRunTogether) {
  EXPECT_NE(metadata_key({"ab", "c"}).key, metadata_key({"a", "bc"}).key);
}

TEST(MetadataCodecTest, LongKeysAreHashed) {
  const std::string folder(2000, 'f');
  const auto key = metadata_key({"org/repo", "commit", folder});
  EXPECT_EQ(key.key.size(), 33u);
  EXPECT_EQ(key.key[0], '\xff');
  const auto listing = testing::Fixture::listing();
  EXPECT_EQ(decode_listing(bytes_of(encode_listing(key, listing)), key), listing);
}

TEST(MetadataCodecTest, ListingRoundTripAndTruncation) {
  const auto key = metadata_key({"org/repo", "c", "simple"});
  const auto listing = testing::Fixture::listing();
  const std::string enc = encode_listing(key, listing);
  EXPECT_EQ(decode_listing(bytes_of(enc), key), listing);
  EXPECT_EQ(decode_listing(bytes_of(encode_listing(key, {})), key), std::vector<RemoteEntry>{});
  for (std::size_t n = 0; n < enc.size(); ++n) {
    EXPECT_FALSE(decode_listing(bytes_of(enc.substr(0, n)), key)) << n;
  }
}

TEST(MetadataCodecTest, GarbageNeverDecodesOrCrashes) {
  const auto key = metadata_key({"r", "c", "f"});
  std::mt19937 rng(7);
  const std::string good = encode_listing(key, testing::Fixture::listing());
  for (int i = 0; i < 20000; ++i) {
    std::string buf = good;
    // Flip a few bytes of a valid record, or make up bytes from nothing.
    if (i % 2 == 0) {
      for (int j = 0; j < 4; ++j) buf[rng() % buf.size()] = static_cast<char>(rng());
    } else {
      buf.resize(rng() % 64);
      for (char& c : buf) c = static_cast<char>(rng());
    }
    auto r = decode_listing(bytes_of(buf), key);
    if (r) {
      EXPECT_LE(r->size(), 2u);
    }
    (void)decode_revision(bytes_of(buf), key);
    (void)decode_content(bytes_of(buf));
  }
  // A count that claims more entries than the bytes can hold is refused up front.
  ByteWriter w;
  w.u8(1);
  w.str(key.echo);
  w.u32(0xffffffff);
  EXPECT_FALSE(decode_listing(bytes_of(w.data()), key));
  // An unknown entry type.
  std::string bad = encode_listing(key, testing::Fixture::listing());
  const std::size_t type_at =
      1 + 4 + key.echo.size() + 4 + 4 + testing::Fixture::listing()[0].path.size();
  bad[type_at] = 7;
  EXPECT_FALSE(decode_listing(bytes_of(bad), key));
}

}  // namespace
}  // namespace whfs::cache
