// LmdbBlockCache: the facade, and the read of blocks (the hot path). Opening is in
// store_open.cpp, the txn plumbing in txn_engine.cpp, block puts and records in content_store.cpp,
// eviction and leases in lru_quota.cpp, verification in content_verifier.cpp, metadata in
// metadata_records.cpp and the maintenance calls in maintenance.cpp.

#include <iterator>
#include <utility>

#include "cache/block_format.h"
#include "cache/guard.h"
#include "cache/lmdb_block_cache.h"

namespace whfs::cache {

const char* to_string(CacheError::Kind kind) {
  // In the order of CacheError::Kind.
  static constexpr const char* kNames[] = {
      "io", "format", "full", "corrupt", "lmdb", "invalid argument", "access", "read-only", "busy"};
  static_assert(std::size(kNames) == static_cast<std::size_t>(CacheError::Kind::kBusy) + 1);
  const auto i = static_cast<std::size_t>(kind);
  return i < std::size(kNames) ? kNames[i] : "?";
}

// ---- opening and closing ---------------------------------------------------------------

Result<std::unique_ptr<BlockCache>> BlockCache::open(const Options& options) {
  return LmdbBlockCache::open(options);
}

Result<std::unique_ptr<BlockCache>> LmdbBlockCache::open(const Options& options,
                                                         const QuotaFactory& make_quota) {
  auto store = open_store(options);
  if (!store) return Unexpected<CacheError>{store.error()};
  return guarded("cache open", [&]() -> Result<std::unique_ptr<BlockCache>> {
    return std::unique_ptr<BlockCache>(new LmdbBlockCache(options, std::move(*store), make_quota));
  });
}

LmdbBlockCache::LmdbBlockCache(Options options, OpenedStore store, const QuotaFactory& make_quota)
    : options_(std::move(options)),
      session_(std::move(store.session)),
      geometry_(store.init.geometry),
      read_only_(store.read_only),
      owner_only_(store.owner_only),
      engine_(options_, session_, std::move(store.env), store.init.dbs, geometry_, store.init.cap,
              read_only_),
      hashes_(engine_, geometry_),
      contents_(engine_, hashes_, geometry_, read_only_),
      verifier_(engine_, contents_, hashes_, geometry_, read_only_),
      metadata_(engine_),
      claims_(store.downloads_fd) {
  const LruQuota::Config config = LruQuota::config_of(options_, store.init.dbs);
  quota_ =
      make_quota ? make_quota(contents_, config) : std::make_unique<LruQuota>(contents_, config);
  engine_.set_quota(quota_.get());
  contents_.set_quota(quota_.get());
}

LmdbBlockCache::~LmdbBlockCache() {
  if (!read_only_) (void)flush();
  engine_.close_readers();
  if (!read_only_) session_.close_clean();
}

Result<void> LmdbBlockCache::flush() {
  if (read_only_) return {};
  return guarded("cache flush", [&]() -> Result<void> {
    if (auto ok = engine_.write(0, [](WriteScope&) -> lmdb::Res<void> { return {}; }); !ok) {
      return ok;
    }
    return engine_.sync();
  });
}

// ---- reads: the hot path, straight from the reader to LMDB
// ------------------------------------------------------------------------------

Result<std::vector<std::uint32_t>> LmdbBlockCache::read_blocks(const ContentId& id,
                                                               std::uint64_t content_size,
                                                               std::uint32_t first,
                                                               std::uint32_t count, BlockFn fn,
                                                               ReadMode mode) {
  using Out = Result<std::vector<std::uint32_t>>;
  return guarded("cache read", [&]() -> Out {
    const std::uint32_t total = geometry_.block_count(content_size);
    if (first > total || count > total - first) return invalid("block range past the content");
    std::vector<std::uint32_t> missing, damaged;
    if (contents_.dropped_unwritten(id)) {  // (a read-only store's: gone for this process)
      for (std::uint32_t b = first; b < first + count; ++b) missing.push_back(b);
      return missing;
    }
    std::uint32_t hits = 0;
    const ContentKey prefix = content_key(id);
    const std::uint32_t end = first + count;
    bool unverified = false;
    auto ok = engine_.read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      if (mode != ReadMode::kPresence) {
        // Not verified: not for readers yet (kVerified), or not once complete (kPartial).
        auto rec = contents_.load_record(rd.txn, id);
        if (!rec) return Unexpected<lmdb::Error>{rec.error()};
        const bool verified = *rec && (*rec)->size == content_size && (*rec)->verified;
        const bool hide =
            mode == ReadMode::kPartial ? *rec && (*rec)->complete() && !verified : !verified;
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
        const auto payload = mode == ReadMode::kHashedHere
                                 ? unchecked_payload((*e)->value)
                                 : checked_payload((*e)->key, (*e)->value);
        if (!payload) {
          damaged.push_back(next);
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
    if (!damaged.empty() && !read_only_) (void)contents_.drop_damaged_blocks(id, damaged);
    if (unverified || mode == ReadMode::kPresence || read_only_) return missing;
    quota_->note_read(id, hits, static_cast<std::uint32_t>(missing.size()), engine_.now_ms());
    return missing;
  });
}

// ---- verification ----------------------------------------------------------------------

Result<ContentState> LmdbBlockCache::verify_content(const ContentId& id,
                                                    std::uint64_t content_size) {
  return guarded("cache verify", [&] { return verifier_.verify(id, content_size); });
}

// ---- pins and eviction -----------------------------------------------------------------

Result<void> LmdbBlockCache::pin(const ContentId& id) {
  if (read_only_) return {};  // nothing is ever evicted from a read-only cache
  return quota_->pin(id);
}

void LmdbBlockCache::unpin(const ContentId& id) {
  if (!read_only_) quota_->unpin(id);
}

Result<void> LmdbBlockCache::refresh_pins() {
  if (read_only_) return {};
  return quota_->refresh_pins();
}

Result<std::uint64_t> LmdbBlockCache::evict_to(std::uint64_t target_bytes) {
  return guarded("cache evict", [&]() -> Result<std::uint64_t> {
    auto r = quota_->evict_until(target_bytes);
    if (!r) return Unexpected<CacheError>{r.error()};
    return r->bytes;
  });
}

Result<bool> LmdbBlockCache::evict(const ContentId& id) {
  return guarded("cache evict", [&]() -> Result<bool> {
    bool existed = false;
    auto ok = engine_.write(
        0,
        [&](WriteScope& s) -> lmdb::Res<void> {
          const std::uint64_t before = s.usage.footprint_bytes;
          auto r = contents_.purge(s, id);
          if (!r) return Unexpected<lmdb::Error>{r.error()};
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

}  // namespace whfs::cache
