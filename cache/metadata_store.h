#pragma once
// What the cache keeps besides file bytes, so that a remount or a start with the Hub out of
// reach needs no request: the commit a revision resolved to, each folder listing of a commit,
// and the METADATA file of each wheel an index page needed (by the wheel's content). Each is
// keyed by where it came from (the endpoint's URL, the repo: a listing fetched through a
// plain-http site cache is never reused by an https mount of another endpoint) and by its
// audience (audience.h): a lookup names the audiences it may read, in order, and gets the
// first record found. The seam CachedListingSource is tested at (tests/unit/fs).

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/audience.h"
#include "cache/cache_error.h"
#include "cache/metadata_codec.h"
#include "fs/common/remote_entry.h"

namespace whfs::cache {

class MetadataStore {
 public:
  virtual ~MetadataStore() = default;

  virtual Result<void> put_revision(std::string_view endpoint, std::string_view repo,
                                    std::string_view rev, Audience audience,
                                    std::string_view commit,
                                    std::chrono::system_clock::time_point resolved_at) = 0;
  // The record's `audience` says which of `readable` it was found under.
  virtual Result<std::optional<RevisionRecord>> get_revision(std::string_view endpoint,
                                                             std::string_view repo,
                                                             std::string_view rev,
                                                             Audiences readable) = 0;
  virtual Result<void> put_listing(std::string_view endpoint, std::string_view repo,
                                   std::string_view commit, std::string_view folder,
                                   Audience audience, const std::vector<RemoteEntry>& entries) = 0;
  // Many folders of one commit at once (a subtree listing split by folder): one write
  // transaction where the store has them. This default puts them one by one.
  struct FolderListing {
    std::string_view folder;
    const std::vector<RemoteEntry>* entries = nullptr;
  };
  virtual Result<void> put_listings(std::string_view endpoint, std::string_view repo,
                                    std::string_view commit, Audience audience,
                                    const std::vector<FolderListing>& listings) {
    for (const auto& l : listings) {
      if (auto r = put_listing(endpoint, repo, commit, l.folder, audience, *l.entries); !r) {
        return r;
      }
    }
    return {};
  }
  virtual Result<std::optional<std::vector<RemoteEntry>>> get_listing(std::string_view endpoint,
                                                                      std::string_view repo,
                                                                      std::string_view commit,
                                                                      std::string_view folder,
                                                                      Audiences readable) = 0;
  // `content_id`: the wheel's ContentId::to_string().
  virtual Result<void> put_wheel_metadata(std::string_view content_id, Audience audience,
                                          const WheelMetadataRecord& record) = 0;
  virtual Result<std::optional<WheelMetadataRecord>> get_wheel_metadata(std::string_view content_id,
                                                                        Audiences readable) = 0;
};

}  // namespace whfs::cache
