#include "fs/daemon/mount_metrics.h"

#include <ctime>

#include "fs/common/log.h"
#include "fs/common/version.h"
#include "fs/metrics/metrics.h"

namespace whfs {

std::vector<prometheus::MetricFamily> mount_metrics(const MountFacts& f, const hub::HubClient& hub,
                                                    reader::ReadPathStats& reads,
                                                    cache::BlockCache& cache) {
  metrics::Families m;
  const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  const auto now = static_cast<double>(std::time(nullptr));

  m.gauge(
      "wheelhouse_info", "The mount: version, repository, revision and commit (always 1)", 1,
      {{"version", kVersion}, {"repo", f.repo}, {"revision", f.revision}, {"commit", f.commit}});
  m.gauge("wheelhouse_commit_timestamp_seconds", "The date of the mounted commit (Unix time)",
          static_cast<double>(f.commit_time));
  m.gauge("wheelhouse_commit_age_seconds", "How old the mounted commit is",
          f.commit_time > 0 ? now - static_cast<double>(f.commit_time) : 0);
  m.gauge("wheelhouse_last_refresh_timestamp_seconds",
          "The last refresh that reached the Hub (Unix time; 0: none since the mount)",
          static_cast<double>(f.last_refresh));
  m.counter("wheelhouse_commit_changes_total", "Refreshes that moved the mount to a new commit",
            d(f.commit_changes));
  m.gauge("wheelhouse_offline", "1 when serving only the cache (offline, or the Hub unreachable)",
          f.offline ? 1 : 0);

  const hub::HubStats& h = hub.stats();
  const std::uint64_t cdn_req = h.cdn_requests.load();
  const std::uint64_t cdn_bytes = h.cdn_bytes.load();
  const char* req_help = "HTTP exchanges: the Hub (API, /resolve) and the CDN it redirects to";
  m.counter("wheelhouse_http_requests_total", req_help, d(h.requests.load() - cdn_req),
            {{"server", "hub"}});
  m.counter("wheelhouse_http_requests_total", req_help, d(cdn_req), {{"server", "cdn"}});
  const char* bytes_help = "Response body bytes received, by server";
  m.counter("wheelhouse_http_received_bytes_total", bytes_help, d(h.bytes.load() - cdn_bytes),
            {{"server", "hub"}});
  m.counter("wheelhouse_http_received_bytes_total", bytes_help, d(cdn_bytes), {{"server", "cdn"}});
  m.counter("wheelhouse_http_retries_total", "HTTP tries that failed and were tried again",
            d(h.retries.load()));
  m.counter("wheelhouse_http_stalls_total",
            "HTTP tries that made no progress in time (stall_timeout, a call's deadline)",
            d(h.stalls.load()));
  m.counter("wheelhouse_http_errors_total", "HTTP calls that failed after their retries",
            d(h.errors.load()));
  m.counter("wheelhouse_http_redirects_total", "Redirects followed", d(h.redirects.load()));

  const reader::FetcherStats fs = reads.fetch();
  m.counter("wheelhouse_download_requests_total", "Ranged GETs of file contents", d(fs.requests));
  m.counter("wheelhouse_download_bytes_total", "File bytes downloaded by completed ranged GETs",
            d(fs.bytes));
  m.counter("wheelhouse_download_errors_total", "Ranged GETs that failed", d(fs.errors));
  m.histogram("wheelhouse_download_duration_seconds", "How long one ranged GET took",
              reads.download_latency.snapshot());
  m.counter("wheelhouse_verification_failures_total",
            "Downloads whose bytes did not match the file's hash", d(fs.corrupt));
  m.counter("wheelhouse_reads_failed_fast_total",
            "Reads failed at once (a content in quarantine, a recent failure)", d(fs.failed_fast));
  m.counter("wheelhouse_reads_interrupted_total", "Reads whose caller went away while waiting",
            d(fs.interrupted));

  const auto transfers = reads.transfers.snapshot();
  double active = 0;
  double connections = 0;
  double waiting = 0;
  for (const auto& t : transfers) {
    if (t.connections > 0) active += 1;
    connections += t.connections;
    waiting += t.readers;
  }
  m.gauge("wheelhouse_transfers_in_flight", "Files being downloaded now", active);
  m.gauge("wheelhouse_transfer_connections", "Ranged GETs open now", connections);
  m.gauge("wheelhouse_readers_waiting", "Reads waiting for a download now", waiting);

  const reader::ReadStats rs = reads.read_counts();
  const char* reads_help =
      "Reads that reached the daemon: hit (served at once), miss (waited for a download or a "
      "verification), error";
  m.counter("wheelhouse_reads_total", reads_help, d(rs.hits), {{"result", "hit"}});
  m.counter("wheelhouse_reads_total", reads_help, d(rs.misses), {{"result", "miss"}});
  m.counter("wheelhouse_reads_total", reads_help, d(rs.errors), {{"result", "error"}});
  m.histogram("wheelhouse_read_duration_seconds", "How long a read took in the daemon",
              reads.read_latency.snapshot());

  if (auto s = cache.stats(); s) {
    const char* lookups = "Cache block lookups";
    m.counter("wheelhouse_cache_block_lookups_total", lookups, d(s->counters.hits),
              {{"result", "hit"}});
    m.counter("wheelhouse_cache_block_lookups_total", lookups, d(s->counters.misses),
              {{"result", "miss"}});
    m.counter("wheelhouse_cache_evictions_total", "Files evicted to stay under the cap",
              d(s->counters.evictions));
    m.counter("wheelhouse_cache_evicted_bytes_total", "Bytes evicted",
              d(s->counters.evicted_bytes));
    m.counter("wheelhouse_cache_corrupt_blocks_total", "Cache blocks whose checksum failed",
              d(s->counters.corrupt_blocks));
    m.counter("wheelhouse_cache_second_hash_passes_total",
              "Files hashed in a pass of their own over the cache, no running hash covering "
              "them (stored by another process or before a restart)",
              d(s->second_hash_passes));
    m.gauge("wheelhouse_cache_used_bytes", "Bytes the cache holds (its footprint)",
            d(s->usage.footprint_bytes));
    m.gauge("wheelhouse_cache_cap_bytes", "The cache's cap (cache_size)", d(s->cap_bytes));
    m.gauge("wheelhouse_cache_files", "Files (contents) in the cache", d(s->usage.contents));
  }

  const auto lines = log_line_counts();
  static constexpr const char* kLevels[] = {"trace",   "debug", "info",
                                            "warning", "error", "critical"};
  for (std::size_t i = 0; i < lines.size(); ++i) {
    m.counter("wheelhouse_log_messages_total", "Log lines by level", d(lines[i]),
              {{"level", kLevels[i]}});
  }

  const auto p = metrics::process_figures();
  m.gauge("process_resident_memory_bytes", "The daemon's resident memory", p.resident_bytes);
  m.gauge("process_threads", "The daemon's threads", p.threads);
  m.gauge("process_open_fds", "The daemon's open file descriptors", p.open_fds);
  m.counter("process_cpu_seconds_total", "CPU time of the daemon (user and system)", p.cpu_seconds);
  m.gauge("process_start_time_seconds", "When the daemon started (Unix time)",
          static_cast<double>(f.mounted_at));
  return m.take();
}

}  // namespace whfs
