// LRU eviction by content, pins and leases, and the size cap under concurrent writers.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <random>
#include <thread>

#include "cache/block_cache.h"
#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

using testing::TempDir;
using Clock = std::chrono::system_clock;

class EvictionTest : public ::testing::Test {
 protected:
  Options options(std::uint64_t cap) {
    Options o = testing::test_options(dir_.path(), cap);
    o.clock = [this] { return Clock::time_point(std::chrono::milliseconds(now_ms_.load())); };
    return o;
  }
  // A content of `blocks` one-page blocks.
  ContentId put(BlockCache& c, std::uint64_t key, std::uint32_t blocks) {
    const auto bytes =
        testing::self_describing(key, std::size_t{blocks} * c.block_size(), c.block_size());
    const auto id = testing::sha256_of(bytes);
    auto r = c.put_blocks(id, bytes.size(), 0, bytes);
    EXPECT_TRUE(r) << r.error().message;
    return id;
  }
  bool present(BlockCache& c, const ContentId& id) {
    return c.content_state(id).value().has_value();
  }

  TempDir dir_;
  std::atomic<std::int64_t> now_ms_{1'000'000};
};

TEST_F(EvictionTest, EvictsLeastRecentlyUsedContentFirst) {
  auto c = testing::open_or_die(options(64 << 20));
  const auto a = put(*c, 1, 64);
  now_ms_ += 1000;
  const auto b = put(*c, 2, 64);
  const std::uint64_t two = c->stats()->usage.footprint_bytes;
  now_ms_ += 1000;
  const auto d = put(*c, 3, 64);
  now_ms_ += 1000;
  // Reading A makes it the most recent (recorded in memory, written by the next write txn).
  ASSERT_TRUE(c->verify_content(a, 64 * c->block_size()));
  ASSERT_TRUE(c->read_blocks(
      a, 64 * c->block_size(), 0, 1, [](auto, auto) {}, BlockStore::ReadMode::kVerified));
  ASSERT_TRUE(c->flush());
  const std::uint64_t used = c->stats()->usage.footprint_bytes;
  const std::uint64_t per = used - two;  // one content's pages

  ASSERT_TRUE(c->evict_to(used - per / 2));
  EXPECT_FALSE(present(*c, b));
  EXPECT_TRUE(present(*c, a));
  EXPECT_TRUE(present(*c, d));
  ASSERT_TRUE(c->evict_to(used - per - per / 2));
  EXPECT_FALSE(present(*c, d));
  EXPECT_TRUE(present(*c, a));
  auto st = c->stats();
  EXPECT_EQ(st->counters.evictions, 2u);
  EXPECT_EQ(st->usage.contents, 1u);
  EXPECT_EQ(st->usage.blocks, 64u);
}

TEST_F(EvictionTest, WritesPastTheHighWaterMarkEvictTheOldest) {
  const std::uint64_t cap = 4 << 20;
  auto c = testing::open_or_die(options(cap));
  std::vector<ContentId> ids;
  for (int i = 0; i < 30; ++i) {
    now_ms_ += 1000;
    ids.push_back(put(*c, 100 + i, 64));
    EXPECT_LE(c->stats()->usage.footprint_bytes, cap / 100 * 90) << i;
  }
  EXPECT_FALSE(present(*c, ids.front()));
  EXPECT_TRUE(present(*c, ids.back()));
  EXPECT_GT(c->stats()->counters.evictions, 0u);
}

TEST_F(EvictionTest, PinnedContentIsKeptUntilUnpinned) {
  auto c = testing::open_or_die(options(64 << 20));
  const auto a = put(*c, 1, 16);
  const auto b = put(*c, 2, 16);
  ASSERT_TRUE(c->pin(a));
  ASSERT_TRUE(c->pin(a));  // pins nest
  ASSERT_TRUE(c->evict_to(0));
  EXPECT_TRUE(present(*c, a));
  EXPECT_FALSE(present(*c, b));
  c->unpin(a);
  ASSERT_TRUE(c->evict_to(0));
  EXPECT_TRUE(present(*c, a));
  c->unpin(a);
  ASSERT_TRUE(c->evict_to(0));
  EXPECT_FALSE(present(*c, a));
  // An explicit evict (the CLI) ignores pins.
  const auto d = put(*c, 3, 4);
  ASSERT_TRUE(c->pin(d));
  EXPECT_TRUE(c->evict(d).value());
  EXPECT_FALSE(c->evict(d).value());
}

TEST_F(EvictionTest, LeaseOfAnotherProcessIsRespectedUntilItExpires) {
  auto c = testing::open_or_die(options(64 << 20));
  now_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
                .count();
  const auto a = put(*c, 1, 8);
  const auto b = put(*c, 2, 8);
  const auto ready = dir_ / "pinned";
  const pid_t child =
      testing::spawn_helper({"pin", dir_.path().string(), a.to_string(), ready.string()});
  ASSERT_GT(child, 0);
  for (int i = 0; i < 3000 && !std::filesystem::exists(ready); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(std::filesystem::exists(ready)) << "the helper never pinned";
  ASSERT_TRUE(c->evict_to(0));
  EXPECT_TRUE(present(*c, a));  // leased by the child
  EXPECT_FALSE(present(*c, b));

  // The holder dies without unpinning: its lease outlives it, then expires.
  ::kill(child, SIGKILL);
  testing::wait_exit(child);
  ASSERT_TRUE(c->evict_to(0));
  EXPECT_TRUE(present(*c, a));
  now_ms_ += std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::hours(1)).count();
  ASSERT_TRUE(c->evict_to(0));
  EXPECT_FALSE(present(*c, a));
}

TEST_F(EvictionTest, UnpinReleasesTheLeaseWithTheNextWrite) {
  auto c = testing::open_or_die(options(64 << 20));
  const auto a = put(*c, 1, 4);
  ASSERT_TRUE(c->pin(a));
  ASSERT_TRUE(c->refresh_pins());
  c->unpin(a);
  // The lease record is still there, but the eviction's txn drops it first.
  ASSERT_TRUE(c->evict_to(0));
  EXPECT_FALSE(present(*c, a));
}

struct FileSize {
  std::uint64_t size = 0, disk = 0;
};
FileSize data_file(const std::filesystem::path& dir) {
  struct stat sb {};
  if (::stat((dir / "data.mdb").c_str(), &sb) != 0) return {};
  return {static_cast<std::uint64_t>(sb.st_size), static_cast<std::uint64_t>(sb.st_blocks) * 512};
}

TEST_F(EvictionTest, CapHoldsUnderConcurrentWriters) {
  const std::uint64_t cap = 4 << 20;
  auto c = testing::open_or_die(testing::test_options(dir_.path(), cap));
  std::atomic<int> failures{0};
  auto writer = [&](std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 60; ++i) {
      const auto bytes = testing::self_describing(
          seed * 1000 + i, (10 + rng() % 90) * c->block_size() + rng() % 100, c->block_size());
      auto r = c->put_blocks(testing::sha256_of(bytes), bytes.size(), 0, bytes);
      if (!r) {
        ADD_FAILURE() << r.error().message;
        ++failures;
      }
    }
  };
  std::thread w1(writer, 1), w2(writer, 2);
  for (int i = 0; i < 200; ++i) {
    auto st = c->stats();
    ASSERT_TRUE(st);
    EXPECT_LE(data_file(dir_.path()).size, cap);
  }
  w1.join();
  w2.join();
  EXPECT_EQ(failures, 0);
  auto st = c->stats();
  EXPECT_LE(st->usage.footprint_bytes, cap);
  EXPECT_GT(st->counters.evictions, 0u);
  c.reset();
  EXPECT_LE(data_file(dir_.path()).size, cap);
  EXPECT_LE(data_file(dir_.path()).disk, cap);
}

TEST_F(EvictionTest, TinyCapWithManyWritersNeverWedges) {
  // Puts of up to an eighth of the cap from four threads: the map fills to its last page
  // again and again, and evictions must still be able to commit.
  const std::uint64_t cap = 2 << 20;
  auto c = testing::open_or_die(testing::test_options(dir_.path(), cap));
  std::atomic<int> failures{0};
  auto writer = [&](std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 40; ++i) {
      const auto bytes = testing::self_describing(
          seed * 1000 + i, (8 + rng() % 56) * c->block_size(), c->block_size());
      auto r = c->put_blocks(testing::sha256_of(bytes), bytes.size(), 0, bytes);
      if (!r) {
        ADD_FAILURE() << r.error().message;
        ++failures;
      }
    }
  };
  std::vector<std::thread> writers;
  for (int t = 1; t <= 4; ++t) writers.emplace_back(writer, t);
  for (auto& w : writers) w.join();
  EXPECT_EQ(failures, 0);
  c.reset();
  EXPECT_LE(data_file(dir_.path()).size, cap);
}

TEST_F(EvictionTest, MapFullIsHandledByEvictingNotReturned) {
  // High water at 100%: the logical check never fires first, so every eviction here starts
  // from LMDB's MDB_MAP_FULL.
  const std::uint64_t cap = 2 << 20;
  Options o = testing::test_options(dir_.path(), cap);
  o.high_water_percent = 100;
  o.low_water_percent = 50;
  auto c = testing::open_or_die(o);
  for (int i = 0; i < 40; ++i) {
    const auto bytes = testing::self_describing(i, 64 * c->block_size(), c->block_size());
    auto r = c->put_blocks(testing::sha256_of(bytes), bytes.size(), 0, bytes);
    ASSERT_TRUE(r) << i << ": " << r.error().message;
    EXPECT_EQ(r->present, 64u);
  }
  EXPECT_GT(c->stats()->counters.evictions, 0u);
  EXPECT_LE(data_file(dir_.path()).size, cap);
}

TEST_F(EvictionTest, EverythingPinnedIsFullNotAnLmdbError) {
  const std::uint64_t cap = 2 << 20;
  auto c = testing::open_or_die(options(cap));
  const std::uint32_t blocks = 300;  // about 1.2 MiB each
  const auto a_bytes =
      testing::self_describing(1, std::size_t{blocks} * c->block_size(), c->block_size());
  const auto a = testing::sha256_of(a_bytes);
  ASSERT_TRUE(c->pin(a));
  ASSERT_TRUE(c->put_blocks(a, a_bytes.size(), 0, a_bytes));
  const auto b_bytes = testing::self_describing(2, a_bytes.size(), c->block_size());
  const auto b = testing::sha256_of(b_bytes);
  auto r = c->put_blocks(b, b_bytes.size(), 0, b_bytes);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, CacheError::Kind::kFull) << r.error().message;
  EXPECT_EQ(testing::read_all(*c, a, a_bytes.size()), a_bytes);
  EXPECT_FALSE(present(*c, b));
  // Once A is released, B fits (A is evicted).
  c->unpin(a);
  auto again = c->put_blocks(b, b_bytes.size(), 0, b_bytes);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_FALSE(present(*c, a));
}

}  // namespace
}  // namespace whfs::cache
