// MetadataRecords: persisted metadata (revisions, listings, wheel metadata). All of it works
// while other processes use the cache.

#include "cache/metadata_records.h"

#include <spdlog/spdlog.h>

#include "cache/guard.h"

namespace whfs::cache {

Result<void> MetadataRecords::put_revision(std::string_view endpoint, std::string_view repo,
                                           std::string_view rev, std::string_view commit,
                                           std::chrono::system_clock::time_point resolved_at) {
  return guarded("cache put_revision", [&]() -> Result<void> {
    const MetadataKey key = metadata_key({endpoint, repo, rev});
    const std::string value = encode_revision(key, {std::string(commit), resolved_at});
    return engine_.write(0, [&](WriteScope& s) {
      return s.txn.put(engine_.dbs().revisions, lmdb::as_bytes(key.key), lmdb::as_bytes(value));
    });
  });
}

Result<std::optional<RevisionRecord>> MetadataRecords::get_revision(std::string_view endpoint,
                                                                    std::string_view repo,
                                                                    std::string_view rev) {
  using Out = Result<std::optional<RevisionRecord>>;
  return guarded("cache get_revision", [&]() -> Out {
    const MetadataKey key = metadata_key({endpoint, repo, rev});
    std::optional<RevisionRecord> out;
    bool garbage = false;
    auto ok = engine_.read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      auto v = rd.txn.get(engine_.dbs().revisions, lmdb::as_bytes(key.key));
      if (!v) return lmdb::fail(v);
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

Result<void> MetadataRecords::put_listing(std::string_view endpoint, std::string_view repo,
                                          std::string_view commit, std::string_view folder,
                                          const std::vector<RemoteEntry>& entries) {
  return guarded("cache put_listing", [&]() -> Result<void> {
    const MetadataKey key = metadata_key({endpoint, repo, commit, folder});
    const std::string value = encode_listing(key, entries);
    return engine_.write(value.size(), [&](WriteScope& s) {
      return s.txn.put(engine_.dbs().listings, lmdb::as_bytes(key.key), lmdb::as_bytes(value));
    });
  });
}

Result<void> MetadataRecords::put_listings(std::string_view endpoint, std::string_view repo,
                                           std::string_view commit,
                                           const std::vector<FolderListing>& listings) {
  return guarded("cache put_listings", [&]() -> Result<void> {
    // In write transactions of up to 8 MiB of records: one per folder made the 4000 folders of
    // a 100k-entry subtree a sixth of the time it took to list them.
    constexpr std::size_t kTxnBytes = 8u << 20;
    std::vector<std::pair<MetadataKey, std::string>> batch;
    std::size_t bytes = 0;
    auto flush = [&]() -> Result<void> {
      if (batch.empty()) return {};
      auto ok = engine_.write(bytes, [&](WriteScope& s) -> lmdb::Res<void> {
        for (const auto& [key, value] : batch) {
          auto r =
              s.txn.put(engine_.dbs().listings, lmdb::as_bytes(key.key), lmdb::as_bytes(value));
          if (!r) return r;
        }
        return {};
      });
      batch.clear();
      bytes = 0;
      return ok;
    };
    for (const auto& l : listings) {
      MetadataKey key = metadata_key({endpoint, repo, commit, l.folder});
      std::string value = encode_listing(key, *l.entries);
      bytes += value.size() + key.key.size();
      batch.emplace_back(std::move(key), std::move(value));
      if (bytes >= kTxnBytes) {
        if (auto r = flush(); !r) return r;
      }
    }
    return flush();
  });
}

Result<std::optional<std::vector<RemoteEntry>>> MetadataRecords::get_listing(
    std::string_view endpoint, std::string_view repo, std::string_view commit,
    std::string_view folder) {
  using Out = Result<std::optional<std::vector<RemoteEntry>>>;
  return guarded("cache get_listing", [&]() -> Out {
    const MetadataKey key = metadata_key({endpoint, repo, commit, folder});
    std::optional<std::vector<RemoteEntry>> out;
    bool garbage = false;
    auto ok = engine_.read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      auto v = rd.txn.get(engine_.dbs().listings, lmdb::as_bytes(key.key));
      if (!v) return lmdb::fail(v);
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

Result<void> MetadataRecords::put_wheel_metadata(std::string_view content_id,
                                                 const WheelMetadataRecord& record) {
  return guarded("cache put_wheel_metadata", [&]() -> Result<void> {
    const MetadataKey key = wheel_metadata_key(content_id);
    const std::string value = encode_wheel_metadata(key, record);
    return engine_.write(value.size(), [&](WriteScope& s) {
      return s.txn.put(engine_.dbs().listings, lmdb::as_bytes(key.key), lmdb::as_bytes(value));
    });
  });
}

Result<std::optional<WheelMetadataRecord>> MetadataRecords::get_wheel_metadata(
    std::string_view content_id) {
  using Out = Result<std::optional<WheelMetadataRecord>>;
  return guarded("cache get_wheel_metadata", [&]() -> Out {
    const MetadataKey key = wheel_metadata_key(content_id);
    std::optional<WheelMetadataRecord> out;
    auto ok = engine_.read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      auto v = rd.txn.get(engine_.dbs().listings, lmdb::as_bytes(key.key));
      if (!v) return lmdb::fail(v);
      if (*v) out = decode_wheel_metadata(**v, key);
      return {};
    });
    if (!ok) return Unexpected<CacheError>{ok.error()};
    return out;
  });
}

}  // namespace whfs::cache
