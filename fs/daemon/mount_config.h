#pragma once
// The configuration of each part of a mount, from its options (pure functions: MountApp wires
// the parts together, these say how each is set up).

#include <memory>
#include <string>

#include "cache/block_cache.h"
#include "fs/common/expected.h"
#include "fs/daemon/options.h"
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
// verified in memory and not kept). The error names the directory and the cause.
Expected<std::unique_ptr<cache::BlockCache>, std::string> open_mount_cache(const MountOptions& o);

}  // namespace whfs
