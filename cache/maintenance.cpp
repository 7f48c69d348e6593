// BlockCache: persisted metadata (revisions, listings) and the maintenance calls of the CLI
// (stats, list, verify_all, clear). All of them work while other processes use the cache.

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>

#include "cache/guard.h"
#include "cache/lmdb_block_cache.h"

namespace whfs::cache {

namespace {
template <class E>
Unexpected<lmdb::Error> lmdb_fail(const E& e) {
  return {e.error()};
}
}  // namespace

// ---- metadata --------------------------------------------------------------------------

Result<void> LmdbBlockCache::put_revision(std::string_view endpoint, std::string_view repo,
                                          std::string_view rev, std::string_view commit,
                                          std::chrono::system_clock::time_point resolved_at) {
  return guarded("cache put_revision", [&]() -> Result<void> {
    const MetadataKey key = metadata_key({endpoint, repo, rev});
    const std::string value = encode_revision(key, {std::string(commit), resolved_at});
    return write(0, [&](WriteScope& s) {
      return s.txn.put(dbs_.revisions, lmdb::as_bytes(key.key), lmdb::as_bytes(value));
    });
  });
}

Result<std::optional<RevisionRecord>> LmdbBlockCache::get_revision(std::string_view endpoint,
                                                                   std::string_view repo,
                                                                   std::string_view rev) {
  using Out = Result<std::optional<RevisionRecord>>;
  return guarded("cache get_revision", [&]() -> Out {
    const MetadataKey key = metadata_key({endpoint, repo, rev});
    std::optional<RevisionRecord> out;
    bool garbage = false;
    auto ok = read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      auto v = rd.txn.get(dbs_.revisions, lmdb::as_bytes(key.key));
      if (!v) return lmdb_fail(v);
      if (*v) {
        out = decode_revision(**v, key);
        garbage = !out;
      }
      return {};
    });
    if (!ok) return Unexpected<CacheError>{ok.error()};
    if (garbage) spdlog::warn("cache: unreadable revision record for {}@{} ignored", repo, rev);
    return out;
  });
}

Result<void> LmdbBlockCache::put_listing(std::string_view endpoint, std::string_view repo,
                                         std::string_view commit, std::string_view folder,
                                         const std::vector<RemoteEntry>& entries) {
  return guarded("cache put_listing", [&]() -> Result<void> {
    const MetadataKey key = metadata_key({endpoint, repo, commit, folder});
    const std::string value = encode_listing(key, entries);
    return write(value.size(), [&](WriteScope& s) {
      return s.txn.put(dbs_.listings, lmdb::as_bytes(key.key), lmdb::as_bytes(value));
    });
  });
}

Result<std::optional<std::vector<RemoteEntry>>> LmdbBlockCache::get_listing(
    std::string_view endpoint, std::string_view repo, std::string_view commit,
    std::string_view folder) {
  using Out = Result<std::optional<std::vector<RemoteEntry>>>;
  return guarded("cache get_listing", [&]() -> Out {
    const MetadataKey key = metadata_key({endpoint, repo, commit, folder});
    std::optional<std::vector<RemoteEntry>> out;
    bool garbage = false;
    auto ok = read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      auto v = rd.txn.get(dbs_.listings, lmdb::as_bytes(key.key));
      if (!v) return lmdb_fail(v);
      if (*v) {
        out = decode_listing(**v, key);
        garbage = !out;
      }
      return {};
    });
    if (!ok) return Unexpected<CacheError>{ok.error()};
    if (garbage) {
      spdlog::warn("cache: unreadable listing of {}@{}:{} ignored", repo, commit, folder);
    }
    return out;
  });
}

Result<void> LmdbBlockCache::put_wheel_metadata(std::string_view content_id,
                                                const WheelMetadataRecord& record) {
  return guarded("cache put_wheel_metadata", [&]() -> Result<void> {
    const MetadataKey key = wheel_metadata_key(content_id);
    const std::string value = encode_wheel_metadata(key, record);
    return write(value.size(), [&](WriteScope& s) {
      return s.txn.put(dbs_.listings, lmdb::as_bytes(key.key), lmdb::as_bytes(value));
    });
  });
}

Result<std::optional<WheelMetadataRecord>> LmdbBlockCache::get_wheel_metadata(
    std::string_view content_id) {
  using Out = Result<std::optional<WheelMetadataRecord>>;
  return guarded("cache get_wheel_metadata", [&]() -> Out {
    const MetadataKey key = wheel_metadata_key(content_id);
    std::optional<WheelMetadataRecord> out;
    auto ok = read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      auto v = rd.txn.get(dbs_.listings, lmdb::as_bytes(key.key));
      if (!v) return lmdb_fail(v);
      if (*v) out = decode_wheel_metadata(**v, key);
      return {};
    });
    if (!ok) return Unexpected<CacheError>{ok.error()};
    return out;
  });
}

// ---- maintenance -----------------------------------------------------------------------

Result<CacheStats> LmdbBlockCache::stats() {
  return guarded("cache stats", [&]() -> Result<CacheStats> {
    CacheStats st;
    auto ok = read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      for (auto [key, apply] :
           {std::pair<std::string_view, int>{kUsageKey, 0}, {kCountersKey, 1}, {kCapKey, 2}}) {
        auto v = rd.txn.get(dbs_.meta, lmdb::as_bytes(key));
        if (!v) return lmdb_fail(v);
        if (!*v) continue;
        if (apply == 0) st.usage = decode_usage(**v).value_or(Usage{});
        if (apply == 1) st.counters = decode_counters(**v).value_or(Counters{});
        if (apply == 2) st.cap_bytes = decode_u64(**v).value_or(0);
      }
      return {};
    });
    if (!ok) return Unexpected<CacheError>{ok.error()};
    for (PendingShard& shard : pending_) {
      std::lock_guard lk(shard.mu);
      st.counters += shard.pending.counters;
    }
    st.map_bytes = env_.map_size();
    st.block_size = block_size();
    struct stat sb {};
    if (::lstat((options_.dir / "data.mdb").c_str(), &sb) == 0) {
      st.file_bytes = static_cast<std::uint64_t>(sb.st_size);
      st.disk_bytes = static_cast<std::uint64_t>(sb.st_blocks) * 512;
    }
    return st;
  });
}

Result<std::vector<ContentInfo>> LmdbBlockCache::list_contents() {
  return guarded("cache list", [&]() -> Result<std::vector<ContentInfo>> {
    std::vector<ContentInfo> out;
    auto ok = read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      out.clear();
      auto cur = lmdb::Cursor::open(rd.txn, dbs_.contents);
      if (!cur) return lmdb_fail(cur);
      for (auto e = cur->first();; e = cur->next()) {
        if (!e) return lmdb_fail(e);
        if (!*e) return {};
        const auto id = content_id_from_key((*e)->key);
        const auto rec = decode_content((*e)->value);
        if (!id || !rec) continue;
        out.push_back({*id,
                       rec->size,
                       {rec->present, rec->total, rec->verified},
                       std::chrono::system_clock::time_point(
                           std::chrono::milliseconds(std::min(rec->last_access_ms, kMaxTimeMs)))});
      }
    });
    if (!ok) return Unexpected<CacheError>{ok.error()};
    return out;
  });
}

Result<VerifyReport> LmdbBlockCache::verify_all() {
  return guarded("cache verify_all", [&]() -> Result<VerifyReport> {
    auto contents = list_contents();
    if (!contents) return Unexpected<CacheError>{contents.error()};
    VerifyReport report;
    for (const ContentInfo& c : *contents) {
      if (!c.state.complete()) {
        ++report.incomplete;
        continue;
      }
      ++report.checked;
      auto r = verify(c.id, c.size, /*force=*/true);
      if (!r && r.error().kind == CacheError::Kind::kCorrupt) {
        ++report.corrupt;
      } else if (!r) {
        return Unexpected<CacheError>{r.error()};
      } else if (!r->complete()) {
        --report.checked;  // blocks went bad or were evicted meanwhile
        ++report.incomplete;
      }
    }
    return report;
  });
}

Result<void> LmdbBlockCache::clear() {
  return guarded("cache clear", [&]() -> Result<void> {
    return write(
        0,
        [&](WriteScope& s) -> lmdb::Res<void> {
          for (lmdb::Dbi dbi :
               {dbs_.blocks, dbs_.contents, dbs_.lru, dbs_.revisions, dbs_.listings}) {
            if (auto r = s.txn.clear(dbi); !r) return r;
          }
          s.usage = Usage{};
          return {};
        },
        /*evicting=*/true);
  });
}

Result<void> BlockCache::remove_store(const std::filesystem::path& dir, const DirAccess& access) {
  return guarded("cache remove", [&] { return Session::remove_files(dir, access); });
}

}  // namespace whfs::cache
