#pragma once
// The quota of the LMDB block cache (internal to cache/), apart from the storage it keeps
// under its cap, as CernVM-FS keeps its quota manager apart from its cache manager: recency,
// eviction down to the low-water mark, pins and leases, and the pending updates of reads that
// ride with the next write txn. Its records (the lru and leases DBs, records.h) live in the
// store's LMDB env and are changed in the store's write txns (a WriteScope passed in).
//
// Two seams: the store uses a Quota (LruQuota in lru_quota.h, or a test double), and the
// quota reaches the store through a QuotaStore (the cache, or a test double).

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "cache/content_id.h"
#include "cache/records.h"
#include "cache/txn_engine.h"

namespace whfs::cache {

// What the quota needs of the store.
class QuotaStore {
 public:
  virtual ~QuotaStore() = default;
  // Runs `body` in one write txn (TxnEngine::write), or in an eviction's own, which never
  // evicts in turn.
  virtual Result<void> write(WriteBody body) = 0;
  virtual Result<void> write_evicting(WriteBody body) = 0;
  // Records a later last access of a stored content (its record, then note_access); nothing
  // when it is not stored or was accessed later.
  virtual lmdb::Res<void> touch(WriteScope& s, const ContentId& id, std::uint64_t ms) = 0;
  // Deletes a content's blocks and record (its recency goes through Quota::forget); true
  // when anything of it was stored.
  virtual lmdb::Res<bool> purge(WriteScope& s, const ContentId& id) = 0;
};

// What the store needs of the quota. Thread-safe.
class Quota {
 public:
  // Updates kept in memory until the next write txn (so reads never write).
  struct Pending {
    std::unordered_map<ContentId, std::uint64_t> touched;  // content -> last access (ms)
    std::vector<ContentId> released;                       // leases to drop
    Counters counters;
    void merge(Pending&& other);
  };
  struct Evicted {
    std::uint64_t bytes = 0;
    bool exhausted = false;  // nothing left that may be evicted (all pinned or leased)
  };

  virtual ~Quota() = default;

  // ---- the water marks, for a cap ----
  virtual std::uint64_t high_water(std::uint64_t cap) const = 0;
  virtual std::uint64_t low_water(std::uint64_t cap) const = 0;
  // What a write of `need_bytes` past the high-water mark evicts down to: the low-water mark,
  // or lower if this write alone needs more room than that.
  virtual std::uint64_t room_target(std::uint64_t cap, std::uint64_t need_bytes) const = 0;

  // ---- eviction ----
  // Evicts least recently used contents (never a pinned or leased one) in write txns of at
  // most Options::evict_batch_blocks blocks until the footprint is at most `target_bytes`.
  virtual Result<Evicted> evict_until(std::uint64_t target_bytes) = 0;

  // ---- recency, in a write txn ----
  // A content's last access changes from `old_ms` (nullopt: a new content) to `new_ms`.
  virtual lmdb::Res<void> note_access(WriteScope& s, const ContentId& id,
                                      std::optional<std::uint64_t> old_ms,
                                      std::uint64_t new_ms) = 0;
  // A content last accessed at `last_ms` is deleted.
  virtual lmdb::Res<void> forget(WriteScope& s, const ContentId& id, std::uint64_t last_ms) = 0;

  // ---- pending updates ----
  // A read of `id` served `hits` blocks and missed `misses` (hits make it recent).
  virtual void note_read(const ContentId& id, std::uint32_t hits, std::uint32_t misses,
                         std::uint64_t now_ms) = 0;
  // The updates not yet written; what a write txn takes it applies with apply_pending(), or
  // gives back with restore_pending() when the txn does not commit.
  virtual Pending take_pending() = 0;
  virtual lmdb::Res<void> apply_pending(WriteScope& s, const Pending& pending) = 0;
  virtual void restore_pending(Pending&& pending) = 0;
  // The counters not yet written.
  virtual Counters pending_counters() = 0;

  // ---- pins (BlockStore::pin) ----
  virtual Result<void> pin(const ContentId& id) = 0;
  virtual void unpin(const ContentId& id) = 0;
  virtual Result<void> refresh_pins() = 0;
};

}  // namespace whfs::cache
