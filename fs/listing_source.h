#pragma once
// Folder listings for the namespace: from the cache when it has them (a remount, or no
// network), else from the Hub, persisted for next time. A folder missing from the cache is
// listed with its whole subtree in one paginated recursive call (one request per 1000
// entries instead of one per folder), and every folder of it is stored, so an `ls -R` of a
// fresh mount costs a handful of requests.

#include <chrono>
#include <cstddef>
#include <string>

#include "cache/metadata_store.h"
#include "fs/hub/hub_client.h"
#include "fs/namespace/namespace.h"

namespace whfs {

class CachedListingSource : public ns::ListingSource {
 public:
  // Listings are stored under `endpoint` and `repo` (where they came from).
  CachedListingSource(hub::HubClient& hub, cache::MetadataStore& store, std::string endpoint,
                      std::string repo, std::chrono::seconds timeout,
                      std::size_t prefill_pages = 100);

  Expected<std::vector<RemoteEntry>, FsErr> list(const std::string& commit,
                                                 const std::string& folder) override;

 private:
  void keep(const std::string& commit, const std::string& folder,
            const std::vector<RemoteEntry>& entries);

  hub::HubClient& hub_;
  cache::MetadataStore& store_;
  std::string endpoint_;
  std::string repo_;
  std::chrono::seconds timeout_;
  std::size_t prefill_pages_;
};

}  // namespace whfs
