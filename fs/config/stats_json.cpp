#include "fs/config/stats_json.h"

namespace whfs {

nlohmann::json cache_stats_json(const std::string& dir, const cache::CacheStats& s) {
  return {{"dir", dir},
          {"cap_bytes", s.cap_bytes},
          {"used_bytes", s.usage.footprint_bytes},
          {"payload_bytes", s.usage.payload_bytes},
          {"file_bytes", s.file_bytes},
          {"disk_bytes", s.disk_bytes},
          {"block_size", s.block_size},
          {"contents", s.usage.contents},
          {"blocks", s.usage.blocks},
          {"hits", s.counters.hits},
          {"misses", s.counters.misses},
          {"evictions", s.counters.evictions},
          {"evicted_bytes", s.counters.evicted_bytes},
          {"corrupt_blocks", s.counters.corrupt_blocks},
          {"corrupt_contents", s.counters.corrupt_contents}};
}

nlohmann::json hub_stats_json(const hub::HubStats& h) {
  return {{"requests", h.requests.load()},
          {"retries", h.retries.load()},
          {"errors", h.errors.load()},
          {"bytes", h.bytes.load()},
          {"cdn_requests", h.cdn_requests.load()},
          {"cdn_bytes", h.cdn_bytes.load()},
          {"stalls", h.stalls.load()},
          {"redirects", h.redirects.load()},
          {"url_reuses", h.url_reuses.load()}};
}

nlohmann::json fetch_stats_json(const reader::FetcherStats& f) {
  return {{"requests", f.requests},         {"bytes", f.bytes},
          {"demand", f.demand_requests},    {"prefetch", f.prefetch_requests},
          {"joined", f.waits_joined},       {"errors", f.errors},
          {"corrupt", f.corrupt},           {"uncached", f.uncached},
          {"in_memory", f.in_memory},       {"rechecks", f.rechecks},
          {"failed_fast", f.failed_fast},   {"interrupted", f.interrupted},
          {"shared_waits", f.shared_waits}, {"takeovers", f.takeovers}};
}

nlohmann::json wheel_metadata_json(const index::WheelMetadataStats& m) {
  return {{"extracted", m.extracted},
          {"from_cache", m.from_store},
          {"verified", m.verified},
          {"mismatched", m.mismatched}};
}

nlohmann::json read_stats_json(const reader::ReadStats& r) {
  return {{"reads", r.reads}, {"hits", r.hits}, {"misses", r.misses}, {"errors", r.errors}};
}

nlohmann::json transfers_json(const std::vector<reader::Transfer>& ts) {
  auto out = nlohmann::json::array();
  for (const auto& t : ts) {
    out.push_back({{"path", t.path},
                   {"size", t.size},
                   {"received", t.received},
                   {"rate", static_cast<std::uint64_t>(t.rate)},
                   {"connections", t.connections},
                   {"readers", t.readers},
                   {"seconds", t.seconds}});
  }
  return out;
}

nlohmann::json problems_json(const std::vector<Problem>& ps) {
  auto out = nlohmann::json::array();
  for (const auto& p : ps) {
    out.push_back({{"level", p.level},
                   {"message", p.message},
                   {"count", p.count},
                   {"first", p.first},
                   {"last", p.last}});
  }
  return out;
}

}  // namespace whfs
