#pragma once
// A MetadataStore in memory that can refuse writes or fail reads: the seam the listing source
// and the wheel metadata are tested at.

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cache/metadata_store.h"

namespace whfs::testing {

class MemoryMetadata : public cache::MetadataStore {
 public:
  // (endpoint, repo, commit, folder, audience)
  using Key = std::tuple<std::string, std::string, std::string, std::string, std::string>;

  cache::Result<void> put_revision(std::string_view, std::string_view, std::string_view,
                                   cache::Audience, std::string_view,
                                   std::chrono::system_clock::time_point) override {
    return {};
  }
  cache::Result<std::optional<cache::RevisionRecord>> get_revision(std::string_view,
                                                                   std::string_view,
                                                                   std::string_view,
                                                                   cache::Audiences) override {
    return std::optional<cache::RevisionRecord>();
  }
  cache::Result<void> put_listing(std::string_view endpoint, std::string_view repo,
                                  std::string_view commit, std::string_view folder,
                                  cache::Audience audience,
                                  const std::vector<RemoteEntry>& entries) override {
    std::lock_guard lock(mu);
    ++puts;
    if (refuse) return cache::cache_error(refuse_kind, "refused");
    listings[Key(endpoint, repo, commit, folder, audience.name)] = entries;
    return {};
  }
  cache::Result<std::optional<std::vector<RemoteEntry>>> get_listing(
      std::string_view endpoint, std::string_view repo, std::string_view commit,
      std::string_view folder, cache::Audiences readable) override {
    std::lock_guard lock(mu);
    if (fail_reads) return cache::cache_error(cache::CacheError::Kind::kBusy, "busy");
    for (const auto& a : readable) {
      const auto it = listings.find(Key(endpoint, repo, commit, folder, a));
      if (it != listings.end()) return std::optional<std::vector<RemoteEntry>>(it->second);
    }
    return std::optional<std::vector<RemoteEntry>>();
  }
  cache::Result<void> put_wheel_metadata(std::string_view content_id, cache::Audience audience,
                                         const cache::WheelMetadataRecord& record) override {
    std::lock_guard lock(mu);
    if (refuse) return cache::cache_error(refuse_kind, "refused");
    wheel_metadata[std::string(content_id) + "|" + std::string(audience.name)] = record;
    return {};
  }
  cache::Result<std::optional<cache::WheelMetadataRecord>> get_wheel_metadata(
      std::string_view content_id, cache::Audiences readable) override {
    std::lock_guard lock(mu);
    if (fail_reads) return cache::cache_error(cache::CacheError::Kind::kBusy, "busy");
    for (const auto& a : readable) {
      const auto it = wheel_metadata.find(std::string(content_id) + "|" + a);
      if (it != wheel_metadata.end()) {
        return std::optional<cache::WheelMetadataRecord>(it->second);
      }
    }
    return std::optional<cache::WheelMetadataRecord>();
  }
  void lose_everything() {
    std::lock_guard lock(mu);
    listings.clear();
  }

  std::mutex mu;
  std::map<Key, std::vector<RemoteEntry>> listings;
  std::map<std::string, cache::WheelMetadataRecord> wheel_metadata;  // "content|audience"
  int puts = 0;
  bool refuse = false;
  cache::CacheError::Kind refuse_kind = cache::CacheError::Kind::kFull;
  bool fail_reads = false;
};

}  // namespace whfs::testing
