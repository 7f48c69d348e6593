// MetadataRecords: persisted metadata (revisions, listings, wheel metadata, grants), each under
// its audience (audience.h). All of it works while other processes use the cache.

#include "cache/metadata_records.h"

#include <spdlog/spdlog.h>

#include <functional>

#include "cache/guard.h"

namespace whfs::cache {
namespace {

std::vector<MetadataKey> keys_for(Audiences readable,
                                  const std::function<MetadataKey(std::string_view)>& key_of) {
  std::vector<MetadataKey> keys;
  keys.reserve(readable.size());
  for (const auto& a : readable) keys.push_back(key_of(a));
  return keys;
}

}  // namespace

template <typename Decode>
Result<std::optional<std::size_t>> MetadataRecords::first_of(lmdb::Dbi db,
                                                             const std::vector<MetadataKey>& keys,
                                                             Decode decode, bool& garbage) {
  std::optional<std::size_t> found;
  auto ok = engine_.read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
    for (std::size_t i = 0; i < keys.size() && !found; ++i) {
      auto v = rd.txn.get(db, lmdb::as_bytes(keys[i].key));
      if (!v) return lmdb::fail(v);
      if (!*v) continue;
      if (decode(**v, keys[i])) {
        found = i;
      } else {
        garbage = true;
      }
    }
    return {};
  });
  if (!ok) return Unexpected<CacheError>{ok.error()};
  return found;
}

Result<void> MetadataRecords::put_revision(std::string_view endpoint, std::string_view repo,
                                           std::string_view rev, Audience audience,
                                           std::string_view commit,
                                           std::chrono::system_clock::time_point resolved_at) {
  return guarded("cache put_revision", [&]() -> Result<void> {
    const MetadataKey key = metadata_key({endpoint, repo, rev, audience.name});
    const std::string value = encode_revision(key, {std::string(commit), resolved_at, {}});
    return engine_.write(0, [&](WriteScope& s) {
      return s.txn.put(engine_.dbs().revisions, lmdb::as_bytes(key.key), lmdb::as_bytes(value));
    });
  });
}

Result<std::optional<RevisionRecord>> MetadataRecords::get_revision(std::string_view endpoint,
                                                                    std::string_view repo,
                                                                    std::string_view rev,
                                                                    Audiences readable) {
  using Out = Result<std::optional<RevisionRecord>>;
  return guarded("cache get_revision", [&]() -> Out {
    const auto keys = keys_for(readable, [&](std::string_view a) {
      return metadata_key({endpoint, repo, rev, a});
    });
    std::optional<RevisionRecord> out;
    bool garbage = false;
    auto found = first_of(
        engine_.dbs().revisions, keys,
        [&](std::span<const std::byte> v, const MetadataKey& k) {
          out = decode_revision(v, k);
          return out.has_value();
        },
        garbage);
    if (!found) return Unexpected<CacheError>{found.error()};
    if (garbage) spdlog::warn("cache: unreadable revision record for {}@{} ignored", repo, rev);
    if (!*found) return std::optional<RevisionRecord>();
    out->audience = readable[**found];
    return out;
  });
}

Result<void> MetadataRecords::put_listing(std::string_view endpoint, std::string_view repo,
                                          std::string_view commit, std::string_view folder,
                                          Audience audience,
                                          const std::vector<RemoteEntry>& entries) {
  return guarded("cache put_listing", [&]() -> Result<void> {
    const MetadataKey key = metadata_key({endpoint, repo, commit, folder, audience.name});
    const std::string value = encode_listing(key, entries);
    return engine_.write(value.size(), [&](WriteScope& s) {
      return s.txn.put(engine_.dbs().listings, lmdb::as_bytes(key.key), lmdb::as_bytes(value));
    });
  });
}

Result<void> MetadataRecords::put_listings(std::string_view endpoint, std::string_view repo,
                                           std::string_view commit, Audience audience,
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
      MetadataKey key = metadata_key({endpoint, repo, commit, l.folder, audience.name});
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
    std::string_view folder, Audiences readable) {
  using Out = Result<std::optional<std::vector<RemoteEntry>>>;
  return guarded("cache get_listing", [&]() -> Out {
    const auto keys = keys_for(readable, [&](std::string_view a) {
      return metadata_key({endpoint, repo, commit, folder, a});
    });
    std::optional<std::vector<RemoteEntry>> out;
    bool garbage = false;
    auto found = first_of(
        engine_.dbs().listings, keys,
        [&](std::span<const std::byte> v, const MetadataKey& k) {
          out = decode_listing(v, k);
          return out.has_value();
        },
        garbage);
    if (!found) return Unexpected<CacheError>{found.error()};
    if (garbage) {
      spdlog::warn("cache: unreadable listing of {}@{}:{} ignored", repo, commit, folder);
    }
    if (!*found) return std::optional<std::vector<RemoteEntry>>();
    return out;
  });
}

Result<void> MetadataRecords::put_wheel_metadata(std::string_view content_id, Audience audience,
                                                 const WheelMetadataRecord& record) {
  return guarded("cache put_wheel_metadata", [&]() -> Result<void> {
    const MetadataKey key = wheel_metadata_key(content_id, audience.name);
    const std::string value = encode_wheel_metadata(key, record);
    return engine_.write(value.size(), [&](WriteScope& s) {
      return s.txn.put(engine_.dbs().listings, lmdb::as_bytes(key.key), lmdb::as_bytes(value));
    });
  });
}

Result<std::optional<WheelMetadataRecord>> MetadataRecords::get_wheel_metadata(
    std::string_view content_id, Audiences readable) {
  using Out = Result<std::optional<WheelMetadataRecord>>;
  return guarded("cache get_wheel_metadata", [&]() -> Out {
    const auto keys =
        keys_for(readable, [&](std::string_view a) { return wheel_metadata_key(content_id, a); });
    std::optional<WheelMetadataRecord> out;
    bool garbage = false;
    auto found = first_of(
        engine_.dbs().listings, keys,
        [&](std::span<const std::byte> v, const MetadataKey& k) {
          out = decode_wheel_metadata(v, k);
          return out.has_value();
        },
        garbage);
    if (!found) return Unexpected<CacheError>{found.error()};
    if (!*found) return std::optional<WheelMetadataRecord>();
    return out;
  });
}

Result<void> MetadataRecords::grant(std::string_view content_id, Audience audience) {
  return guarded("cache grant", [&]() -> Result<void> {
    const MetadataKey key = grant_key(content_id, audience.name);
    const std::string value = encode_grant(key);
    return engine_.write(0, [&](WriteScope& s) {
      return s.txn.put(engine_.dbs().listings, lmdb::as_bytes(key.key), lmdb::as_bytes(value));
    });
  });
}

Result<bool> MetadataRecords::granted(std::string_view content_id, Audiences readable) {
  return guarded("cache granted", [&]() -> Result<bool> {
    const auto keys =
        keys_for(readable, [&](std::string_view a) { return grant_key(content_id, a); });
    bool garbage = false;
    auto found = first_of(engine_.dbs().listings, keys, decode_grant, garbage);
    if (!found) return Unexpected<CacheError>{found.error()};
    return found->has_value();
  });
}

}  // namespace whfs::cache
