#pragma once
// LruQuota: the cache's quota (quota.h) on the lru and leases DBs (records.h).
//
// Eviction runs in write txns of at most evict_batch_blocks deleted blocks each, so another
// writer (thread or process) waits for LMDB's writer lock at most one batch; readers never
// wait (MVCC). Deleting a block frees its overflow pages without touching them, so a batch is
// cheap. A content is skipped while this process pins it or any process holds an unexpired
// lease on it; an expired lease (its holder crashed or hung) is deleted on sight.

#include <array>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <unordered_map>

#include "cache/quota.h"

namespace whfs::cache {

class LruQuota final : public Quota {
 public:
  struct Config {
    lmdb::Dbi lru, leases;
    unsigned high_water_percent = 90;
    unsigned low_water_percent = 80;
    std::uint32_t evict_batch_blocks = 4096;
    std::chrono::seconds lease_duration{600};
  };
  static Config config_of(const Options& options, const Dbs& dbs);

  // `store` outlives the quota. The lease holder id is random.
  LruQuota(QuotaStore& store, const Config& config);
  LruQuota(const LruQuota&) = delete;
  LruQuota& operator=(const LruQuota&) = delete;

  std::uint64_t high_water(std::uint64_t cap) const override;
  std::uint64_t low_water(std::uint64_t cap) const override;
  std::uint64_t room_target(std::uint64_t cap, std::uint64_t need_bytes) const override;
  Result<Evicted> evict_until(std::uint64_t target_bytes) override;
  lmdb::Res<void> note_access(WriteScope& s, const ContentId& id,
                              std::optional<std::uint64_t> old_ms, std::uint64_t new_ms) override;
  lmdb::Res<void> forget(WriteScope& s, const ContentId& id, std::uint64_t last_ms) override;
  void note_read(const ContentId& id, std::uint32_t hits, std::uint32_t misses,
                 std::uint64_t now_ms) override;
  Pending take_pending() override;
  lmdb::Res<void> apply_pending(WriteScope& s, const Pending& pending) override;
  void restore_pending(Pending&& pending) override;
  Counters pending_counters() override;
  Result<void> pin(const ContentId& id) override;
  void unpin(const ContentId& id) override;
  Result<void> refresh_pins() override;

 private:
  // Sharded by thread like the read-txn pool: every read records its hits and recency here.
  struct alignas(64) PendingShard {
    std::mutex mu;  // a leaf lock, never held across an LMDB call
    Pending pending;
  };
  static constexpr std::size_t kPendingShards = 16;

  // One eviction txn's worth. `more`: stopped at the batch limit; `exhausted`: nothing left
  // that may be evicted (all pinned or leased).
  lmdb::Res<std::uint64_t> evict_batch(WriteScope& s, std::uint64_t target_bytes, bool* more,
                                       bool* exhausted);
  lmdb::Res<bool> has_live_lease(WriteScope& s, const ContentId& id);
  lmdb::Res<void> put_lease(WriteScope& s, const ContentId& id);
  bool pinned_here(const ContentId& id);
  // Drops one in-process pin; true when it was the last.
  bool unpin_here(const ContentId& id);
  PendingShard& pending_shard();

  QuotaStore& store_;
  const Config config_;
  Holder holder_{};  // this instance's lease holder id (random)
  std::array<PendingShard, kPendingShards> pending_;
  std::mutex pins_mu_;  // guards pins_; a leaf, never held across an LMDB call
  std::unordered_map<ContentId, int> pins_;
};

}  // namespace whfs::cache
