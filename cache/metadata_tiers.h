#pragma once
// MetadataTiers: a BlockCache whose MetadataStore calls go to other stores: every put to the
// writable one, and a lookup to it first, then to a read-only lower tier (TieredCache's) when
// it has nothing (or, for wheel metadata, nothing verified). LmdbBlockCache has no lower tier.

#include "cache/block_cache.h"

namespace whfs::cache {

class MetadataTiers : public BlockCache {
 public:
  Result<void> put_revision(std::string_view endpoint, std::string_view repo, std::string_view rev,
                            Audience audience, std::string_view commit,
                            std::chrono::system_clock::time_point resolved_at) final {
    return writable_metadata().put_revision(endpoint, repo, rev, audience, commit, resolved_at);
  }
  Result<std::optional<RevisionRecord>> get_revision(std::string_view endpoint,
                                                     std::string_view repo, std::string_view rev,
                                                     Audiences readable) final {
    auto up = writable_metadata().get_revision(endpoint, repo, rev, readable);
    if ((up && *up) || !lower_metadata()) return up;
    return lower_metadata()->get_revision(endpoint, repo, rev, readable);
  }
  Result<void> put_listing(std::string_view endpoint, std::string_view repo,
                           std::string_view commit, std::string_view folder, Audience audience,
                           const std::vector<RemoteEntry>& entries) final {
    return writable_metadata().put_listing(endpoint, repo, commit, folder, audience, entries);
  }
  Result<void> put_listings(std::string_view endpoint, std::string_view repo,
                            std::string_view commit, Audience audience,
                            const std::vector<FolderListing>& listings) final {
    return writable_metadata().put_listings(endpoint, repo, commit, audience, listings);
  }
  Result<std::optional<std::vector<RemoteEntry>>> get_listing(std::string_view endpoint,
                                                              std::string_view repo,
                                                              std::string_view commit,
                                                              std::string_view folder,
                                                              Audiences readable) final {
    auto up = writable_metadata().get_listing(endpoint, repo, commit, folder, readable);
    if ((up && *up) || !lower_metadata()) return up;
    return lower_metadata()->get_listing(endpoint, repo, commit, folder, readable);
  }
  Result<void> put_wheel_metadata(std::string_view content_id, Audience audience,
                                  const WheelMetadataRecord& record) final {
    return writable_metadata().put_wheel_metadata(content_id, audience, record);
  }
  Result<std::optional<WheelMetadataRecord>> get_wheel_metadata(std::string_view content_id,
                                                                Audiences readable) final {
    auto up = writable_metadata().get_wheel_metadata(content_id, readable);
    if ((up && *up && (*up)->verified) || !lower_metadata()) return up;
    auto low = lower_metadata()->get_wheel_metadata(content_id, readable);
    if (low && *low) return low;
    return up;
  }

 protected:
  virtual MetadataStore& writable_metadata() = 0;
  // nullptr: none.
  virtual MetadataStore* lower_metadata() = 0;
};

}  // namespace whfs::cache
