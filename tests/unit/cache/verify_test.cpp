// Whole-content verification against the content's SHA-256 or git blob SHA-1.

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "cache/block_cache.h"
#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

using testing::make_bytes;
using testing::TempDir;

class VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override { cache_ = testing::open_or_die(testing::test_options(dir_.path())); }
  TempDir dir_;
  std::unique_ptr<BlockCache> cache_;
};

TEST_F(VerifyTest, Sha256ContentVerifiesAndStaysVerified) {
  const auto bytes = make_bytes(5 * cache_->block_size() + 3, 1);
  const auto id = testing::sha256_of(bytes);
  testing::put_all(*cache_, id, bytes);
  auto st = cache_->verify_content(id, bytes.size());
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(*st, (ContentState{6, 6, true}));
  cache_.reset();
  cache_ = testing::open_or_die(testing::test_options(dir_.path()));
  EXPECT_EQ(cache_->content_state(id).value(), (ContentState{6, 6, true}));
  // A second put of a verified content keeps it verified.
  auto again = cache_->put_blocks(id, bytes.size(), 0, bytes);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->verified);
}

TEST_F(VerifyTest, PartialReadsHideACompleteUnverifiedContentAndVerifiedReadsAllUnverified) {
  const auto bytes = make_bytes(3 * cache_->block_size() + 10, 9);
  const auto id = testing::sha256_of(bytes);
  const auto partial_mode = BlockStore::ReadMode::kPartial;
  const auto verified_mode = BlockStore::ReadMode::kVerified;
  int served = 0;
  auto count = [&](std::uint32_t, std::span<const std::byte>) { ++served; };
  // Part of a content: servable while streaming, not when only verified bytes are served.
  ASSERT_TRUE(
      cache_->put_blocks(id, bytes.size(), 0, std::span(bytes).first(cache_->block_size())));
  auto partial = cache_->read_blocks(id, bytes.size(), 0, 4, count, partial_mode);
  ASSERT_TRUE(partial);
  EXPECT_EQ(served, 1);
  served = 0;
  auto unverified = cache_->read_blocks(id, bytes.size(), 0, 4, count, verified_mode);
  ASSERT_TRUE(unverified);
  EXPECT_EQ(served, 0);
  EXPECT_EQ(unverified->size(), 4u);
  // All of it, not verified yet: nothing is servable, though every block is stored.
  testing::put_all(*cache_, id, bytes);
  auto hidden = cache_->read_blocks(id, bytes.size(), 0, 4, count, partial_mode);
  ASSERT_TRUE(hidden);
  EXPECT_EQ(served, 0);
  EXPECT_EQ(hidden->size(), 4u);
  auto stored = cache_->read_blocks(id, bytes.size(), 0, 4, count, BlockStore::ReadMode::kPresence);
  ASSERT_TRUE(stored);
  EXPECT_TRUE(stored->empty());
  EXPECT_EQ(served, 0);  // presence never hands out bytes
  auto unhashed =
      cache_->read_blocks(id, bytes.size(), 0, 4, count, BlockStore::ReadMode::kHashedHere);
  ASSERT_TRUE(unhashed);
  EXPECT_EQ(served, 0);  // kHashedHere hides what is not verified, as kVerified does
  // Verified: servable in every mode.
  ASSERT_TRUE(cache_->verify_content(id, bytes.size()));
  for (const auto mode : {partial_mode, verified_mode, BlockStore::ReadMode::kHashedHere}) {
    served = 0;
    auto shown = cache_->read_blocks(id, bytes.size(), 0, 4, count, mode);
    ASSERT_TRUE(shown);
    EXPECT_EQ(served, 4);
    EXPECT_TRUE(shown->empty());
  }
}

TEST_F(VerifyTest, OutOfOrderPutsVerifyLikeInOrderOnes) {
  // The running hash follows blocks in order; pieces that arrive early are hashed from the store
  // once the gap before them closes.
  const std::uint32_t bs = cache_->block_size();
  const auto bytes = make_bytes(7 * bs + 5, 11);
  const auto id = testing::sha256_of(bytes);
  const auto piece = [&](std::uint32_t first, std::uint32_t n) {
    const std::size_t off = std::size_t{first} * bs;
    return std::span(bytes).subspan(off, std::min(bytes.size() - off, std::size_t{n} * bs));
  };
  ASSERT_TRUE(cache_->put_blocks(id, bytes.size(), 4, piece(4, 4)));
  ASSERT_TRUE(cache_->put_blocks(id, bytes.size(), 0, piece(0, 2)));
  ASSERT_TRUE(cache_->put_blocks(id, bytes.size(), 2, piece(2, 2)));
  auto st = cache_->verify_content(id, bytes.size());
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_TRUE(st->verified);

  // Wrong bytes in order: the running hash catches them too, and every block goes.
  auto wrong = bytes;
  wrong[3 * bs] ^= std::byte{1};
  const auto id2 = testing::sha256_of(bytes);  // the id of the right bytes
  TempDir other;
  auto c2 = testing::open_or_die(testing::test_options(other.path()));
  testing::put_all(*c2, id2, wrong);
  auto bad = c2->verify_content(id2, wrong.size());
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().kind, CacheError::Kind::kCorrupt);
  EXPECT_EQ(c2->content_state(id2).value(), std::nullopt);
}

TEST_F(VerifyTest, ParallelPutsAreHashedOnceWithoutASecondPass) {
  // Sixteen threads store pieces of one content at once, as parallel ranged GETs do (each
  // thread its own pieces, in order, the threads interleaved): no put waits for the thread
  // hashing, so blocks put while it hashes are picked up by it, by a later put, or by
  // verify_content. Every content is verified by its running hash alone; one with a wrong
  // byte is still caught.
  const std::uint32_t bs = cache_->block_size();
  constexpr unsigned kThreads = 16;
  constexpr std::uint32_t kPiece = 2;  // blocks per put
  const std::uint32_t total = kThreads * kPiece * 6;
  for (int round = 0; round < 8; ++round) {
    const bool wrong = round == 7;
    auto bytes = make_bytes(std::size_t{total} * bs - 7, 100 + round);
    const auto id = testing::sha256_of(bytes);
    if (wrong) bytes[std::size_t{total / 2} * bs + 3] ^= std::byte{1};
    std::vector<std::thread> threads;
    std::atomic<int> failed{0};
    for (unsigned t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (std::uint32_t first = t * kPiece; first < total; first += kThreads * kPiece) {
          const std::size_t off = std::size_t{first} * bs;
          const auto piece =
              std::span(bytes).subspan(off, std::min(bytes.size() - off, std::size_t{kPiece} * bs));
          if (!cache_->put_blocks(id, bytes.size(), first, piece)) ++failed;
        }
      });
    }
    for (auto& th : threads) th.join();
    ASSERT_EQ(failed.load(), 0);
    auto st = cache_->verify_content(id, bytes.size());
    if (wrong) {
      ASSERT_FALSE(st);
      EXPECT_EQ(st.error().kind, CacheError::Kind::kCorrupt);
    } else {
      ASSERT_TRUE(st) << st.error().message;
      EXPECT_EQ(*st, (ContentState{total, total, true})) << "round " << round;
    }
  }
  EXPECT_EQ(cache_->stats().value().second_hash_passes, 0u);

  // Stored by an earlier process: verified by a pass of its own, and counted.
  const auto bytes = make_bytes(3 * bs, 7);
  const auto id = testing::sha256_of(bytes);
  testing::put_all(*cache_, id, bytes);
  cache_.reset();
  cache_ = testing::open_or_die(testing::test_options(dir_.path()));
  ASSERT_TRUE(cache_->verify_content(id, bytes.size()).value().verified);
  EXPECT_EQ(cache_->stats().value().second_hash_passes, 1u);
}

TEST_F(VerifyTest, GitBlobContentVerifies) {
  const auto bytes = make_bytes(2 * cache_->block_size(), 2);
  const auto id = testing::git_blob_of(bytes);
  testing::put_all(*cache_, id, bytes);
  auto st = cache_->verify_content(id, bytes.size());
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_TRUE(st->verified);
}

TEST_F(VerifyTest, IncompleteContentIsNotHashed) {
  const auto bytes = make_bytes(3 * cache_->block_size(), 3);
  const auto id = testing::sha256_of(bytes);
  ASSERT_TRUE(
      cache_->put_blocks(id, bytes.size(), 0, std::span(bytes).first(cache_->block_size())));
  auto st = cache_->verify_content(id, bytes.size());
  ASSERT_TRUE(st);
  EXPECT_EQ(*st, (ContentState{1, 3, false}));
  auto absent = cache_->verify_content(testing::sha256_of(make_bytes(1, 1)), 1);
  ASSERT_TRUE(absent);
  EXPECT_EQ(*absent, (ContentState{0, 1, false}));
}

TEST_F(VerifyTest, MismatchDropsEveryBlockAndIsCorrupt) {
  const auto bytes = make_bytes(4 * cache_->block_size(), 4);
  const auto wrong_id = testing::sha256_of(make_bytes(4 * cache_->block_size(), 5));
  testing::put_all(*cache_, wrong_id, bytes);
  auto st = cache_->verify_content(wrong_id, bytes.size());
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().kind, CacheError::Kind::kCorrupt);
  EXPECT_FALSE(cache_->content_state(wrong_id).value());
  auto missing = cache_->read_blocks(
      wrong_id, bytes.size(), 0, 4, [](auto, auto) { FAIL(); }, BlockStore::ReadMode::kPartial);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->size(), 4u);
  auto stats = cache_->stats();
  EXPECT_EQ(stats->counters.corrupt_contents, 1u);
  EXPECT_EQ(stats->usage.blocks, 0u);
  EXPECT_EQ(stats->usage.contents, 0u);
  EXPECT_LT(stats->usage.footprint_bytes, 4u * 4096);  // what is left: near-empty B-trees
}

TEST_F(VerifyTest, GitBlobMismatchIsCorruptToo) {
  const auto bytes = make_bytes(100, 6);
  const auto wrong_id = testing::git_blob_of(make_bytes(101, 6));
  testing::put_all(*cache_, wrong_id, bytes);
  auto st = cache_->verify_content(wrong_id, bytes.size());
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().kind, CacheError::Kind::kCorrupt);
}

TEST_F(VerifyTest, BadBlockFoundWhileHashingIsDroppedNotCorrupt) {
  const auto bytes = make_bytes(3 * cache_->block_size(), 7);
  const auto id = testing::sha256_of(bytes);
  testing::put_all(*cache_, id, bytes);
  cache_.reset();
  testing::edit_raw_block(dir_.path(), id, 2, [](std::string& v) { v.back() ^= 1; });
  cache_ = testing::open_or_die(testing::test_options(dir_.path()));
  auto st = cache_->verify_content(id, bytes.size());
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(*st, (ContentState{2, 3, false}));
  EXPECT_EQ(cache_->stats()->counters.corrupt_blocks, 1u);
  EXPECT_EQ(cache_->stats()->counters.corrupt_contents, 0u);
}

// kHashedHere is for bytes the caller hashed moments ago: it takes blocks without their checksums
// (a block damaged since is the caller's to have hashed); kVerified checks each and drops it.
TEST_F(VerifyTest, HashedHereReadsSkipTheBlockChecksumsAndVerifiedReadsCheckThem) {
  const auto bytes = make_bytes(3 * cache_->block_size(), 5);
  const auto id = testing::sha256_of(bytes);
  testing::put_all(*cache_, id, bytes);
  ASSERT_TRUE(cache_->verify_content(id, bytes.size()));
  cache_.reset();
  testing::edit_raw_block(dir_.path(), id, 1, [](std::string& v) { v.back() ^= 1; });
  cache_ = testing::open_or_die(testing::test_options(dir_.path()));
  std::string got;
  auto append = [&](std::uint32_t, std::span<const std::byte> b) {
    got.append(reinterpret_cast<const char*>(b.data()), b.size());
  };
  auto fast =
      cache_->read_blocks(id, bytes.size(), 0, 3, append, BlockStore::ReadMode::kHashedHere);
  ASSERT_TRUE(fast);
  EXPECT_TRUE(fast->empty());
  EXPECT_EQ(got.size(), bytes.size());
  EXPECT_EQ(cache_->stats()->counters.corrupt_blocks, 0u);
  got.clear();
  auto checked =
      cache_->read_blocks(id, bytes.size(), 0, 3, append, BlockStore::ReadMode::kVerified);
  ASSERT_TRUE(checked);
  EXPECT_EQ(*checked, std::vector<std::uint32_t>{1});
  EXPECT_EQ(cache_->stats()->counters.corrupt_blocks, 1u);
}

}  // namespace
}  // namespace whfs::cache
