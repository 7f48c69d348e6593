// ContentStore: content records, block puts and deletions.

#include "cache/content_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "cache/block_format.h"
#include "cache/guard.h"

namespace whfs::cache {

std::uint32_t random_epoch() {
  thread_local std::mt19937 rng(std::random_device{}());
  return static_cast<std::uint32_t>(rng());
}

// ---- records ---------------------------------------------------------------------------

lmdb::Res<std::optional<ContentRecord>> ContentStore::load_record(const lmdb::Txn& txn,
                                                                  const ContentId& id) {
  auto v = txn.get(engine_.dbs().contents, content_key(id).bytes());
  if (!v) return Unexpected<lmdb::Error>{v.error()};
  if (!*v) return std::optional<ContentRecord>();
  auto rec = decode_content(**v);
  if (!rec) spdlog::warn("cache: unreadable record of {} ignored", id.to_string());
  if (read_only_ && rec) {
    std::lock_guard lock(unwritten_mu_);
    if (const auto it = unwritten_.find(id); it != unwritten_.end()) {
      if (it->second == Found::kMismatch) return std::optional<ContentRecord>();
      rec->verified = true;
    }
  }
  return rec;
}

void ContentStore::keep_unwritten(const ContentId& id, Found found) {
  std::lock_guard lock(unwritten_mu_);
  unwritten_[id] = found;
}

bool ContentStore::dropped_unwritten(const ContentId& id) {
  if (!read_only_) return false;
  std::lock_guard lock(unwritten_mu_);
  const auto it = unwritten_.find(id);
  return it != unwritten_.end() && it->second == Found::kMismatch;
}

lmdb::Res<void> ContentStore::store_record(WriteScope& s, const ContentId& id,
                                           const std::optional<ContentRecord>& old,
                                           const ContentRecord& rec) {
  const auto old_ms = old ? std::optional(old->last_access_ms) : std::nullopt;
  if (auto r = quota_->note_access(s, id, old_ms, rec.last_access_ms); !r) return r;
  if (!old) ++s.usage.contents;
  return s.txn.put(engine_.dbs().contents, content_key(id).bytes(), lmdb::as_bytes(encode(rec)));
}

lmdb::Res<bool> ContentStore::purge(WriteScope& s, const ContentId& id) {
  hashes_.forget(id);
  auto old = load_record(s.txn, id);
  if (!old) return Unexpected<lmdb::Error>{old.error()};
  const ContentKey prefix = content_key(id);
  std::uint64_t blocks = 0;
  {
    auto cur = lmdb::Cursor::open(s.txn, engine_.dbs().blocks);
    if (!cur) return Unexpected<lmdb::Error>{cur.error()};
    for (auto e = cur->seek(block_key(id, 0).bytes());; e = cur->next()) {
      if (!e) return Unexpected<lmdb::Error>{e.error()};
      if (!*e || !block_index_in((*e)->key, prefix.bytes())) break;
      const std::size_t value_size = (*e)->value.size();
      s.usage.footprint_bytes -= geometry_.footprint((*e)->key.size(), value_size);
      s.usage.payload_bytes -= value_size - std::min(value_size, BlockGeometry::kChecksumSize);
      ++blocks;
      if (auto d = cur->del(); !d) return Unexpected<lmdb::Error>{d.error()};
    }
  }  // the cursor closes before the txn can end
  s.usage.blocks -= blocks;
  if (*old) {
    if (auto d = s.txn.del(engine_.dbs().contents, prefix.bytes()); !d)
      return Unexpected<lmdb::Error>{d.error()};
    if (auto d = quota_->forget(s, id, (*old)->last_access_ms); !d) {
      return Unexpected<lmdb::Error>{d.error()};
    }
    --s.usage.contents;
  }
  return old->has_value() || blocks > 0;
}

lmdb::Res<void> ContentStore::touch(WriteScope& s, const ContentId& id, std::uint64_t ms) {
  auto old = load_record(s.txn, id);
  if (!old) return Unexpected<lmdb::Error>{old.error()};
  if (!*old || (*old)->last_access_ms >= ms) return {};
  ContentRecord rec = **old;
  rec.last_access_ms = ms;
  return store_record(s, id, *old, rec);
}

Result<std::optional<ContentState>> ContentStore::content_state(const ContentId& id) {
  using Out = Result<std::optional<ContentState>>;
  return guarded("cache content_state", [&]() -> Out {
    std::optional<ContentState> state;
    auto ok = engine_.read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      auto rec = load_record(rd.txn, id);
      if (!rec) return Unexpected<lmdb::Error>{rec.error()};
      if (*rec) state = state_of(**rec);
      return {};
    });
    if (!ok) return Unexpected<CacheError>{ok.error()};
    return state;
  });
}

Result<void> ContentStore::drop_damaged_blocks(const ContentId& id,
                                               const std::vector<std::uint32_t>& damaged) {
  std::uint32_t dropped = 0;
  auto ok = engine_.write(0, [&](WriteScope& s) -> lmdb::Res<void> {
    dropped = 0;
    auto old = load_record(s.txn, id);
    if (!old) return Unexpected<lmdb::Error>{old.error()};
    for (std::uint32_t index : damaged) {
      const BlockKey key = block_key(id, index);
      auto v = s.txn.get(engine_.dbs().blocks, key.bytes());
      if (!v) return Unexpected<lmdb::Error>{v.error()};
      // Re-check: another process may have replaced it with a good block meanwhile.
      if (!*v || checked_payload(key.bytes(), **v)) continue;
      const std::size_t value_size = (*v)->size();
      if (auto r = s.txn.del(engine_.dbs().blocks, key.bytes()); !r)
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
    hashes_.forget(id);
    return store_record(s, id, *old, rec);
  });
  if (dropped > 0) {
    spdlog::warn("cache: dropped {} corrupt block(s) of {} (checksum mismatch)", dropped,
                 id.to_string());
  }
  return ok;
}

// ---- put -------------------------------------------------------------------------------

Result<ContentState> ContentStore::put_blocks(const ContentId& id, std::uint64_t content_size,
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
      auto ok = engine_.write(need, [&](WriteScope& s) -> lmdb::Res<void> {
        return put_txn(s, id, content_size, first + done, chunk, &state, &epoch, &skipped);
      });
      if (!ok) return Unexpected<CacheError>{ok.error()};
      // Bytes put are the stored bytes unless a block was there already (then read it back).
      hashes_.advance(id, content_size, first + done, chunk, !skipped, epoch);
      done += m;
    } while (done < n);
    return state;
  });
}

lmdb::Res<void> ContentStore::put_txn(WriteScope& s, const ContentId& id,
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
    if (auto r = purge(s, id); !r) return Unexpected<lmdb::Error>{r.error()};
    old->reset();
  }
  ContentRecord rec =
      old->value_or(ContentRecord{content_size, 0, total, random_epoch(), false, 0});
  const std::uint32_t bs = geometry_.block_size();
  for (std::size_t off = 0, index = first; off < data.size(); off += bs, ++index) {
    const auto payload = data.subspan(off, std::min<std::size_t>(bs, data.size() - off));
    const BlockKey key = block_key(id, static_cast<std::uint32_t>(index));
    const std::size_t value_size = BlockGeometry::kChecksumSize + payload.size();
    auto slot = s.txn.reserve_new(engine_.dbs().blocks, key.bytes(), value_size);
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
