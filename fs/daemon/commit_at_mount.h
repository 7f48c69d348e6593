#pragma once
// The commit a mount serves: the Hub's answer for the revision, recorded in the cache; or, when
// the Hub is out of reach (or offline was asked for), the last commit the cache recorded for
// it (the offline fallback) under an audience the mount may read (cache/audience.h): a
// revision of a private repository that another credential resolved is not this mount's.

#include <chrono>
#include <cstdint>
#include <string>

#include "cache/audience.h"
#include "cache/block_cache.h"
#include "fs/common/clock.h"
#include "fs/common/expected.h"
#include "fs/hub/hub_client.h"

namespace whfs {

// A revision of a repository at an endpoint: what a cached commit is recorded under.
struct RevisionKey {
  std::string endpoint;
  std::string repo;
  std::string revision;
};

struct MountCommit {
  std::string commit;
  std::int64_t mtime = 0;    // the commit's date, or when it was resolved (Unix seconds)
  std::string offline_note;  // "", ", offline" or ", offline fallback" (for the mount line)
};

// The first line of the error is the cause; what to check follows on the next lines. Tells
// `scope` whether the repository is public (the Hub's answer, or the audience of the cached
// record used).
Expected<MountCommit, std::string> commit_at_mount(hub::HubClient& hub, cache::BlockCache& cache,
                                                   const RevisionKey& key,
                                                   cache::AccessScope& scope,
                                                   const std::string& cache_dir);

// The revision's commit from the Hub, recorded in the cache for a start without network under
// the audience the Hub's answer gives it (and `scope` told whether the repository is public).
Expected<hub::Revision, hub::HubError> resolve_and_record(hub::HubClient& hub,
                                                          cache::BlockCache& cache,
                                                          const RevisionKey& key,
                                                          cache::AccessScope& scope,
                                                          Deadline deadline);

// A commit's date from the Hub's lastModified (now when it has none).
std::int64_t mtime_of(const hub::Revision& rev);

}  // namespace whfs
