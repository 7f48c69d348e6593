#pragma once
// Folder listings for the namespace: from the cache when it has them (a remount, or no
// network), else from the Hub, persisted for next time. A folder missing from the cache is
// listed with its whole subtree in one paginated recursive call (one request per 1000
// entries instead of one per folder), and every folder of it is stored, so an `ls -R` of a
// fresh mount costs a handful of requests.
//
// Who decides a byte: a listing gives each file's expected hash, so a listing that someone else
// could have written (a group-shared cache, a read-only cache another user made) is only a
// hint. Such a source lists every folder from the Hub once per process (the subtree call
// still covers many at once, kept in memory until used) and uses the cached copy only when
// the Hub cannot be reached (offline: then it trusts whoever wrote the cache, and says so).

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "cache/audience.h"
#include "cache/metadata_store.h"
#include "fs/hub/hub_client.h"
#include "fs/namespace/namespace.h"

namespace whfs {

class CachedListingSource : public ns::ListingSource {
 public:
  // Listings are stored under `endpoint` and `repo` (where they came from) and `scope`'s
  // audience; only those of its readable audiences are used (cache/audience.h).
  CachedListingSource(hub::HubClient& hub, cache::MetadataStore& store,
                      const cache::AccessScope& scope, std::string endpoint, std::string repo,
                      std::chrono::seconds timeout, std::size_t prefill_pages, bool trust_cached);

  Expected<std::vector<RemoteEntry>, FsErr> list(const std::string& commit,
                                                 const std::string& folder) override;

 private:
  void keep(const std::string& commit, const std::string& folder,
            const std::vector<RemoteEntry>& entries);
  Expected<std::vector<RemoteEntry>, hub::HubError> from_hub(const std::string& commit,
                                                             const std::string& folder);
  bool differs(const std::string& commit, const std::string& folder,
               const std::vector<RemoteEntry>& hubs);
  static void report_changed(const std::string& folder, std::size_t count,
                             const std::string& commit);
  // An untrusted cached listing, used because the Hub is unreachable or offline.
  std::vector<RemoteEntry> untrusted(const std::string& folder, std::vector<RemoteEntry> entries,
                                     const std::string& why);

  hub::HubClient& hub_;
  cache::MetadataStore& store_;
  const cache::AccessScope& scope_;
  std::string endpoint_;
  std::string repo_;
  std::chrono::seconds timeout_;
  std::size_t prefill_pages_;
  bool trust_cached_;
  std::mutex mu_;  // guards fresh_ and warned_
  // Untrusted mode: folders of a subtree listed from the Hub, until the namespace asks for them.
  std::map<std::string, std::vector<RemoteEntry>> fresh_;
  bool warned_ = false;
};

}  // namespace whfs
