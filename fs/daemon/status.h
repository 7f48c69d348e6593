#pragma once
// The mount's status, as the JSON behind user.wheelhouse.status on the root: what `wheelhouse
// status`, `cache --mount`, prefetch's progress and doctor read. Built at each read from the
// parts' own counters.

#include <cstdint>
#include <string>

#include "cache/block_cache.h"
#include "fs/config/options.h"
#include "fs/daemon/commit_at_mount.h"
#include "fs/daemon/refresher.h"
#include "fs/hub/hub_client.h"
#include "fs/index/metadata_service.h"
#include "fs/namespace/namespace.h"
#include "fs/reader/read_stats.h"
#include "fs/reader/serving_gate.h"
#include "fs/targeting/caller_targets.h"

namespace whfs {

struct StatusParts {
  const MountOptions& o;
  const RevisionKey& key;
  const hub::HubClient& hub;
  cache::BlockCache& cache;
  const cache::AccessScope& scope;
  ns::Namespace& names;
  const reader::ServingGate& gate;
  reader::ReadPathStats& reads;
  const target::CallerTargets& callers;
  const index::WheelMetadataService& wheel_meta;
};

struct StatusFacts {
  bool offline_fallback = false;
  std::int64_t mounted_at = 0;
  std::string metrics_url;
  RefreshFacts refresh;
};

std::string status_json(const StatusParts& p, const StatusFacts& f);

}  // namespace whfs
