// LmdbBlockCache: the facade. Opening is in store_open.cpp, the txn plumbing in txn_engine.cpp,
// the block read/write path in content_store.cpp, eviction and leases in lru_quota.cpp,
// verification in content_verifier.cpp, metadata in metadata_records.cpp and the maintenance
// calls in maintenance.cpp.

#include <iterator>
#include <utility>

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
      hashes_(engine_, geometry_, read_only_),
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

// ---- verification ----------------------------------------------------------------------

Result<ContentState> LmdbBlockCache::verify_content(const ContentId& id,
                                                    std::uint64_t content_size) {
  return guarded("cache verify", [&] { return verifier_.verify(id, content_size, false); });
}

Result<ContentState> LmdbBlockCache::recheck_content(const ContentId& id,
                                                     std::uint64_t content_size) {
  return guarded("cache recheck", [&] { return verifier_.verify(id, content_size, true); });
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
