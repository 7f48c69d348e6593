#pragma once
// The configuration of each part of a mount, from its options (pure functions: MountApp wires
// the parts together, these say how each is set up).

#include <memory>
#include <string>

#include "cache/block_cache.h"
#include "fs/common/expected.h"
#include "fs/config/options.h"
#include "fs/fuse/fuse_mount.h"
#include "fs/hub/hub_client.h"
#include "fs/reader/reader.h"

namespace whfs {

hub::HubClientConfig hub_config(const MountOptions& o, const std::string& endpoint,
                                const hub::RepoRef& repo);
reader::ReaderConfig reader_config(const MountOptions& o);
// fsname= defaults to the repository id; the subtype is always wheelhousefs.
fuse::FuseConfig fuse_config(const MountOptions& o, const std::string& repo_id);

// The cache of the mount: cache_dir as it is (private, or shared with cache_group), read-only
// with cache_upper above it, or none (a cache another process holds too long: files are then
// verified in memory and not kept). The error names the directory and the cause. `note` (may
// be null) gets a line for the log about a read-only cache, said once the mount is up.
Expected<std::unique_ptr<cache::BlockCache>, std::string> open_mount_cache(
    const MountOptions& o, std::string* note = nullptr);

// Whose word the cache's records are taken on (a content recorded as verified, a stored
// listing, a wheel's METADATA), decided here once; the mount's serving gate holds the answer
// and every part asks it (fs/reader/serving_gate.h). Believed: taken as recorded
// (cache_trusted=, or a cache only this user can have written). Not: each content is hashed by
// this process before its first read, and listings come from the Hub. `why` says which, in
// words (the status and the mount's log line).
reader::CacheTrust cache_trust(const MountOptions& o, const cache::BlockCache& cache);

}  // namespace whfs
