// LruQuota's own decisions, on a real LMDB env but without the block store: a fake QuotaStore
// keeps contents as (size, last access) in memory and runs the write txns as TxnEngine does
// (the quota's pending updates first).

#include "cache/lru_quota.h"

#include <gtest/gtest.h>

#include <unordered_map>

#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

using testing::TempDir;

class FakeStore final : public QuotaStore {
 public:
  struct Content {
    std::uint64_t bytes = 0;
    std::uint64_t last_ms = 0;
  };

  FakeStore(lmdb::Env& env) : env_(env) {}
  void set_quota(Quota* quota) { quota_ = quota; }

  Result<void> write(WriteBody body) override { return run(body, false); }
  Result<void> write_evicting(WriteBody body) override { return run(body, true); }
  lmdb::Res<void> touch(WriteScope& s, const ContentId& id, std::uint64_t ms) override {
    auto it = contents.find(id);
    if (it == contents.end() || it->second.last_ms >= ms) return {};
    if (auto r = quota_->note_access(s, id, it->second.last_ms, ms); !r) return r;
    it->second.last_ms = ms;
    return {};
  }
  lmdb::Res<bool> purge(WriteScope& s, const ContentId& id) override {
    auto it = contents.find(id);
    if (it == contents.end()) return false;
    if (auto r = quota_->forget(s, id, it->second.last_ms); !r) return lmdb::fail(r);
    s.usage.footprint_bytes -= it->second.bytes;
    s.usage.blocks -= 1;
    contents.erase(it);
    purged.push_back(id);
    return true;
  }

  // A content of `bytes` (one block) last accessed at `ms`.
  void add(const ContentId& id, std::uint64_t bytes, std::uint64_t ms) {
    ASSERT_TRUE(write([&](WriteScope& s) -> lmdb::Res<void> {
      s.usage.footprint_bytes += bytes;
      s.usage.blocks += 1;
      contents[id] = {bytes, ms};
      return quota_->note_access(s, id, std::nullopt, ms);
    }));
  }
  // A write txn with nothing of its own (it flushes the pending updates).
  void flush() {
    ASSERT_TRUE(write([](WriteScope&) -> lmdb::Res<void> { return {}; }));
  }

  std::unordered_map<ContentId, Content> contents;
  std::vector<ContentId> purged;  // in the order of their eviction
  Usage usage;
  Counters counters;
  int evicting_writes = 0;
  std::uint64_t now_ms = 1'000'000;

 private:
  Result<void> run(WriteBody body, bool evicting) {
    auto txn = lmdb::Txn::begin(env_, 0);
    if (!txn) return cache_error(CacheError::Kind::kLmdb, txn.error().message());
    WriteScope s{*txn, usage, {}, 0, now_ms};
    Quota::Pending pending = quota_->take_pending();
    lmdb::Res<void> r = quota_->apply_pending(s, pending);
    if (r) r = body(s);
    if (r) r = txn->commit();
    if (!r) {
      quota_->restore_pending(std::move(pending));
      return cache_error(CacheError::Kind::kLmdb, r.error().message());
    }
    usage = s.usage;
    counters += s.counters;
    evicting_writes += evicting ? 1 : 0;
    return {};
  }

  lmdb::Env& env_;
  Quota* quota_ = nullptr;
};

class LruQuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = lmdb::Env::open(dir_.path().string(),
                             {.map_size = 16 << 20, .max_dbs = 4, .flags = MDB_NOSYNC});
    ASSERT_TRUE(e) << e.error().message();
    env_ = std::move(*e);
    auto txn = lmdb::Txn::begin(env_, 0);
    ASSERT_TRUE(txn);
    auto lru = txn->open_dbi(kLruDb, MDB_CREATE);
    auto leases = txn->open_dbi(kLeasesDb, MDB_CREATE);
    ASSERT_TRUE(lru && leases);
    config_.lru = *lru;
    config_.leases = *leases;
    ASSERT_TRUE(txn->commit());
    config_.lease_duration = std::chrono::seconds(60);
  }

  // The quota of this process (`store_` tells it of accesses and deletions).
  LruQuota& quota() {
    if (!quota_) {
      quota_ = std::make_unique<LruQuota>(store_, config_);
      store_.set_quota(quota_.get());
    }
    return *quota_;
  }
  ContentId id(std::uint64_t n) { return testing::sha256_of(testing::make_bytes(16, n)); }
  // Contents id(1), id(2), ... of 1000 bytes each, last accessed at `last_ms` in that order.
  void add(std::initializer_list<std::uint64_t> last_ms) {
    quota();
    std::uint64_t n = 0;
    for (std::uint64_t ms : last_ms) store_.add(id(++n), 1000, ms);
  }
  std::size_t leases() {
    auto txn = lmdb::Txn::begin(env_, MDB_RDONLY);
    EXPECT_TRUE(txn);
    return txn->stat(config_.leases).value().ms_entries;
  }

  TempDir dir_;
  lmdb::Env env_;
  LruQuota::Config config_;
  FakeStore store_{env_};
  std::unique_ptr<LruQuota> quota_;
};

TEST_F(LruQuotaTest, WaterMarksArePercentsOfTheCap) {
  config_.high_water_percent = 90;
  config_.low_water_percent = 80;
  const std::uint64_t cap = 1'000'000;
  EXPECT_EQ(quota().high_water(cap), 900'000u);
  EXPECT_EQ(quota().low_water(cap), 800'000u);
  // A write evicts down to the low-water mark, or lower when it needs more room than that.
  EXPECT_EQ(quota().room_target(cap, 4096), 800'000u);
  EXPECT_EQ(quota().room_target(cap, 300'000), 600'000u);
  EXPECT_EQ(quota().room_target(cap, 2'000'000), 0u);
}

TEST_F(LruQuotaTest, EvictsTheLeastRecentlyUsedFirst) {
  const ContentId a = id(1), b = id(2), c = id(3);
  add({100, 300, 200});
  auto r = quota().evict_until(2000);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->bytes, 1000u);
  EXPECT_FALSE(r->exhausted);
  EXPECT_EQ(store_.purged, (std::vector<ContentId>{a}));
  ASSERT_TRUE(quota().evict_until(1000));
  EXPECT_EQ(store_.purged, (std::vector<ContentId>{a, c}));
  EXPECT_TRUE(store_.contents.contains(b));  // the most recent
  EXPECT_EQ(store_.counters.evictions, 2u);
  EXPECT_EQ(store_.counters.evicted_bytes, 2000u);
}

TEST_F(LruQuotaTest, AReadMakesAContentRecentWithTheNextWriteTxn) {
  const ContentId a = id(1), b = id(2);
  add({100, 200});
  quota().note_read(a, /*hits=*/3, /*misses=*/1, /*now_ms=*/300);
  EXPECT_EQ(quota().pending_counters().hits, 3u);
  store_.flush();
  EXPECT_EQ(quota().pending_counters(), Counters{});
  EXPECT_EQ(store_.counters.hits, 3u);
  EXPECT_EQ(store_.counters.misses, 1u);
  EXPECT_EQ(store_.contents[a].last_ms, 300u);
  ASSERT_TRUE(quota().evict_until(1000));
  EXPECT_EQ(store_.purged, (std::vector<ContentId>{b}));
}

TEST_F(LruQuotaTest, AMissAloneDoesNotMakeAContentRecent) {
  const ContentId a = id(1), b = id(2);
  add({100, 200});
  quota().note_read(a, /*hits=*/0, /*misses=*/4, /*now_ms=*/300);
  store_.flush();
  EXPECT_EQ(store_.counters.misses, 4u);
  ASSERT_TRUE(quota().evict_until(1000));
  EXPECT_EQ(store_.purged, (std::vector<ContentId>{a}));
  EXPECT_TRUE(store_.contents.contains(b));
}

TEST_F(LruQuotaTest, PinnedAndLeasedContentsAreNeverEvicted) {
  const ContentId a = id(1), b = id(2), c = id(3);
  add({100, 200, 300});
  ASSERT_TRUE(quota().pin(a));
  LruQuota other(store_, config_);  // another process: only its lease protects b here
  ASSERT_TRUE(other.pin(b));
  EXPECT_EQ(leases(), 2u);
  auto r = quota().evict_until(0);
  ASSERT_TRUE(r);
  EXPECT_EQ(store_.purged, (std::vector<ContentId>{c}));
  EXPECT_EQ(r->bytes, 1000u);
  // Nothing left that may be evicted: exhausted.
  r = quota().evict_until(0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->bytes, 0u);
  EXPECT_TRUE(r->exhausted);
  EXPECT_EQ(store_.purged.size(), 1u);
}

TEST_F(LruQuotaTest, AnExpiredLeaseProtectsNothingAndIsDeleted) {
  const ContentId a = id(1);
  add({100});
  {
    LruQuota crashed(store_, config_);  // pins, then never refreshes its lease
    ASSERT_TRUE(crashed.pin(a));
  }
  EXPECT_EQ(leases(), 1u);
  auto r = quota().evict_until(0);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->exhausted);
  store_.now_ms += 61'000;  // past lease_duration
  r = quota().evict_until(0);
  ASSERT_TRUE(r);
  EXPECT_EQ(store_.purged, (std::vector<ContentId>{a}));
  EXPECT_EQ(leases(), 0u);
}

TEST_F(LruQuotaTest, APinOfThisProcessHoldsEvenPastItsLease) {
  const ContentId a = id(1), b = id(2);
  add({100, 200});
  ASSERT_TRUE(quota().pin(a));
  store_.now_ms += 61'000;  // the lease expired (refresh_pins was not called)
  auto r = quota().evict_until(0);
  ASSERT_TRUE(r);
  EXPECT_EQ(store_.purged, (std::vector<ContentId>{b}));
  r = quota().evict_until(0);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->exhausted);
}

TEST_F(LruQuotaTest, RefreshPinsExtendsTheLeases) {
  const ContentId a = id(1);
  LruQuota other(store_, config_);
  add({100});
  ASSERT_TRUE(other.pin(a));
  store_.now_ms += 50'000;
  ASSERT_TRUE(other.refresh_pins());
  store_.now_ms += 50'000;  // 100 s after the pin, 50 s after the refresh
  auto r = quota().evict_until(0);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->exhausted);
  EXPECT_TRUE(store_.purged.empty());
}

TEST_F(LruQuotaTest, PinsNestAndTheLastUnpinReleasesTheLeaseWithTheNextWriteTxn) {
  const ContentId a = id(1);
  add({100});
  ASSERT_TRUE(quota().pin(a));
  ASSERT_TRUE(quota().pin(a));
  quota().unpin(a);
  ASSERT_TRUE(quota().evict_until(0));
  EXPECT_TRUE(store_.purged.empty());  // still pinned once
  quota().unpin(a);
  EXPECT_EQ(leases(), 1u);  // released in memory only, until a write txn
  store_.flush();
  EXPECT_EQ(leases(), 0u);
  ASSERT_TRUE(quota().evict_until(0));
  EXPECT_EQ(store_.purged, (std::vector<ContentId>{a}));
}

TEST_F(LruQuotaTest, AReleaseIsDroppedWhenTheContentIsPinnedAgainBeforeTheWriteTxn) {
  const ContentId a = id(1);
  add({100});
  ASSERT_TRUE(quota().pin(a));
  quota().unpin(a);
  ASSERT_TRUE(quota().pin(a));  // writes the lease again, then applies the release: kept
  EXPECT_EQ(leases(), 1u);
}

TEST_F(LruQuotaTest, PendingUpdatesGivenBackAreWrittenWithALaterTxn) {
  const ContentId a = id(1);
  add({100});
  quota().note_read(a, 2, 0, 500);
  Quota::Pending taken = quota().take_pending();
  EXPECT_EQ(quota().pending_counters(), Counters{});
  quota().restore_pending(std::move(taken));  // the txn that took them did not commit
  EXPECT_EQ(quota().pending_counters().hits, 2u);
  store_.flush();
  EXPECT_EQ(store_.contents[a].last_ms, 500u);
  EXPECT_EQ(store_.counters.hits, 2u);
}

TEST_F(LruQuotaTest, EvictionRunsInTxnsOfAtMostTheBatchLimit) {
  config_.evict_batch_blocks = 2;
  quota();
  for (std::uint64_t n = 0; n < 5; ++n) store_.add(id(n), 1000, 100 + n);
  auto r = quota().evict_until(0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->bytes, 5000u);
  EXPECT_EQ(store_.purged.size(), 5u);
  EXPECT_GE(store_.evicting_writes, 3);  // 2 + 2 + 1 blocks
  EXPECT_EQ(store_.usage.blocks, 0u);
}

}  // namespace
}  // namespace whfs::cache
