#pragma once
// The cache's figures as JSON, one shape for the mount's status xattr and `wheelhouse cache
// stats --json`, so that the two views of one cache never disagree on names.

#include <nlohmann/json.hpp>
#include <string>

#include "cache/block_cache.h"

namespace whfs {

nlohmann::json cache_stats_json(const std::string& dir, const cache::CacheStats& s);

}  // namespace whfs
