#include "fs/daemon/status.h"

#include <unistd.h>

#include <ctime>
#include <nlohmann/json.hpp>

#include "fs/common/log.h"
#include "fs/common/version.h"
#include "fs/config/stats_json.h"

namespace whfs {

std::string status_json(const StatusParts& p, const StatusFacts& f) {
  const MountOptions& o = p.o;
  nlohmann::json j;
  j["version"] = kVersion;
  j["repo"] = p.key.repo;
  j["revision"] = o.revision;
  j["commit"] = p.names.commit();
  j["endpoint"] = p.key.endpoint;
  j["offline"] = p.hub.offline();
  j["offline_fallback"] = f.offline_fallback;
  j["mountpoint"] = o.mountpoint;
  // For `wheelhouse cache --mount`: the writable tier's folder, and its group.
  j["cache_dir"] = o.cache_upper.empty() ? o.cache_dir : o.cache_upper;
  j["cache_group"] = o.cache_group;
  const reader::CacheTrust& trust = p.gate.cache_trust();
  j["cache_trust"] = {{"trusted", trust.believed}, {"why", trust.why}};
  // Whose records of the cache it reads, and whose it writes (cache/audience.h).
  j["audiences"] = {{"readable", p.scope.readable()},
                    {"writes", std::string(p.scope.write().name)},
                    {"repo_public", p.scope.repo_public()}};
  j["mounted_at"] = f.mounted_at;
  j["now"] = std::time(nullptr);
  j["commit_time"] = p.names.mtime();
  j["pid"] = ::getpid();
  j["refreshes"] = f.refresh.commit_changes;
  j["last_refresh"] = f.refresh.last_at == 0 ? nlohmann::json(nullptr)
                                             : nlohmann::json{{"at", f.refresh.last_at},
                                                              {"result", f.refresh.last_result}};
  if (!f.metrics_url.empty()) j["metrics"] = f.metrics_url;
  j["reads"] = read_stats_json(p.reads.read_counts());
  j["received_bytes"] = p.reads.transfers.received_total();
  j["transfers"] = transfers_json(p.reads.transfers.snapshot());
  j["inodes"] = p.names.inode_count();
  j["serving"] = o.streaming ? "streaming" : "verified";
  j["targets"] = o.current ? p.callers.status_json() : nlohmann::json(nullptr);
  j["wheel_metadata"] = wheel_metadata_json(p.wheel_meta.stats());
  j["hub"] = hub_stats_json(p.hub.stats());
  j["fetch"] = fetch_stats_json(p.reads.fetch());
  j["recent_problems"] = problems_json(recent_problems());
  if (auto s = p.cache.stats(); s) j["cache"] = cache_stats_json(o.cache_dir, *s);
  return j.dump();
}

}  // namespace whfs
