// BlockCache: the read path (zero-copy, one read txn, no writes) and block puts.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "cache/block_format.h"
#include "cache/guard.h"
#include "cache/lmdb_block_cache.h"
#include "fs/common/hash.h"

namespace whfs::cache {

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
      std::uint64_t need =
          std::uint64_t{4} * geometry_.page_size();  // B-tree pages the txn may add
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

}  // namespace whfs::cache
