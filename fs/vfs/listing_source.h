#pragma once
// Folder listings for the namespace: from the cache when it has them (a remount, or no
// network), else from the Hub, persisted for next time. A folder missing from the cache is
// listed with its whole subtree in one paginated recursive call (one request per 1000
// entries instead of one per folder), and every folder of it is stored, so an `ls -R` of a
// fresh mount costs a handful of requests.
//
// Who decides a byte: a listing gives each file's expected hash, so whether a stored listing is
// taken at its word is the serving gate's call (ServingGate::believes_records: a cache only
// this user can have written). A listing someone else could have written (a group-shared
// cache, a read-only cache another user made) is only a hint: every folder is listed from the
// Hub once per process (the subtree call still covers many at once, kept in memory until
// used), and the cached copy is used only when the Hub cannot be reached (offline: then it
// trusts whoever wrote the cache, and says so).

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "cache/metadata_store.h"
#include "fs/hub/hub_client.h"
#include "fs/namespace/namespace.h"
#include "fs/reader/serving_gate.h"

namespace whfs {

class CachedListingSource : public ns::ListingSource {
 public:
  // A folder's whole subtree in one paginated listing of up to this many pages (250k entries,
  // the client's limit on what one listing may make it hold): a 100k-entry repository is 113
  // requests instead of 4000 folder listings one after another.
  static constexpr std::size_t kSubtreePages = 250;

  // Listings are stored under `endpoint` and `repo` (where they came from) and the audience of
  // the gate's scope; only those of its readable audiences are used (cache/audience.h).
  CachedListingSource(hub::HubClient& hub, cache::MetadataStore& store,
                      const reader::ServingGate& gate, std::string endpoint, std::string repo,
                      std::chrono::seconds timeout);

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
  const reader::ServingGate& gate_;
  const cache::AccessScope& scope_;  // the gate's
  std::string endpoint_;
  std::string repo_;
  std::chrono::seconds timeout_;
  std::mutex mu_;  // guards fresh_ and warned_
  // Listings not believed: folders of a subtree listed from the Hub, until the namespace asks for
  // them.
  std::map<std::string, std::vector<RemoteEntry>> fresh_;
  bool warned_ = false;
};

}  // namespace whfs
