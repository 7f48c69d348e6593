// BlockCache: the read path (zero-copy, one read txn, no writes), block puts and whole-content
// verification.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "cache/guard.h"
#include "cache/lmdb_block_cache.h"
#include "fs/common/hash.h"

namespace whfs::cache {

namespace {

// A put is one write txn up to this size; bigger ones are split so that other writers (other
// threads, other processes) never wait long for LMDB's single writer lock.
constexpr std::size_t kMaxPutBytes = std::size_t{256} << 20;
// verify_content hashes this much per read txn: a long-lived snapshot would keep LMDB from
// reusing pages freed meanwhile.
constexpr std::uint64_t kVerifyChunkBytes = std::uint64_t{64} << 20;

std::uint64_t load_le64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<std::uint64_t>(p[i]);
  return v;
}

void store_le64(std::byte* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i) & 0xff);
}

// The payload of a stored block value when its checksum holds.
std::optional<std::span<const std::byte>> checked_payload(lmdb::Bytes key, lmdb::Bytes value) {
  if (value.size() < BlockGeometry::kChecksumSize) return std::nullopt;
  const auto payload = value.subspan(BlockGeometry::kChecksumSize);
  if (block_checksum(key, payload) != load_le64(value.data())) return std::nullopt;
  return payload;
}

ContentState state_of(const ContentRecord& r) { return {r.present, r.total, r.verified}; }

Unexpected<CacheError> invalid(const std::string& what) {
  return cache_error(CacheError::Kind::kInvalidArgument, "cache: " + what);
}

}  // namespace

// A new record's epoch is random, so that a record deleted and created again (by another
// process) never looks like the one a running hash started on.
std::uint32_t random_epoch() {
  thread_local std::mt19937 rng(std::random_device{}());
  return static_cast<std::uint32_t>(rng());
}

bool LmdbBlockCache::verified_here_read_only(const ContentId& id) {
  if (!read_only_) return false;
  std::lock_guard lock(hashes_mu_);
  return read_only_verified_.count(id) != 0;
}

// ---- records ---------------------------------------------------------------------------

lmdb::Res<std::optional<ContentRecord>> LmdbBlockCache::load_record(const lmdb::Txn& txn,
                                                                    const ContentId& id) {
  auto v = txn.get(dbs_.contents, content_key(id).bytes());
  if (!v) return Unexpected<lmdb::Error>{v.error()};
  if (!*v) return std::optional<ContentRecord>();
  auto rec = decode_content(**v);
  if (!rec) spdlog::warn("cache: unreadable record of {} ignored", id.to_string());
  return rec;
}

lmdb::Res<void> LmdbBlockCache::store_record(WriteScope& s, const ContentId& id,
                                             const std::optional<ContentRecord>& old,
                                             const ContentRecord& rec) {
  if (!old || old->last_access_ms != rec.last_access_ms) {
    if (old) {
      if (auto r = s.txn.del(dbs_.lru, lru_key(old->last_access_ms, id).bytes()); !r) {
        return Unexpected<lmdb::Error>{r.error()};
      }
    }
    if (auto r = s.txn.put(dbs_.lru, lru_key(rec.last_access_ms, id).bytes(), {}); !r) return r;
  }
  if (!old) ++s.usage.contents;
  return s.txn.put(dbs_.contents, content_key(id).bytes(), lmdb::as_bytes(encode(rec)));
}

// ---- read ------------------------------------------------------------------------------

Result<std::vector<std::uint32_t>> LmdbBlockCache::read_blocks(const ContentId& id,
                                                               std::uint64_t content_size,
                                                               std::uint32_t first,
                                                               std::uint32_t count, BlockFn fn,
                                                               ReadMode mode) {
  using Out = Result<std::vector<std::uint32_t>>;
  return guarded("cache read", [&]() -> Out {
    const std::uint32_t total = geometry_.block_count(content_size);
    if (first > total || count > total - first) return invalid("block range past the content");
    std::vector<std::uint32_t> missing, bad;
    std::uint32_t hits = 0;
    const ContentKey prefix = content_key(id);
    const std::uint32_t end = first + count;
    bool unverified = false;
    auto ok = read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      if (mode != ReadMode::kPresence) {
        // Not verified: not for readers yet (kVerified), or not once complete (kPartial).
        auto rec = load_record(rd.txn, id);
        if (!rec) return Unexpected<lmdb::Error>{rec.error()};
        const bool verified = *rec && (*rec)->size == content_size &&
                              ((*rec)->verified || verified_here_read_only(id));
        const bool hide =
            mode == ReadMode::kVerified ? !verified : *rec && (*rec)->complete() && !verified;
        if (hide) {
          unverified = true;
          for (std::uint32_t b = first; b < end; ++b) missing.push_back(b);
          return {};
        }
      }
      std::uint32_t next = first;
      auto e = rd.cursor.seek(block_key(id, first).bytes());
      while (next < end) {
        if (!e) return Unexpected<lmdb::Error>{e.error()};
        const auto index = *e ? block_index_in((*e)->key, prefix.bytes()) : std::nullopt;
        const std::uint32_t stop = index ? std::min(*index, end) : end;
        for (; next < stop; ++next) missing.push_back(next);
        if (next == end) break;
        if (mode == ReadMode::kPresence) {
          ++next;
          e = rd.cursor.next();
          continue;
        }
        const auto payload = checked_payload((*e)->key, (*e)->value);
        if (!payload) {
          bad.push_back(next);
          missing.push_back(next);
        } else if (payload->size() != geometry_.block_length(content_size, next)) {
          missing.push_back(next);  // a good block, but the caller's size disagrees
        } else {
          fn(next, *payload);
          ++hits;
        }
        ++next;
        e = rd.cursor.next();
      }
      return {};
    });
    if (!ok) return Unexpected<CacheError>{ok.error()};
    if (!bad.empty() && !read_only_) (void)drop_bad_blocks(id, bad);
    if (unverified || mode == ReadMode::kPresence || read_only_) return missing;
    {
      PendingShard& shard = pending_shard();
      std::lock_guard lk(shard.mu);
      shard.pending.counters.hits += hits;
      shard.pending.counters.misses += missing.size();
      if (hits > 0) shard.pending.touched[id] = now_ms();
    }
    return missing;
  });
}

Result<std::optional<ContentState>> LmdbBlockCache::content_state(const ContentId& id) {
  using Out = Result<std::optional<ContentState>>;
  return guarded("cache content_state", [&]() -> Out {
    std::optional<ContentState> state;
    auto ok = read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      auto rec = load_record(rd.txn, id);
      if (!rec) return Unexpected<lmdb::Error>{rec.error()};
      if (*rec) state = state_of(**rec);
      return {};
    });
    if (!ok) return Unexpected<CacheError>{ok.error()};
    if (state && state->complete() && verified_here_read_only(id)) state->verified = true;
    return state;
  });
}

Result<void> LmdbBlockCache::drop_bad_blocks(const ContentId& id,
                                             const std::vector<std::uint32_t>& bad) {
  std::uint32_t dropped = 0;
  auto ok = write(0, [&](WriteScope& s) -> lmdb::Res<void> {
    dropped = 0;
    auto old = load_record(s.txn, id);
    if (!old) return Unexpected<lmdb::Error>{old.error()};
    for (std::uint32_t index : bad) {
      const BlockKey key = block_key(id, index);
      auto v = s.txn.get(dbs_.blocks, key.bytes());
      if (!v) return Unexpected<lmdb::Error>{v.error()};
      // Re-check: another process may have replaced it with a good block meanwhile.
      if (!*v || checked_payload(key.bytes(), **v)) continue;
      const std::size_t value_size = (*v)->size();
      if (auto r = s.txn.del(dbs_.blocks, key.bytes()); !r)
        return Unexpected<lmdb::Error>{r.error()};
      ++dropped;
      --s.usage.blocks;
      s.usage.footprint_bytes -= geometry_.footprint(key.size, value_size);
      s.usage.payload_bytes -= value_size - std::min(value_size, BlockGeometry::kChecksumSize);
    }
    s.counters.corrupt_blocks += dropped;
    if (dropped == 0 || !*old) return {};
    ContentRecord rec = **old;
    rec.present -= std::min(rec.present, dropped);
    rec.verified = false;
    ++rec.epoch;
    forget_hash(id);
    return store_record(s, id, *old, rec);
  });
  if (dropped > 0) {
    spdlog::warn("cache: dropped {} corrupt block(s) of {} (checksum mismatch)", dropped,
                 id.to_string());
  }
  return ok;
}

// ---- put -------------------------------------------------------------------------------

Result<ContentState> LmdbBlockCache::put_blocks(const ContentId& id, std::uint64_t content_size,
                                                std::uint32_t first,
                                                std::span<const std::byte> data) {
  return guarded("cache put", [&]() -> Result<ContentState> {
    const std::uint32_t bs = geometry_.block_size();
    const std::uint32_t total = geometry_.block_count(content_size);
    const auto n = static_cast<std::uint32_t>((data.size() + bs - 1) / bs);
    if (first > total || n > total - first) return invalid("blocks past the end of the content");
    if (n > 0 && data.size() - std::size_t{n - 1} * bs !=
                     geometry_.block_length(content_size, first + n - 1)) {
      return invalid("data is not whole blocks (only the content's last block may be short)");
    }
    if (n == 0) {
      auto now = content_state(id);
      if (!now) return Unexpected<CacheError>{now.error()};
      return now->value_or(ContentState{0, total, false});
    }
    ContentState state{0, total, false};
    const std::uint32_t per_txn = std::max<std::uint32_t>(1, kMaxPutBytes / bs);
    std::uint32_t done = 0;
    do {
      const std::uint32_t m = std::min(per_txn, n - done);
      const auto chunk =
          data.subspan(std::size_t{done} * bs,
                       std::min(data.size() - std::size_t{done} * bs, std::size_t{m} * bs));
      std::uint64_t need = 4 * geometry_.page_size();  // B-tree pages the txn may add
      for (std::uint32_t i = 0; i < m; ++i) {
        need += geometry_.footprint(
            block_key(id, 0).size,
            BlockGeometry::kChecksumSize + geometry_.block_length(content_size, first + done + i));
      }
      std::uint32_t epoch = 0;
      bool skipped = false;
      auto ok = write(need, [&](WriteScope& s) -> lmdb::Res<void> {
        return put_txn(s, id, content_size, first + done, chunk, &state, &epoch, &skipped);
      });
      if (!ok) return Unexpected<CacheError>{ok.error()};
      // Bytes put are the stored bytes unless a block was there already (then read it back).
      advance_hash(id, content_size, first + done, chunk, !skipped, epoch);
      done += m;
    } while (done < n);
    return state;
  });
}

lmdb::Res<void> LmdbBlockCache::put_txn(WriteScope& s, const ContentId& id,
                                        std::uint64_t content_size, std::uint32_t first,
                                        std::span<const std::byte> data, ContentState* state,
                                        std::uint32_t* epoch, bool* skipped) {
  const std::uint32_t total = geometry_.block_count(content_size);
  auto old = load_record(s.txn, id);
  if (!old) return Unexpected<lmdb::Error>{old.error()};
  if (*old && (*old)->size != content_size) {
    // Same id, other size: one of the two is wrong; the new blocks come with the caller's size.
    spdlog::warn("cache: {} was recorded with size {}, now {}: dropping its blocks", id.to_string(),
                 (*old)->size, content_size);
    if (auto r = purge_content(s, id); !r) return Unexpected<lmdb::Error>{r.error()};
    old->reset();
  }
  ContentRecord rec =
      old->value_or(ContentRecord{content_size, 0, total, random_epoch(), false, 0});
  const std::uint32_t bs = geometry_.block_size();
  for (std::size_t off = 0, index = first; off < data.size(); off += bs, ++index) {
    const auto payload = data.subspan(off, std::min<std::size_t>(bs, data.size() - off));
    const BlockKey key = block_key(id, static_cast<std::uint32_t>(index));
    const std::size_t value_size = BlockGeometry::kChecksumSize + payload.size();
    auto slot = s.txn.reserve_new(dbs_.blocks, key.bytes(), value_size);
    if (!slot) return Unexpected<lmdb::Error>{slot.error()};
    if (!*slot) {  // already stored (by us earlier, another thread or process)
      *skipped = true;
      continue;
    }
    // MDB_RESERVE: the only copy of the payload, straight into LMDB's page.
    store_le64((*slot)->data(), block_checksum(key.bytes(), payload));
    std::memcpy((*slot)->data() + BlockGeometry::kChecksumSize, payload.data(), payload.size());
    ++rec.present;
    ++s.usage.blocks;
    s.usage.footprint_bytes += geometry_.footprint(key.size, value_size);
    s.usage.payload_bytes += payload.size();
  }
  rec.last_access_ms = std::max(rec.last_access_ms, s.now_ms);
  *state = state_of(rec);
  *epoch = rec.epoch;
  return store_record(s, id, *old, rec);
}

// ---- running hash ------------------------------------------------------------------------

void LmdbBlockCache::advance_hash(const ContentId& id, std::uint64_t content_size,
                                  std::uint32_t first, std::span<const std::byte> data, bool exact,
                                  std::uint32_t epoch) {
  std::shared_ptr<RunningHash> h;
  {
    std::lock_guard lock(hashes_mu_);
    auto it = hashes_.find(id);
    if (it != hashes_.end()) {
      h = it->second;
    } else if (first == 0) {
      h = hashes_.emplace(id, std::make_shared<RunningHash>()).first->second;
    } else {
      return;  // the front has not arrived: nothing to hash yet
    }
  }
  std::lock_guard lock(h->mu);
  if (!h->hasher) {
    h->hasher.emplace(id.kind() == ContentId::Kind::kSha256 ? Hasher(HashAlgo::kSha256)
                                                            : git_blob_hasher(content_size));
    h->epoch = epoch;
  }
  if (h->epoch != epoch) {  // blocks were deleted since it started
    forget_hash(id);
    return;
  }
  const std::uint32_t bs = geometry_.block_size();
  const auto n = static_cast<std::uint32_t>((data.size() + bs - 1) / bs);
  if (exact && first <= h->next && h->next < first + n) {
    h->hasher->update(data.subspan(std::size_t{h->next - first} * bs));
    h->next = first + n;
  }
  // Blocks that came out of order may follow: hash them from the store up to the next gap.
  const std::uint32_t total = geometry_.block_count(content_size);
  if (h->next >= total) return;
  const ContentKey prefix = content_key(id);
  auto ok = read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
    for (auto e = rd.cursor.seek(block_key(id, h->next).bytes()); h->next < total;
         e = rd.cursor.next()) {
      if (!e) return Unexpected<lmdb::Error>{e.error()};
      const auto index = *e ? block_index_in((*e)->key, prefix.bytes()) : std::nullopt;
      if (!index || *index != h->next) break;
      const auto payload = checked_payload((*e)->key, (*e)->value);
      if (!payload || payload->size() != geometry_.block_length(content_size, h->next)) break;
      h->hasher->update(*payload);
      ++h->next;
    }
    return {};
  });
  if (!ok) forget_hash(id);
}

std::optional<std::vector<std::uint8_t>> LmdbBlockCache::take_running_digest(const ContentId& id,
                                                                             std::uint32_t total,
                                                                             std::uint32_t epoch) {
  std::shared_ptr<RunningHash> h;
  {
    std::lock_guard lock(hashes_mu_);
    auto it = hashes_.find(id);
    if (it == hashes_.end()) return std::nullopt;
    h = it->second;
    hashes_.erase(it);
  }
  std::lock_guard lock(h->mu);
  if (!h->hasher || h->next != total || h->epoch != epoch) return std::nullopt;
  return h->hasher->finish();
}

void LmdbBlockCache::forget_hash(const ContentId& id) {
  std::lock_guard lock(hashes_mu_);
  hashes_.erase(id);
}

// ---- verify ----------------------------------------------------------------------------

Result<ContentState> LmdbBlockCache::verify_content(const ContentId& id,
                                                    std::uint64_t content_size) {
  return guarded("cache verify", [&] { return verify(id, content_size, false); });
}

Result<ContentState> LmdbBlockCache::recheck_content(const ContentId& id,
                                                     std::uint64_t content_size) {
  return guarded("cache recheck", [&] { return verify(id, content_size, true); });
}

Result<ContentState> LmdbBlockCache::verify(const ContentId& id, std::uint64_t content_size,
                                            bool force) {
  const std::uint32_t total = geometry_.block_count(content_size);
  std::optional<ContentRecord> rec;
  auto ok = read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
    auto r = load_record(rd.txn, id);
    if (!r) return Unexpected<lmdb::Error>{r.error()};
    rec = *r;
    return {};
  });
  if (!ok) return Unexpected<CacheError>{ok.error()};
  if (!rec || rec->size != content_size) return ContentState{0, total, false};
  if (!rec->complete() || (rec->verified && !force)) return state_of(*rec);

  // The hash this process computed while the blocks arrived, when it covers them all; else a
  // full pass over the stored blocks.
  Result<std::optional<std::vector<std::uint8_t>>> hashed =
      std::optional<std::vector<std::uint8_t>>();
  if (auto running = take_running_digest(id, total, rec->epoch)) {
    hashed = std::optional<std::vector<std::uint8_t>>(std::move(*running));
  } else {
    hashed = hash_content(id, content_size);
  }
  if (!hashed) return Unexpected<CacheError>{hashed.error()};
  if (!*hashed) {
    // Blocks went missing (evicted, or failed their checksum) while hashing.
    auto now = content_state(id);
    if (!now) return Unexpected<CacheError>{now.error()};
    return now->value_or(ContentState{0, total, false});
  }
  const bool match =
      std::equal(id.digest().begin(), id.digest().end(), (*hashed)->begin(), (*hashed)->end());
  if (read_only_) {
    // Nothing is dropped or recorded in a read-only cache: the caller learns the outcome.
    if (!match) {
      return cache_error(CacheError::Kind::kCorrupt,
                         "read-only cache: " + id.to_string() + " does not match its hash");
    }
    {
      std::lock_guard lock(hashes_mu_);
      read_only_verified_.insert(id);
    }
    ContentState st = state_of(*rec);
    st.verified = true;
    return st;
  }
  if (!match) {
    auto dropped = write(0, [&](WriteScope& s) -> lmdb::Res<void> {
      ++s.counters.corrupt_contents;
      auto purged = purge_content(s, id);
      if (!purged) return Unexpected<lmdb::Error>{purged.error()};
      return {};
    });
    spdlog::warn("cache: {} does not match its hash: dropped all {} blocks", id.to_string(), total);
    if (!dropped) return Unexpected<CacheError>{dropped.error()};
    return cache_error(CacheError::Kind::kCorrupt,
                       "cache: " + id.to_string() + " does not match its hash");
  }
  ContentState state = state_of(*rec);
  auto marked = write(0, [&](WriteScope& s) -> lmdb::Res<void> {
    auto now = load_record(s.txn, id);
    if (!now) return Unexpected<lmdb::Error>{now.error()};
    // Record it only if no block was deleted (and maybe replaced) since we hashed.
    if (!*now || (*now)->epoch != rec->epoch || !(*now)->complete()) {
      state = *now ? state_of(**now) : ContentState{0, total, false};
      return {};
    }
    ContentRecord updated = **now;
    updated.verified = true;
    state = state_of(updated);
    return updated.verified == (*now)->verified ? lmdb::Res<void>()
                                                : store_record(s, id, *now, updated);
  });
  if (!marked) return Unexpected<CacheError>{marked.error()};
  return state;
}

Result<std::optional<std::vector<std::uint8_t>>> LmdbBlockCache::hash_content(
    const ContentId& id, std::uint64_t content_size) {
  Hasher hasher = id.kind() == ContentId::Kind::kSha256 ? Hasher(HashAlgo::kSha256)
                                                        : git_blob_hasher(content_size);
  const std::uint32_t total = geometry_.block_count(content_size);
  const auto per_txn =
      static_cast<std::uint32_t>(std::max<std::uint64_t>(1, kVerifyChunkBytes / block_size()));
  const ContentKey prefix = content_key(id);
  std::vector<std::uint32_t> bad;
  bool gap = false;
  for (std::uint32_t first = 0; first < total && !gap && bad.empty(); first += per_txn) {
    const std::uint32_t end = std::min(total, first + per_txn);
    auto ok = read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      auto e = rd.cursor.seek(block_key(id, first).bytes());
      for (std::uint32_t next = first; next < end; ++next, e = rd.cursor.next()) {
        if (!e) return Unexpected<lmdb::Error>{e.error()};
        const auto index = *e ? block_index_in((*e)->key, prefix.bytes()) : std::nullopt;
        if (index != next) {
          gap = true;
          return {};
        }
        // No per-block checksum on this pass: the whole content's hash covers every byte (a
        // third of the pass's time saved); a mismatch is looked at block by block below.
        const auto value = (*e)->value;
        if (value.size() < BlockGeometry::kChecksumSize ||
            value.size() - BlockGeometry::kChecksumSize !=
                geometry_.block_length(content_size, next)) {
          bad.push_back(next);
          return {};
        }
        hasher.update(value.subspan(BlockGeometry::kChecksumSize));
      }
      return {};
    });
    if (!ok) return Unexpected<CacheError>{ok.error()};
  }
  if (!bad.empty() && !read_only_) (void)drop_bad_blocks(id, bad);
  if (gap || !bad.empty()) return std::optional<std::vector<std::uint8_t>>();
  auto digest = hasher.finish();
  if (!std::equal(id.digest().begin(), id.digest().end(), digest.begin(), digest.end())) {
    // A block damaged at rest fails its own checksum: drop just it (a miss, downloaded again)
    // rather than call the whole content a bad download.
    auto damaged = blocks_failing_checksum(id, content_size);
    if (!damaged) return Unexpected<CacheError>{damaged.error()};
    if (!damaged->empty()) {
      if (!read_only_) (void)drop_bad_blocks(id, *damaged);
      return std::optional<std::vector<std::uint8_t>>();
    }
  }
  return std::optional<std::vector<std::uint8_t>>(std::move(digest));
}

Result<std::vector<std::uint32_t>> LmdbBlockCache::blocks_failing_checksum(
    const ContentId& id, std::uint64_t content_size) {
  std::vector<std::uint32_t> bad;
  const std::uint32_t total = geometry_.block_count(content_size);
  const ContentKey prefix = content_key(id);
  auto ok = read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
    bad.clear();
    auto e = rd.cursor.seek(block_key(id, 0).bytes());
    for (; e && *e; e = rd.cursor.next()) {
      const auto index = block_index_in((*e)->key, prefix.bytes());
      if (!index || *index >= total) break;
      if (!checked_payload((*e)->key, (*e)->value)) bad.push_back(*index);
    }
    if (!e) return Unexpected<lmdb::Error>{e.error()};
    return {};
  });
  if (!ok) return Unexpected<CacheError>{ok.error()};
  return bad;
}

}  // namespace whfs::cache
