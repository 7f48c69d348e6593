// The store with a quota double: what LmdbBlockCache (TxnEngine, ContentStore) asks of its
// quota, and when. The quota's own decisions are tested in lru_quota_test.cpp.

#include <gtest/gtest.h>

#include <mutex>

#include "cache/lmdb_block_cache.h"
#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

using testing::TempDir;

// Records every call; evicts nothing (it reports every content as pinned).
class FakeQuota final : public Quota {
 public:
  struct Access {
    ContentId id;
    std::optional<std::uint64_t> old_ms;
    std::uint64_t new_ms;
  };
  struct Read {
    ContentId id;
    std::uint32_t hits, misses;
  };

  std::uint64_t high_water(std::uint64_t) const override { return high; }
  std::uint64_t low_water(std::uint64_t) const override { return 0; }
  std::uint64_t room_target(std::uint64_t cap, std::uint64_t need) const override {
    std::lock_guard lk(mu);
    room_targets.push_back({cap, need});
    return kTarget;
  }
  Result<Evicted> evict_until(std::uint64_t target) override {
    std::lock_guard lk(mu);
    evictions.push_back(target);
    return Evicted{0, true};
  }
  lmdb::Res<void> note_access(WriteScope&, const ContentId& id, std::optional<std::uint64_t> old_ms,
                              std::uint64_t new_ms) override {
    std::lock_guard lk(mu);
    accesses.push_back({id, old_ms, new_ms});
    return {};
  }
  lmdb::Res<void> forget(WriteScope&, const ContentId& id, std::uint64_t) override {
    std::lock_guard lk(mu);
    forgotten.push_back(id);
    return {};
  }
  void note_read(const ContentId& id, std::uint32_t hits, std::uint32_t misses,
                 std::uint64_t) override {
    std::lock_guard lk(mu);
    reads.push_back({id, hits, misses});
  }
  Pending take_pending() override {
    std::lock_guard lk(mu);
    ++taken;
    return {};
  }
  lmdb::Res<void> apply_pending(WriteScope&, const Pending&) override {
    std::lock_guard lk(mu);
    ++applied;
    return {};
  }
  void restore_pending(Pending&&) override {}
  Counters pending_counters() override {
    Counters c;
    c.hits = 7;
    return c;
  }
  Result<void> pin(const ContentId& id) override {
    std::lock_guard lk(mu);
    pins.push_back(id);
    return {};
  }
  void unpin(const ContentId& id) override {
    std::lock_guard lk(mu);
    unpins.push_back(id);
  }
  Result<void> refresh_pins() override {
    std::lock_guard lk(mu);
    ++refreshes;
    return {};
  }

  static constexpr std::uint64_t kTarget = 12345;
  std::uint64_t high = ~std::uint64_t{0};  // never past it
  mutable std::mutex mu;
  mutable std::vector<std::pair<std::uint64_t, std::uint64_t>> room_targets;  // (cap, need)
  std::vector<std::uint64_t> evictions;
  std::vector<Access> accesses;
  std::vector<ContentId> forgotten;
  std::vector<Read> reads;
  std::vector<ContentId> pins, unpins;
  int taken = 0, applied = 0, refreshes = 0;
};

class StoreQuotaTest : public ::testing::Test {
 protected:
  std::unique_ptr<BlockCache> open(bool read_only = false) {
    Options o = testing::test_options(dir_.path());
    o.read_only = read_only;
    o.clock = [] { return std::chrono::system_clock::time_point(std::chrono::milliseconds(5000)); };
    auto c = LmdbBlockCache::open(o, [this](QuotaStore&, const LruQuota::Config&) {
      auto q = std::make_unique<FakeQuota>();
      quota_ = q.get();
      return q;
    });
    EXPECT_TRUE(c) << c.error().message;
    return c ? std::move(*c) : nullptr;
  }

  TempDir dir_;
  FakeQuota* quota_ = nullptr;  // owned by the cache
  const std::vector<std::byte> bytes_ = testing::make_bytes(3 * 4072, 1);
  const ContentId id_ = testing::sha256_of(bytes_);
};

TEST_F(StoreQuotaTest, APutTellsTheQuotaOfTheNewContentsAccess) {
  auto c = open();
  ASSERT_EQ(c->block_size(), 4072u);
  ASSERT_TRUE(c->put_blocks(id_, bytes_.size(), 0, std::span(bytes_).first(4072)));
  ASSERT_EQ(quota_->accesses.size(), 1u);
  EXPECT_EQ(quota_->accesses[0].id, id_);
  EXPECT_EQ(quota_->accesses[0].old_ms, std::nullopt);
  EXPECT_EQ(quota_->accesses[0].new_ms, 5000u);
  // A later put at the same time changes the record, not its recency.
  ASSERT_TRUE(c->put_blocks(id_, bytes_.size(), 1, std::span(bytes_).subspan(4072, 4072)));
  ASSERT_EQ(quota_->accesses.size(), 2u);
  EXPECT_EQ(quota_->accesses[1].old_ms, std::optional<std::uint64_t>(5000));
  EXPECT_EQ(quota_->accesses[1].new_ms, 5000u);
}

TEST_F(StoreQuotaTest, AReadReportsItsHitsAndMissesToTheQuota) {
  auto c = open();
  ASSERT_TRUE(c->put_blocks(id_, bytes_.size(), 0, std::span(bytes_).first(2 * 4072)));
  std::uint32_t served = 0;
  auto missing = c->read_blocks(
      id_, bytes_.size(), 0, 3, [&](std::uint32_t, std::span<const std::byte>) { ++served; },
      BlockStore::ReadMode::kPartial);
  ASSERT_TRUE(missing);
  EXPECT_EQ(served, 2u);
  ASSERT_EQ(quota_->reads.size(), 1u);
  EXPECT_EQ(quota_->reads[0].id, id_);
  EXPECT_EQ(quota_->reads[0].hits, 2u);
  EXPECT_EQ(quota_->reads[0].misses, 1u);
  // Asking what is stored is not a read.
  ASSERT_TRUE(c->read_blocks(
      id_, bytes_.size(), 0, 3, [](std::uint32_t, std::span<const std::byte>) {},
      BlockStore::ReadMode::kPresence));
  EXPECT_EQ(quota_->reads.size(), 1u);
}

TEST_F(StoreQuotaTest, EveryWriteTxnAppliesThePendingUpdatesAndStatsCountThem) {
  auto c = open();
  const int before = quota_->applied;
  ASSERT_TRUE(c->flush());
  EXPECT_EQ(quota_->applied, before + 1);
  EXPECT_EQ(quota_->taken, quota_->applied);
  auto st = c->stats();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->counters.hits, 7u);  // the pending ones, not written yet
}

TEST_F(StoreQuotaTest, APutPastTheHighWaterMarkEvictsToTheQuotasTargetFirst) {
  auto c = open();
  quota_->high = 1;  // every put is past it
  auto st = c->put_blocks(id_, bytes_.size(), 0, bytes_);
  // The quota evicted nothing (exhausted): the put goes ahead within the map's limit.
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_TRUE(st->complete());
  ASSERT_EQ(quota_->room_targets.size(), 1u);
  EXPECT_EQ(quota_->room_targets[0].first, 64u << 20);       // the cap
  EXPECT_GT(quota_->room_targets[0].second, bytes_.size());  // the blocks and their pages
  EXPECT_EQ(quota_->evictions, (std::vector<std::uint64_t>{FakeQuota::kTarget}));
}

TEST_F(StoreQuotaTest, EvictingAContentMakesTheQuotaForgetIt) {
  auto c = open();
  ASSERT_TRUE(c->put_blocks(id_, bytes_.size(), 0, bytes_));
  auto r = c->evict(id_);
  ASSERT_TRUE(r);
  EXPECT_TRUE(*r);
  EXPECT_EQ(quota_->forgotten, (std::vector<ContentId>{id_}));
  EXPECT_FALSE(c->content_state(id_).value().has_value());
  auto to = c->evict_to(1000);
  ASSERT_TRUE(to);
  EXPECT_EQ(quota_->evictions, (std::vector<std::uint64_t>{1000}));
}

TEST_F(StoreQuotaTest, PinsAreTheQuotasExceptInAReadOnlyCache) {
  {
    auto c = open();
    ASSERT_TRUE(c->pin(id_));
    c->unpin(id_);
    ASSERT_TRUE(c->refresh_pins());
    EXPECT_EQ(quota_->pins, (std::vector<ContentId>{id_}));
    EXPECT_EQ(quota_->unpins, (std::vector<ContentId>{id_}));
    EXPECT_EQ(quota_->refreshes, 1);
  }
  auto ro = open(/*read_only=*/true);
  ASSERT_TRUE(ro->pin(id_));
  ro->unpin(id_);
  ASSERT_TRUE(ro->refresh_pins());
  EXPECT_TRUE(quota_->pins.empty());
  EXPECT_TRUE(quota_->unpins.empty());
  EXPECT_EQ(quota_->refreshes, 0);
}

}  // namespace
}  // namespace whfs::cache
