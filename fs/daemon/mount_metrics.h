#pragma once
// A mount's figures as Prometheus metric families (fs/metrics/README.md lists them): read
// from the hub client's, the read path's (ReadPathStats) and the cache's own counters at each
// scrape.

#include <prometheus/metric_family.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cache/block_cache.h"
#include "fs/hub/hub_client.h"
#include "fs/reader/read_stats.h"

namespace whfs {

struct MountFacts {
  std::string repo;
  std::string revision;
  std::string commit;
  std::int64_t commit_time = 0;   // the commit's date (Unix seconds)
  std::int64_t mounted_at = 0;    // Unix seconds
  std::int64_t last_refresh = 0;  // the last refresh that reached the Hub, 0: none yet
  std::uint64_t commit_changes = 0;
  bool offline = false;
};

std::vector<prometheus::MetricFamily> mount_metrics(const MountFacts& facts,
                                                    const hub::HubClient& hub,
                                                    reader::ReadPathStats& reads,
                                                    cache::BlockCache& cache);

}  // namespace whfs
