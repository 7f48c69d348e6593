// Block round trips, block-range edges, duplicate writers and per-block checksums.

#include "cache/block_cache.h"

#include <gtest/gtest.h>

#include "cache/records.h"
#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

using testing::make_bytes;
using testing::open_or_die;
using testing::read_all;
using testing::sha256_of;
using testing::TempDir;
using testing::test_options;

class BlockCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { cache_ = open_or_die(test_options(dir_.path())); }
  void reopen() {
    cache_.reset();
    cache_ = open_or_die(test_options(dir_.path()));
  }
  std::uint32_t bs() const { return cache_->block_size(); }

  TempDir dir_;
  std::unique_ptr<BlockCache> cache_;
};

TEST_F(BlockCacheTest, BlockSizeFillsWholePages) {
  EXPECT_EQ(bs(), 4096u - 16 - 8);  // one-page blocks in these tests
  TempDir other;
  auto c = open_or_die(test_options(other.path(), 64 << 20, 8));
  EXPECT_EQ(c->block_size(), 32744u);
}

TEST_F(BlockCacheTest, RoundTripAtBlockEdges) {
  for (std::size_t size :
       {std::size_t{1}, std::size_t{bs() - 1}, std::size_t{bs()}, std::size_t{bs() + 1},
        std::size_t{3} * bs(), std::size_t{3} * bs() + 7}) {
    const auto bytes = make_bytes(size, size);
    const auto id = sha256_of(bytes);
    const ContentState st = testing::put_all(*cache_, id, bytes);
    EXPECT_EQ(st.total, (size + bs() - 1) / bs()) << size;
    EXPECT_EQ(st.present, st.total) << size;
    EXPECT_FALSE(st.verified);
    EXPECT_EQ(read_all(*cache_, id, size), bytes) << size;
  }
  reopen();  // and they are still there
  const auto bytes = make_bytes(3 * bs() + 7, 3 * bs() + 7);
  EXPECT_EQ(read_all(*cache_, sha256_of(bytes), bytes.size()), bytes);
}

TEST_F(BlockCacheTest, ReadsInOrderAndReportsMissing) {
  const auto bytes = make_bytes(5 * bs() + 100, 1);
  const auto id = sha256_of(bytes);
  const std::span all(bytes);
  // Blocks 1, 3 and the short last one (5), out of order.
  ASSERT_TRUE(cache_->put_blocks(id, bytes.size(), 5, all.subspan(5 * bs())));
  ASSERT_TRUE(cache_->put_blocks(id, bytes.size(), 3, all.subspan(3 * bs(), bs())));
  auto st = cache_->put_blocks(id, bytes.size(), 1, all.subspan(bs(), bs()));
  ASSERT_TRUE(st);
  EXPECT_EQ(*st, (ContentState{3, 6, false}));

  std::vector<std::uint32_t> seen;
  auto missing = cache_->read_blocks(
      id, bytes.size(), 0, 6,
      [&](std::uint32_t i, auto data) {
        seen.push_back(i);
        const std::size_t len = i == 5 ? 100 : bs();
        ASSERT_EQ(data.size(), len);
        EXPECT_TRUE(std::equal(data.begin(), data.end(), bytes.begin() + std::size_t{i} * bs()));
      },
      BlockStore::ReadMode::kPartial);
  ASSERT_TRUE(missing);
  EXPECT_EQ(seen, (std::vector<std::uint32_t>{1, 3, 5}));
  EXPECT_EQ(*missing, (std::vector<std::uint32_t>{0, 2, 4}));

  missing = cache_->read_blocks(
      id, bytes.size(), 2, 2, [](auto, auto) {}, BlockStore::ReadMode::kPartial);
  ASSERT_TRUE(missing);
  EXPECT_EQ(*missing, (std::vector<std::uint32_t>{2}));
  // A content nobody stored: all missing, no error.
  const auto other = sha256_of(make_bytes(10, 99));
  missing = cache_->read_blocks(
      other, 10, 0, 1, [](auto, auto) { FAIL(); }, BlockStore::ReadMode::kPartial);
  ASSERT_TRUE(missing);
  EXPECT_EQ(*missing, (std::vector<std::uint32_t>{0}));
  EXPECT_FALSE(cache_->content_state(other).value());
}

TEST_F(BlockCacheTest, SecondWriterOfABlockIsHarmless) {
  const auto bytes = make_bytes(2 * bs(), 2);
  const auto id = sha256_of(bytes);
  testing::put_all(*cache_, id, bytes);
  // The same blocks again, even with other bytes: the first stay (content-addressed).
  const auto other = make_bytes(2 * bs(), 3);
  auto st = cache_->put_blocks(id, bytes.size(), 0, other);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->present, 2u);
  EXPECT_EQ(read_all(*cache_, id, bytes.size()), bytes);
  auto stats = cache_->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->usage.blocks, 2u);
  EXPECT_EQ(stats->usage.contents, 1u);
  EXPECT_EQ(stats->usage.payload_bytes, bytes.size());
}

TEST_F(BlockCacheTest, RejectsRangesOutsideTheContent) {
  const auto bytes = make_bytes(2 * bs() + 5, 4);
  const auto id = sha256_of(bytes);
  const std::span all(bytes);
  using K = CacheError::Kind;
  // Past the end, a short block that is not the last, a last block of the wrong length.
  EXPECT_EQ(cache_->put_blocks(id, bytes.size(), 3, all.first(5)).error().kind,
            K::kInvalidArgument);
  EXPECT_EQ(cache_->put_blocks(id, bytes.size(), 0, all.first(bs() - 1)).error().kind,
            K::kInvalidArgument);
  EXPECT_EQ(cache_->put_blocks(id, bytes.size(), 2, all.subspan(2 * bs(), 4)).error().kind,
            K::kInvalidArgument);
  EXPECT_EQ(cache_
                ->read_blocks(
                    id, bytes.size(), 2, 2, [](auto, auto) {}, BlockStore::ReadMode::kPartial)
                .error()
                .kind,
            K::kInvalidArgument);
  auto none = cache_->read_blocks(
      id, bytes.size(), 3, 0, [](auto, auto) {}, BlockStore::ReadMode::kPartial);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(cache_->content_state(id).value());  // nothing was stored
}

TEST_F(BlockCacheTest, CallerSizeMismatchIsAMissNotADeletion) {
  const auto bytes = make_bytes(bs() + 10, 5);
  const auto id = sha256_of(bytes);
  testing::put_all(*cache_, id, bytes);
  // The caller believes the content is longer: its last block looks short, so it is a miss.
  auto missing = cache_->read_blocks(
      id, bs() + 20, 1, 1, [](auto, auto) { FAIL(); }, BlockStore::ReadMode::kPartial);
  ASSERT_TRUE(missing);
  EXPECT_EQ(*missing, (std::vector<std::uint32_t>{1}));
  EXPECT_EQ(read_all(*cache_, id, bytes.size()), bytes);  // still there
}

TEST_F(BlockCacheTest, ContentSizeChangeDropsOldBlocks) {
  const auto bytes = make_bytes(2 * bs(), 6);
  const auto id = sha256_of(bytes);
  testing::put_all(*cache_, id, bytes);
  const auto longer = make_bytes(3 * bs(), 6);
  auto st = cache_->put_blocks(id, longer.size(), 2, std::span(longer).subspan(2 * bs()));
  ASSERT_TRUE(st);
  EXPECT_EQ(*st, (ContentState{1, 3, false}));
  EXPECT_EQ(cache_->stats()->usage.blocks, 1u);
}

TEST_F(BlockCacheTest, ChecksumMismatchIsAMissDeletedAndCounted) {
  const auto bytes = make_bytes(3 * bs(), 7);
  const auto id = sha256_of(bytes);
  testing::put_all(*cache_, id, bytes);
  ASSERT_TRUE(cache_->verify_content(id, bytes.size()));  // served: blocks, not hidden
  cache_.reset();
  testing::edit_raw_block(dir_.path(), id, 1, [](std::string& v) { v[100] ^= 0x40; });
  reopen();

  std::vector<std::uint32_t> seen;
  auto missing = cache_->read_blocks(
      id, bytes.size(), 0, 3, [&](std::uint32_t i, auto) { seen.push_back(i); },
      BlockStore::ReadMode::kPartial);
  ASSERT_TRUE(missing);
  EXPECT_EQ(seen, (std::vector<std::uint32_t>{0, 2}));
  EXPECT_EQ(*missing, (std::vector<std::uint32_t>{1}));
  EXPECT_EQ(cache_->content_state(id).value(), (ContentState{2, 3, false}));
  auto stats = cache_->stats();
  EXPECT_EQ(stats->counters.corrupt_blocks, 1u);
  EXPECT_EQ(stats->usage.blocks, 2u);

  // Deleted: the next read misses without finding it corrupt again; a fresh put repairs it.
  missing = cache_->read_blocks(
      id, bytes.size(), 1, 1, [](auto, auto) { FAIL(); }, BlockStore::ReadMode::kPartial);
  EXPECT_EQ(cache_->stats()->counters.corrupt_blocks, 1u);
  ASSERT_TRUE(cache_->put_blocks(id, bytes.size(), 1, std::span(bytes).subspan(bs(), bs())));
  EXPECT_EQ(read_all(*cache_, id, bytes.size()), bytes);
}

TEST_F(BlockCacheTest, BlockUnderTheWrongKeyFailsItsChecksum) {
  const auto bytes = make_bytes(2 * bs(), 8);
  const auto id = sha256_of(bytes);
  testing::put_all(*cache_, id, bytes);
  ASSERT_TRUE(cache_->verify_content(id, bytes.size()));  // served: blocks, not hidden
  cache_.reset();
  std::string block0;
  testing::edit_raw_block(dir_.path(), id, 0, [&](std::string& v) { block0 = v; });
  testing::edit_raw_block(dir_.path(), id, 1, [&](std::string& v) { v = block0; });
  reopen();
  auto missing = cache_->read_blocks(
      id, bytes.size(), 1, 1, [](auto, auto) { FAIL(); }, BlockStore::ReadMode::kPartial);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->size(), 1u);
  EXPECT_EQ(cache_->stats()->counters.corrupt_blocks, 1u);
}

TEST_F(BlockCacheTest, UnreadableUsageRecordIsRecounted) {
  const auto bytes = make_bytes(3 * bs(), 10);
  testing::put_all(*cache_, sha256_of(bytes), bytes);
  cache_.reset();
  testing::put_raw(dir_.path(), kMetaDb, kUsageKey, "junk");
  reopen();
  const auto more = make_bytes(bs(), 11);
  testing::put_all(*cache_, sha256_of(more), more);
  const auto st = cache_->stats().value();
  EXPECT_EQ(st.usage.blocks, 4u);
  EXPECT_EQ(st.usage.contents, 2u);
  EXPECT_GE(st.usage.footprint_bytes, 4u * 4096);
}

TEST_F(BlockCacheTest, HitsAndMissesAreCounted) {
  const auto bytes = make_bytes(2 * bs(), 9);
  const auto id = sha256_of(bytes);
  ASSERT_TRUE(cache_->put_blocks(id, bytes.size(), 0, std::span(bytes).first(bs())));
  ASSERT_TRUE(cache_->read_blocks(
      id, bytes.size(), 0, 2, [](auto, auto) {}, BlockStore::ReadMode::kPartial));
  auto st = cache_->stats();
  EXPECT_EQ(st->counters.hits, 1u);
  EXPECT_EQ(st->counters.misses, 1u);
  reopen();  // persisted (flushed at close)
  st = cache_->stats();
  EXPECT_EQ(st->counters.hits, 1u);
  EXPECT_EQ(st->counters.misses, 1u);
}

TEST_F(BlockCacheTest, PresenceIsNotARead) {
  const auto bytes = make_bytes(3 * bs(), 12);
  const auto id = sha256_of(bytes);
  ASSERT_TRUE(cache_->put_blocks(id, bytes.size(), 1, std::span(bytes).subspan(bs(), bs())));
  auto missing = cache_->read_blocks(
      id, bytes.size(), 0, 3, [](auto, auto) { FAIL() << "no bytes for a presence query"; },
      BlockStore::ReadMode::kPresence);
  ASSERT_TRUE(missing);
  EXPECT_EQ(*missing, (std::vector<std::uint32_t>{0, 2}));
  auto st = cache_->stats();
  EXPECT_EQ(st->counters.hits, 0u);
  EXPECT_EQ(st->counters.misses, 0u);
}

TEST_F(BlockCacheTest, ConcurrentReadersAndWritersSeeWholeBlocks) {
  std::vector<std::vector<std::byte>> contents;
  for (int i = 0; i < 8; ++i) contents.push_back(testing::self_describing(i + 1, 20 * bs(), bs()));
  std::atomic<bool> bad{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (std::size_t c = 0; c < contents.size(); ++c) {
          const auto& bytes = contents[(c + t) % contents.size()];
          const auto id = sha256_of(bytes);
          const std::uint32_t first = (round * 3 + t) % 20;
          const std::uint32_t n = std::min<std::uint32_t>(4, 20 - first);
          if (t % 2 == 0) {
            auto r = cache_->put_blocks(
                id, bytes.size(), first,
                std::span(bytes).subspan(std::size_t{first} * bs(), std::size_t{n} * bs()));
            if (!r) bad = true;
          } else {
            auto r = cache_->read_blocks(
                id, bytes.size(), first, n,
                [&](std::uint32_t i, auto d) {
                  if (!testing::block_is_genuine(d, i, bs())) bad = true;
                },
                BlockStore::ReadMode::kPartial);
            if (!r) bad = true;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(bad);
  EXPECT_EQ(cache_->stats()->counters.corrupt_blocks, 0u);
}

}  // namespace
}  // namespace whfs::cache
