#pragma once
// Figures as JSON for the mount's status xattr (user.wheelhouse.status, `wheelhouse status`).
// The cache's have one shape for the status and `wheelhouse cache stats --json`, so that the
// two views of one cache never disagree on names.

#include <nlohmann/json.hpp>
#include <string>

#include "cache/block_cache.h"
#include "fs/common/log.h"
#include "fs/hub/hub_client.h"
#include "fs/index/metadata_service.h"
#include "fs/reader/fetcher.h"
#include "fs/reader/reader.h"

namespace whfs {

nlohmann::json cache_stats_json(const std::string& dir, const cache::CacheStats& s);
nlohmann::json hub_stats_json(const hub::HubStats& h);
nlohmann::json fetch_stats_json(const reader::FetcherStats& f);
nlohmann::json wheel_metadata_json(const index::WheelMetadataStats& m);
nlohmann::json read_stats_json(const reader::ReadStats& r);
nlohmann::json transfers_json(const std::vector<reader::Transfer>& ts);
nlohmann::json problems_json(const std::vector<Problem>& ps);

}  // namespace whfs
