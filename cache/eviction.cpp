// BlockCache: LRU eviction by content, leases (pins that other processes respect), and the
// pending updates that ride along with the next write txn.
//
// Eviction runs in write txns of at most evict_batch_blocks deleted blocks each, so another
// writer (thread or process) waits for LMDB's writer lock at most one batch; readers never
// wait (MVCC). Deleting a block frees its overflow pages without touching them, so a batch is
// cheap. A content is skipped while this process pins it or any process holds an unexpired
// lease on it; an expired lease (its holder crashed or hung) is deleted on sight.

#include <spdlog/spdlog.h>

#include <algorithm>

#include "cache/guard.h"
#include "cache/lmdb_block_cache.h"

namespace whfs::cache {

namespace {
// Victims gathered per batch (each then costs a purge); more are gathered in the next batch.
constexpr std::size_t kMaxVictims = 256;

template <class E>
Unexpected<lmdb::Error> lmdb_fail(const E& e) {
  return {e.error()};
}
}  // namespace

bool LmdbBlockCache::pinned_here(const ContentId& id) {
  std::lock_guard lk(pins_mu_);
  return pins_.contains(id);
}

lmdb::Res<bool> LmdbBlockCache::has_live_lease(WriteScope& s, const ContentId& id) {
  const ContentKey prefix = content_key(id);
  auto cur = lmdb::Cursor::open(s.txn, dbs_.leases);
  if (!cur) return lmdb_fail(cur);
  bool live = false;
  for (auto e = cur->seek(prefix.bytes());; e = cur->next()) {
    if (!e) return lmdb_fail(e);
    if (!*e) break;
    const lmdb::Bytes key = (*e)->key;
    if (key.size() != prefix.size + kHolderSize ||
        !std::equal(prefix.bytes().begin(), prefix.bytes().end(), key.begin())) {
      break;
    }
    if (decode_u64((*e)->value).value_or(0) > s.now_ms) {
      live = true;
    } else if (auto d = cur->del(); !d) {
      return lmdb_fail(d);
    }
  }
  return live;
}

lmdb::Res<bool> LmdbBlockCache::purge_content(WriteScope& s, const ContentId& id) {
  forget_hash(id);
  auto old = load_record(s.txn, id);
  if (!old) return lmdb_fail(old);
  const ContentKey prefix = content_key(id);
  std::uint64_t blocks = 0;
  {
    auto cur = lmdb::Cursor::open(s.txn, dbs_.blocks);
    if (!cur) return lmdb_fail(cur);
    for (auto e = cur->seek(block_key(id, 0).bytes());; e = cur->next()) {
      if (!e) return lmdb_fail(e);
      if (!*e || !block_index_in((*e)->key, prefix.bytes())) break;
      const std::size_t value_size = (*e)->value.size();
      s.usage.footprint_bytes -= geometry_.footprint((*e)->key.size(), value_size);
      s.usage.payload_bytes -= value_size - std::min(value_size, BlockGeometry::kChecksumSize);
      ++blocks;
      if (auto d = cur->del(); !d) return lmdb_fail(d);
    }
  }  // the cursor closes before the txn can end
  s.usage.blocks -= blocks;
  if (*old) {
    if (auto d = s.txn.del(dbs_.contents, prefix.bytes()); !d) return lmdb_fail(d);
    if (auto d = s.txn.del(dbs_.lru, lru_key((*old)->last_access_ms, id).bytes()); !d) {
      return lmdb_fail(d);
    }
    --s.usage.contents;
  }
  return old->has_value() || blocks > 0;
}

lmdb::Res<std::uint64_t> LmdbBlockCache::evict_batch(WriteScope& s, std::uint64_t target_bytes,
                                                     bool* more, bool* exhausted) {
  *more = false;
  std::vector<ContentId> victims;
  {
    auto cur = lmdb::Cursor::open(s.txn, dbs_.lru);
    if (!cur) return lmdb_fail(cur);
    for (auto e = cur->first();; e = cur->next()) {
      if (!e) return lmdb_fail(e);
      if (!*e) break;
      const auto entry = decode_lru_key((*e)->key);
      if (!entry || pinned_here(entry->id)) continue;
      auto leased = has_live_lease(s, entry->id);
      if (!leased) return lmdb_fail(leased);
      if (*leased) continue;
      victims.push_back(entry->id);
      if (victims.size() == kMaxVictims) {
        *more = true;
        break;
      }
    }
  }
  *exhausted = victims.empty();
  std::uint64_t freed = 0;
  const std::uint64_t blocks_before = s.usage.blocks;
  for (const ContentId& id : victims) {
    if (s.usage.footprint_bytes <= target_bytes) {
      *more = false;
      break;
    }
    if (blocks_before - s.usage.blocks >= options_.evict_batch_blocks) {
      *more = true;
      break;
    }
    const std::uint64_t before = s.usage.footprint_bytes;
    if (auto r = purge_content(s, id); !r) return lmdb_fail(r);
    freed += before - s.usage.footprint_bytes;
    ++s.counters.evictions;
    s.counters.evicted_bytes += before - s.usage.footprint_bytes;
  }
  return freed;
}

Result<std::uint64_t> LmdbBlockCache::evict_to(std::uint64_t target_bytes) {
  return guarded("cache evict", [&]() -> Result<std::uint64_t> {
    auto r = evict_until(target_bytes);
    if (!r) return Unexpected<CacheError>{r.error()};
    return r->bytes;
  });
}

Result<LmdbBlockCache::Evicted> LmdbBlockCache::evict_until(std::uint64_t target_bytes) {
  Evicted total;
  for (;;) {
    std::uint64_t freed = 0;
    std::uint64_t after = 0;
    bool more = false;
    bool exhausted = false;
    auto ok = write(
        0,
        [&](WriteScope& s) -> lmdb::Res<void> {
          freed = 0;
          more = exhausted = false;
          if (s.usage.footprint_bytes > target_bytes) {
            auto r = evict_batch(s, target_bytes, &more, &exhausted);
            if (!r) return lmdb_fail(r);
            freed = *r;
          }
          after = s.usage.footprint_bytes;
          return {};
        },
        /*evicting=*/true);
    if (!ok) return Unexpected<CacheError>{ok.error()};
    total.bytes += freed;
    total.exhausted = exhausted;
    if (freed == 0 || after <= target_bytes || !more) return total;
  }
}

Result<bool> LmdbBlockCache::evict(const ContentId& id) {
  return guarded("cache evict", [&]() -> Result<bool> {
    bool existed = false;
    auto ok = write(
        0,
        [&](WriteScope& s) -> lmdb::Res<void> {
          const std::uint64_t before = s.usage.footprint_bytes;
          auto r = purge_content(s, id);
          if (!r) return lmdb_fail(r);
          existed = *r;
          if (existed) {
            ++s.counters.evictions;
            s.counters.evicted_bytes += before - s.usage.footprint_bytes;
          }
          return {};
        },
        /*evicting=*/true);
    if (!ok) return Unexpected<CacheError>{ok.error()};
    return existed;
  });
}

// ---- leases ----------------------------------------------------------------------------

Result<void> LmdbBlockCache::pin(const ContentId& id) {
  if (read_only_) return {};  // nothing is ever evicted from a read-only cache
  return guarded("cache pin", [&]() -> Result<void> {
    {
      std::lock_guard lk(pins_mu_);
      if (pins_[id]++ > 0) return {};
    }
    auto leased = write(0, [&](WriteScope& s) -> lmdb::Res<void> {
      const std::uint64_t expiry =
          s.now_ms + static_cast<std::uint64_t>(options_.lease_duration.count()) * 1000;
      return s.txn.put(dbs_.leases, lease_key(id, holder_).bytes(),
                       lmdb::as_bytes(encode_u64(expiry)));
    });
    if (!leased) unpin_here(id);  // a failed pin leaves nothing to unpin
    return leased;
  });
}

void LmdbBlockCache::unpin(const ContentId& id) {
  if (read_only_) return;
  try {
    if (!unpin_here(id)) return;
    // The lease goes with the next write txn; until then it only delays an eviction.
    PendingShard& shard = pending_shard();
    std::lock_guard lk(shard.mu);
    shard.pending.released.push_back(id);
  } catch (const std::exception& e) {
    spdlog::warn("cache: unpin {}: {}", id.to_string(), e.what());
  }
}

bool LmdbBlockCache::unpin_here(const ContentId& id) {
  std::lock_guard lk(pins_mu_);
  const auto it = pins_.find(id);
  if (it == pins_.end() || --it->second > 0) return false;
  pins_.erase(it);
  return true;
}

Result<void> LmdbBlockCache::refresh_pins() {
  if (read_only_) return {};
  return guarded("cache refresh_pins", [&]() -> Result<void> {
    std::vector<ContentId> ids;
    {
      std::lock_guard lk(pins_mu_);
      for (const auto& [id, count] : pins_) ids.push_back(id);
    }
    if (ids.empty()) return {};
    return write(0, [&](WriteScope& s) -> lmdb::Res<void> {
      const std::string expiry =
          encode_u64(s.now_ms + static_cast<std::uint64_t>(options_.lease_duration.count()) * 1000);
      for (const ContentId& id : ids) {
        auto r = s.txn.put(dbs_.leases, lease_key(id, holder_).bytes(), lmdb::as_bytes(expiry));
        if (!r) return r;
      }
      return {};
    });
  });
}

lmdb::Res<void> LmdbBlockCache::apply_pending(WriteScope& s, Pending& pending) {
  for (const auto& [id, ms] : pending.touched) {
    auto old = load_record(s.txn, id);
    if (!old) return lmdb_fail(old);
    if (!*old || (*old)->last_access_ms >= ms) continue;
    ContentRecord rec = **old;
    rec.last_access_ms = ms;
    if (auto r = store_record(s, id, *old, rec); !r) return r;
  }
  for (const ContentId& id : pending.released) {
    if (pinned_here(id)) continue;  // pinned again since
    if (auto r = s.txn.del(dbs_.leases, lease_key(id, holder_).bytes()); !r) return lmdb_fail(r);
  }
  s.counters += pending.counters;
  return {};
}

}  // namespace whfs::cache
