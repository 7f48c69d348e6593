#pragma once
// The fetcher joins the cache and the network: it downloads missing blocks into the cache.
// Concurrent requests for a block wait for one download (single-flight); adjacent missing
// blocks become one ranged GET; demand reads go ahead of prefetches, and a queued prefetch
// that a reader now waits for is promoted. A worker pool bounds connections and memory (at
// most workers x max_request bytes of buffers).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/block_store.h"
#include "fs/common/expected.h"
#include "fs/hub/hub_client.h"
#include "fs/reader/block_math.h"

namespace whfs::reader {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

struct FileContent {
  std::string commit;
  std::string path;  // any path with this content at that commit
  std::uint64_t size = 0;
  cache::ContentId id;
};

struct ReadError {
  enum class Kind { kIo, kTimedOut, kCorrupt, kAccess, kNotFound, kCancelled };
  Kind kind = Kind::kIo;
  std::string message;
};

struct FetcherConfig {
  unsigned workers = 16;
  std::uint64_t max_request = 4ull << 20;   // bytes per ranged GET
  std::chrono::seconds fetch_timeout{120};  // one download, however many retries
  // After a content failed verification twice, reads of it fail at once for this long.
  std::chrono::seconds corrupt_quarantine{60};
};

struct FetcherStats {
  std::uint64_t requests = 0;
  std::uint64_t bytes = 0;
  std::uint64_t demand_requests = 0;
  std::uint64_t prefetch_requests = 0;
  std::uint64_t waits_joined = 0;  // block requests that joined a download already in flight
  std::uint64_t errors = 0;
  std::uint64_t corrupt = 0;
  std::uint64_t uncached = 0;  // downloads the cache could not keep (full of open files)
};

// Where fetched blocks ended up.
enum class Stored {
  kCached,   // in the cache: read them from there
  kNotKept,  // downloaded, but the cache could not keep them (full of open files, or failing)
};

class Fetcher {
 public:
  Fetcher(cache::BlockStore& store, hub::HubClient& hub, FetcherConfig config);
  ~Fetcher();
  Fetcher(const Fetcher&) = delete;
  Fetcher& operator=(const Fetcher&) = delete;

  // Downloads the given missing blocks (sorted) into the cache, or waits for the downloads
  // already in flight for them. Returns when all are done or the deadline passes. `then` is
  // queued as a prefetch after the demand downloads are, so that a readahead window never
  // takes the blocks this read waits for into one of its larger requests.
  Expected<Stored, ReadError> fetch(const FileContent& content,
                                    const std::vector<std::uint32_t>& missing, Deadline deadline,
                                    std::optional<BlockRange> then = std::nullopt);

  // Queues a background download of a block range; blocks already in flight are skipped.
  void prefetch(const FileContent& content, BlockRange range);

  // Whether the content failed verification recently (reads fail with EIO meanwhile).
  bool quarantined(const cache::ContentId& id);

  FetcherStats stats() const;

  // Ends the workers; flights still queued fail with kCancelled.
  void shutdown();

 private:
  struct Flight;
  struct Key {
    cache::ContentId id;
    std::uint32_t block;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept {
      return std::hash<cache::ContentId>{}(k.id) * 31 + k.block;
    }
  };

  void prefetch_locked(const FileContent& content, BlockRange range);
  std::shared_ptr<Flight> start_flight_locked(const FileContent& c, BlockRange r, bool demand,
                                              std::optional<Deadline> deadline);
  void worker();
  void run(const std::shared_ptr<Flight>& f);
  Expected<Stored, ReadError> download(const FileContent& c, BlockRange r, Deadline deadline);
  // One ranged GET into this worker's buffer, then into the cache: the Hub's error, or what
  // the cache said.
  Expected<cache::Result<cache::ContentState>, ReadError> download_and_put(const FileContent& c,
                                                                           BlockRange r,
                                                                           Deadline deadline);
  Expected<void, ReadError> verify_or_retry(const FileContent& c);
  Expected<void, ReadError> verify_once(const FileContent& c);
  void finish(const std::shared_ptr<Flight>& f, std::optional<ReadError> error,
              Stored stored = Stored::kCached);

  cache::BlockStore& store_;
  hub::HubClient& hub_;
  FetcherConfig config_;
  std::uint32_t max_blocks_;

  mutable std::mutex mu_;  // guards everything below; never held during I/O
  std::condition_variable work_cv_;
  std::unordered_map<Key, std::shared_ptr<Flight>, KeyHash> inflight_;
  std::deque<std::shared_ptr<Flight>> demand_q_;
  std::deque<std::shared_ptr<Flight>> prefetch_q_;
  std::unordered_map<cache::ContentId, Clock::time_point> quarantine_;
  // Verifications in progress: hashing a whole file is the costliest step of a cold read, so
  // concurrent requests to verify one content wait for the one running.
  struct Verification;
  std::unordered_map<cache::ContentId, std::shared_ptr<Verification>> verifying_;
  FetcherStats stats_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace whfs::reader
