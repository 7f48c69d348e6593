#include "fs/daemon/mount_config.h"

#include <grp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "cache/records.h"
#include "cache/tiered_cache.h"

namespace whfs {
namespace {

// The block_pages that give blocks of `block_size` bytes on this machine's pages (LMDB's page
// is the system's); when none does exactly, the tiers' block sizes differ and
// open_mount_cache refuses them.
std::uint32_t pages_for_block(std::uint32_t block_size) {
  const auto page = static_cast<std::uint32_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t overhead = page - cache::BlockGeometry::payload_for_pages(1, page);
  return static_cast<std::uint32_t>((block_size + overhead + page - 1) / page);
}

}  // namespace

hub::HubClientConfig hub_config(const MountOptions& o, const std::string& endpoint,
                                const hub::RepoRef& repo) {
  hub::HubClientConfig hc;
  hc.transport.endpoint = endpoint;
  hc.transport.token_file = o.token_file;
  hc.transport.allow_insecure_token = o.insecure_token;
  hc.transport.http.proxy = o.proxy;
  hc.transport.http.max_handles = o.connections + o.api_requests + 4;
  hc.transport.http.low_speed_time = o.stall_timeout;
  hc.repo = repo;
  hc.max_api_requests = o.api_requests;
  return hc;
}

reader::ReaderConfig reader_config(const MountOptions& o) {
  reader::ReaderConfig rc;
  rc.fetcher.workers = o.connections;
  // Request sizes follow the link's rate (request_size.h) from the readahead's share of a
  // connection until the first GETs were measured.
  rc.fetcher.first_request = std::max<std::uint64_t>(1 << 20, o.readahead / o.connections);
  rc.fetcher.serving = o.streaming ? reader::Serving::kStreaming : reader::Serving::kVerified;
  rc.fetcher.request_timeout = o.read_timeout;
  // (Whose records are believed: cache_trust(), once the cache is open.)
  rc.fetcher.claim_takeover = std::max(2 * o.stall_timeout, std::chrono::seconds(4));
  rc.readahead.max_window = std::max<std::uint64_t>(1 << 20, o.readahead);
  rc.readahead.batch = rc.fetcher.first_request;
  return rc;
}

fuse::FuseConfig fuse_config(const MountOptions& o, const std::string& repo_id) {
  fuse::FuseConfig fc;
  fc.mountpoint = o.mountpoint;
  fc.options = o.fuse_options;
  const bool has_fsname =
      std::any_of(fc.options.begin(), fc.options.end(),
                  [](const std::string& f) { return f.starts_with("fsname="); });
  if (!has_fsname) fc.options.push_back("fsname=" + repo_id);
  fc.options.emplace_back("subtype=wheelhousefs");
  fc.debug = o.debug;
  fc.threads = std::max(16u, o.connections);
  return fc;
}

Expected<std::unique_ptr<cache::BlockCache>, std::string> open_mount_cache(const MountOptions& o,
                                                                           std::string* note) {
  cache::Options co;
  co.dir = o.cache_dir;
  co.cap_bytes = o.cache_size;
  co.open_timeout = o.read_timeout;
  if (!o.cache_group.empty()) {
    const group* g = ::getgrnam(o.cache_group.c_str());
    if (g == nullptr) return unexpected("cache_group: no group named '" + o.cache_group + "'");
    co.access.group = g->gr_gid;
  }
  // With cache_upper, cache_dir is the lower tier: opened read-only whatever its filesystem
  // says. A warm cache COPY'd into an image is writable in a running container (overlayfs
  // copies a file up on its first write): written, its whole data.mdb would be copied into the
  // container's layer and lost with it, and the tmpfs given for new files never used.
  co.read_only = !o.cache_upper.empty();
  auto cache = cache::BlockCache::open(co);
  if (!cache && cache.error().kind == cache::CacheError::Kind::kBusy) {
    spdlog::warn("cache {}: {}; serving files verified in memory without keeping them", o.cache_dir,
                 cache.error().message);
    return std::unique_ptr<cache::BlockCache>(
        std::make_unique<cache::NullCache>(o.cache_dir, cache.error().message));
  }
  if (!cache) {
    // A read-only folder with no cache in it (an image layer built without a warm cache):
    // say what to do, not LMDB's "No such file or directory".
    if (::access(o.cache_dir.c_str(), W_OK) != 0 && errno == EROFS &&
        ::access((o.cache_dir + "/data.mdb").c_str(), F_OK) != 0) {
      return unexpected("cache_dir=" + o.cache_dir +
                        " is read-only and holds no cache: give cache_upper=DIR (a writable "
                        "tier over it) or a writable cache_dir");
    }
    if (co.read_only && ::access((o.cache_dir + "/data.mdb").c_str(), F_OK) != 0) {
      return unexpected("cache_dir=" + o.cache_dir +
                        " holds no cache (no data.mdb) for cache_upper=" + o.cache_upper +
                        " to go over: give a warm cache, or no cache_upper");
    }
    return unexpected("cache " + o.cache_dir + ": " + cache.error().message);
  }
  if (!(*cache)->read_only()) return std::move(cache).value();
  if (o.cache_upper.empty()) {
    if (note != nullptr) {
      *note = "cache " + o.cache_dir +
              " is read-only: it serves what it holds; new files are verified in memory and "
              "not kept (cache_upper= gives them a writable cache)";
    }
    return std::move(cache).value();
  }
  // The same block size as the lower tier: a content is read from one tier or the other.
  cache::Options uo = co;
  uo.dir = o.cache_upper;
  uo.read_only = false;
  uo.block_pages = pages_for_block((*cache)->block_size());
  auto upper = cache::BlockCache::open(uo);
  if (!upper) return unexpected("cache_upper " + o.cache_upper + ": " + upper.error().message);
  if ((*upper)->block_size() != (*cache)->block_size()) {
    return unexpected("cache_upper " + o.cache_upper + " has blocks of " +
                      std::to_string((*upper)->block_size()) + " bytes and " + o.cache_dir +
                      " of " + std::to_string((*cache)->block_size()) +
                      ": give an empty cache_upper");
  }
  if (note != nullptr) *note = "cache: " + o.cache_dir + " (read-only) under " + o.cache_upper;
  return std::unique_ptr<cache::BlockCache>(
      std::make_unique<cache::TieredCache>(std::move(cache).value(), std::move(upper).value()));
}

reader::CacheTrust cache_trust(const MountOptions& o, const cache::BlockCache& cache) {
  if (o.cache_trusted) {
    return {true,
            "cache_trusted: what any process sharing the cache recorded as verified is served as "
            "it is"};
  }
  if (cache.owner_only()) {
    return {true,
            "private: only this user can have written the cache, so what it records as verified "
            "is served without hashing it again"};
  }
  std::string whose;
  if (!o.cache_upper.empty()) {
    whose = "a read-only cache under cache_upper";
  } else if (cache.read_only()) {
    whose = "a read-only cache (or none it may write)";
  } else if (!o.cache_group.empty()) {
    whose = "a cache shared with group " + o.cache_group;
  } else {
    whose = "a cache that was shared with a group (or writable by others) before";
  }
  return {false, "per process: " + whose +
                     ", so each content is hashed by this process before its first read"};
}

}  // namespace whfs
