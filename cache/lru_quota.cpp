// LruQuota: LRU eviction by content, leases (pins that other processes respect), and the
// pending updates that ride along with the next write txn.

#include "cache/lru_quota.h"

#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <thread>
#include <utility>

#include "cache/guard.h"

namespace whfs::cache {

namespace {
// Victims gathered per batch (each then costs a purge); more are gathered in the next batch.
constexpr std::size_t kMaxVictims = 256;

}  // namespace

void Quota::Pending::merge(Pending&& other) {
  for (const auto& [id, ms] : other.touched) {
    auto& t = touched[id];
    t = std::max(t, ms);
  }
  released.insert(released.end(), other.released.begin(), other.released.end());
  counters += other.counters;
}

LruQuota::Config LruQuota::config_of(const Options& o, const Dbs& dbs) {
  return {
      dbs.lru,         dbs.leases, o.high_water_percent, o.low_water_percent, o.evict_batch_blocks,
      o.lease_duration};
}

LruQuota::LruQuota(QuotaStore& store, const Config& config) : store_(store), config_(config) {
  if (::getrandom(holder_.data(), holder_.size(), 0) != static_cast<ssize_t>(holder_.size())) {
    // Only uniqueness matters; fall back to something process-unique.
    const auto seed =
        static_cast<std::uint64_t>(::getpid()) ^
        static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    for (std::size_t i = 0; i < holder_.size(); ++i) holder_[i] = seed >> (i % 8 * 8) & 0xff;
  }
}

// ---- water marks -----------------------------------------------------------------------

std::uint64_t LruQuota::high_water(std::uint64_t cap) const {
  return cap / 100 * config_.high_water_percent;
}

std::uint64_t LruQuota::low_water(std::uint64_t cap) const {
  return cap / 100 * config_.low_water_percent;
}

std::uint64_t LruQuota::room_target(std::uint64_t cap, std::uint64_t need_bytes) const {
  const std::uint64_t high = high_water(cap);
  return std::min(low_water(cap), high - std::min(need_bytes, high));
}

// ---- eviction --------------------------------------------------------------------------

bool LruQuota::pinned_here(const ContentId& id) {
  std::lock_guard lk(pins_mu_);
  return pins_.contains(id);
}

lmdb::Res<bool> LruQuota::has_live_lease(WriteScope& s, const ContentId& id) {
  const ContentKey prefix = content_key(id);
  auto cur = lmdb::Cursor::open(s.txn, config_.leases);
  if (!cur) return lmdb::fail(cur);
  bool live = false;
  for (auto e = cur->seek(prefix.bytes());; e = cur->next()) {
    if (!e) return lmdb::fail(e);
    if (!*e) break;
    const lmdb::Bytes key = (*e)->key;
    if (key.size() != prefix.size + kHolderSize ||
        !std::equal(prefix.bytes().begin(), prefix.bytes().end(), key.begin())) {
      break;
    }
    if (decode_u64((*e)->value).value_or(0) > s.now_ms) {
      live = true;
    } else if (auto d = cur->del(); !d) {
      return lmdb::fail(d);
    }
  }
  return live;
}

lmdb::Res<std::uint64_t> LruQuota::evict_batch(WriteScope& s, std::uint64_t target_bytes,
                                               bool* more, bool* exhausted) {
  *more = false;
  std::vector<ContentId> victims;
  {
    auto cur = lmdb::Cursor::open(s.txn, config_.lru);
    if (!cur) return lmdb::fail(cur);
    for (auto e = cur->first();; e = cur->next()) {
      if (!e) return lmdb::fail(e);
      if (!*e) break;
      const auto entry = decode_lru_key((*e)->key);
      if (!entry || pinned_here(entry->id)) continue;
      auto leased = has_live_lease(s, entry->id);
      if (!leased) return lmdb::fail(leased);
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
    if (blocks_before - s.usage.blocks >= config_.evict_batch_blocks) {
      *more = true;
      break;
    }
    const std::uint64_t before = s.usage.footprint_bytes;
    if (auto r = store_.purge(s, id); !r) return lmdb::fail(r);
    freed += before - s.usage.footprint_bytes;
    ++s.counters.evictions;
    s.counters.evicted_bytes += before - s.usage.footprint_bytes;
  }
  return freed;
}

Result<Quota::Evicted> LruQuota::evict_until(std::uint64_t target_bytes) {
  Evicted total;
  for (;;) {
    std::uint64_t freed = 0;
    std::uint64_t after = 0;
    bool more = false;
    bool exhausted = false;
    auto ok = store_.write_evicting([&](WriteScope& s) -> lmdb::Res<void> {
      freed = 0;
      more = exhausted = false;
      if (s.usage.footprint_bytes > target_bytes) {
        auto r = evict_batch(s, target_bytes, &more, &exhausted);
        if (!r) return lmdb::fail(r);
        freed = *r;
      }
      after = s.usage.footprint_bytes;
      return {};
    });
    if (!ok) return Unexpected<CacheError>{ok.error()};
    total.bytes += freed;
    total.exhausted = exhausted;
    if (freed == 0 || after <= target_bytes || !more) return total;
  }
}

// ---- recency ---------------------------------------------------------------------------

lmdb::Res<void> LruQuota::note_access(WriteScope& s, const ContentId& id,
                                      std::optional<std::uint64_t> old_ms, std::uint64_t new_ms) {
  if (old_ms == new_ms) return {};
  if (old_ms) {
    if (auto r = s.txn.del(config_.lru, lru_key(*old_ms, id).bytes()); !r) return lmdb::fail(r);
  }
  return s.txn.put(config_.lru, lru_key(new_ms, id).bytes(), {});
}

lmdb::Res<void> LruQuota::forget(WriteScope& s, const ContentId& id, std::uint64_t last_ms) {
  if (auto d = s.txn.del(config_.lru, lru_key(last_ms, id).bytes()); !d) return lmdb::fail(d);
  return {};
}

// ---- pending updates -------------------------------------------------------------------

LruQuota::PendingShard& LruQuota::pending_shard() {
  return pending_[std::hash<std::thread::id>{}(std::this_thread::get_id()) % kPendingShards];
}

void LruQuota::note_read(const ContentId& id, std::uint32_t hits, std::uint32_t misses,
                         std::uint64_t now_ms) {
  PendingShard& shard = pending_shard();
  std::lock_guard lk(shard.mu);
  shard.pending.counters.hits += hits;
  shard.pending.counters.misses += misses;
  if (hits > 0) shard.pending.touched[id] = now_ms;
}

Quota::Pending LruQuota::take_pending() {
  Pending all;
  for (PendingShard& shard : pending_) {
    Pending one;
    {
      std::lock_guard lk(shard.mu);
      std::swap(one, shard.pending);
    }
    all.merge(std::move(one));
  }
  return all;
}

void LruQuota::restore_pending(Pending&& pending) {
  PendingShard& shard = pending_shard();
  std::lock_guard lk(shard.mu);
  shard.pending.merge(std::move(pending));
}

Counters LruQuota::pending_counters() {
  Counters c;
  for (PendingShard& shard : pending_) {
    std::lock_guard lk(shard.mu);
    c += shard.pending.counters;
  }
  return c;
}

lmdb::Res<void> LruQuota::apply_pending(WriteScope& s, const Pending& pending) {
  // Recency through the content records (the store's), so that the record and the lru key
  // keep the same last access.
  for (const auto& [id, ms] : pending.touched) {
    if (auto r = store_.touch(s, id, ms); !r) return r;
  }
  for (const ContentId& id : pending.released) {
    if (pinned_here(id)) continue;  // pinned again since
    if (auto r = s.txn.del(config_.leases, lease_key(id, holder_).bytes()); !r) {
      return lmdb::fail(r);
    }
  }
  s.counters += pending.counters;
  return {};
}

// ---- pins and leases -------------------------------------------------------------------

lmdb::Res<void> LruQuota::put_lease(WriteScope& s, const ContentId& id) {
  const std::uint64_t expiry =
      s.now_ms + static_cast<std::uint64_t>(config_.lease_duration.count()) * 1000;
  return s.txn.put(config_.leases, lease_key(id, holder_).bytes(),
                   lmdb::as_bytes(encode_u64(expiry)));
}

Result<void> LruQuota::pin(const ContentId& id) {
  return guarded("cache pin", [&]() -> Result<void> {
    {
      std::lock_guard lk(pins_mu_);
      if (pins_[id]++ > 0) return {};
    }
    auto leased = store_.write([&](WriteScope& s) { return put_lease(s, id); });
    if (!leased) unpin_here(id);  // a failed pin leaves nothing to unpin
    return leased;
  });
}

void LruQuota::unpin(const ContentId& id) {
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

bool LruQuota::unpin_here(const ContentId& id) {
  std::lock_guard lk(pins_mu_);
  const auto it = pins_.find(id);
  if (it == pins_.end() || --it->second > 0) return false;
  pins_.erase(it);
  return true;
}

Result<void> LruQuota::refresh_pins() {
  return guarded("cache refresh_pins", [&]() -> Result<void> {
    std::vector<ContentId> ids;
    {
      std::lock_guard lk(pins_mu_);
      for (const auto& [id, count] : pins_) ids.push_back(id);
    }
    if (ids.empty()) return {};
    return store_.write([&](WriteScope& s) -> lmdb::Res<void> {
      for (const ContentId& id : ids) {
        if (auto r = put_lease(s, id); !r) return r;
      }
      return {};
    });
  });
}

}  // namespace whfs::cache
