#pragma once
// The read path's figures, in one object: the daemon builds it, hands it to each part that
// records (one relaxed atomic increment each: a read pays nothing more for being watched) and
// reads it for `wheelhouse status` and the metrics. No part keeps figures of its own, so none
// forwards another's.

#include <atomic>
#include <cstdint>

#include "fs/common/histogram.h"
#include "fs/reader/transfers.h"

namespace whfs::reader {

// Reads that reached the daemon (the kernel's page cache answers the rest): hits were
// served from the cache or memory at once, misses waited for the fetcher (a download, a
// verification), errors failed. hits + misses + errors == reads.
struct ReadStats {
  std::uint64_t reads = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t errors = 0;
};

// What the fetcher and its parts did, as a snapshot.
struct FetcherStats {
  std::uint64_t requests = 0;
  std::uint64_t bytes = 0;
  std::uint64_t demand_requests = 0;
  std::uint64_t prefetch_requests = 0;
  std::uint64_t waits_joined = 0;  // block requests that joined a download already in flight
  std::uint64_t errors = 0;
  std::uint64_t corrupt = 0;
  std::uint64_t uncached = 0;      // downloads the cache could not keep
  std::uint64_t in_memory = 0;     // contents verified and served from memory instead
  std::uint64_t rechecks = 0;      // contents verified by this process before serving them
  std::uint64_t failed_fast = 0;   // reads failed at once (quarantine or a recent failure)
  std::uint64_t interrupted = 0;   // reads whose caller went away while they waited
  std::uint64_t shared_waits = 0;  // files another process sharing the cache downloaded
  std::uint64_t takeovers = 0;     // ... or started to, then stalled: downloaded here
};

struct ReadPathStats {
  // One figure: a relaxed increment where it happens, a load when it is read.
  class Count {
   public:
    void add(std::uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
    std::uint64_t get() const { return v_.load(std::memory_order_relaxed); }

   private:
    std::atomic<std::uint64_t> v_{0};
  };

  // Recorded by whom: the Reader.
  Count reads, read_misses, read_errors;
  LatencyHistogram read_latency;
  // RangedGets: each ranged GET, and the transfers under way (counted as bytes arrive).
  Count requests, bytes, download_errors;
  LatencyHistogram download_latency;
  Transfers transfers;
  // Downloads (waits_joined also by MemoryContents).
  Count demand_requests, prefetch_requests, waits_joined, uncached;
  // MemoryContents, Verifier, ServingGate, Fetcher, Claims.
  Count in_memory;
  Count corrupt, rechecks;
  Count failed_fast;
  Count interrupted;
  Count shared_waits, takeovers;

  ReadStats read_counts() const {
    ReadStats s;
    s.reads = reads.get();
    s.misses = read_misses.get();
    s.errors = read_errors.get();
    s.hits = s.reads - s.misses - s.errors;
    return s;
  }
  FetcherStats fetch() const {
    FetcherStats s;
    s.requests = requests.get();
    s.bytes = bytes.get();
    s.demand_requests = demand_requests.get();
    s.prefetch_requests = prefetch_requests.get();
    s.waits_joined = waits_joined.get();
    s.errors = download_errors.get();
    s.corrupt = corrupt.get();
    s.uncached = uncached.get();
    s.in_memory = in_memory.get();
    s.rechecks = rechecks.get();
    s.failed_fast = failed_fast.get();
    s.interrupted = interrupted.get();
    s.shared_waits = shared_waits.get();
    s.takeovers = takeovers.get();
    return s;
  }
};

}  // namespace whfs::reader
