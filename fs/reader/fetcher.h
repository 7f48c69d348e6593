#pragma once
// The fetcher is the only code that joins the cache and the network: it makes a read
// servable and says where to read it from.
//
// Verified serving (the default): a read is served only from a content whose whole-file hash
// (LFS sha256, or git blob sha1) this process has seen match, so the first read of a cold
// file waits for the whole file, fetched in parallel ranged GETs. Streaming (an opt-in):
// blocks are served as they arrive and the file is verified once complete.
//
// Downloads are single-flight per block (concurrent readers wait for one GET), adjacent
// missing blocks become one ranged GET, demand downloads go ahead of prefetches (and a queued
// prefetch a reader now needs is promoted). A content the cache cannot keep (full of open
// files, read-only, failing) is downloaded whole into memory and verified there, or the read
// fails: the direct path never serves unverified bytes either. A worker pool bounds
// connections and buffers (workers x max_request bytes, plus memory_limit).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/block_store.h"
#include "fs/common/cancel.h"
#include "fs/common/clock.h"
#include "fs/common/expected.h"
#include "fs/common/histogram.h"
#include "fs/hub/hub_client.h"
#include "fs/reader/block_math.h"
#include "fs/reader/transfers.h"

namespace whfs::reader {

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
  // The fetcher has logged its cause (a failed download, a corrupt content) once: every read
  // that waited on it need not log it again.
  bool logged = false;
};

enum class Serving {
  kVerified,   // only bytes of a file whose whole hash matched (the default)
  kStreaming,  // bytes as they arrive; the whole file is checked once complete
};

struct FetcherConfig {
  unsigned workers = 16;
  std::uint64_t max_request = 4ull << 20;  // bytes per ranged GET
  Serving serving = Serving::kVerified;
  // One ranged GET, however many retries, from when a worker starts it.
  std::chrono::seconds request_timeout{30};
  // After a content failed verification twice, reads of it fail at once for this long.
  std::chrono::seconds corrupt_quarantine{60};
  // After a read of a content failed (no progress in time, the Hub failing), reads of it fail
  // at once for this long: the kernel retries a failed read of the same range at once, and a
  // retry must not cost another full wait.
  std::chrono::seconds failure_memo{10};
  // Serve a content the cache records as verified without hashing it in this process first.
  bool trust_cache = false;
  // A cache others can write (cache_group=, a read-only tier): peek() takes from it only the
  // bytes of contents this process verified itself, else it reads them with one ranged GET
  // (what a wheel's METADATA is made of must not come from a co-tenant's blocks).
  bool peek_verified_only = false;
  // Contents the cache cannot keep are verified in memory, up to this many bytes in all.
  std::uint64_t memory_limit = 512ull << 20;
  // Another process sharing the cache downloading a file this process needs is waited for
  // (the Hub serves it once) unless its download makes no progress for this long; then this
  // process downloads what is left itself.
  std::chrono::seconds claim_takeover{10};
};

// How long a read may wait, and what stops it early.
struct WaitPolicy {
  // The longest a read waits without any progress of the downloads it needs (a large file
  // on a slow link is not a failure while its bytes keep arriving).
  std::chrono::milliseconds patience{30000};
  CancelFlag* cancel = nullptr;  // the caller went away (FUSE interrupt)
};

// A whole content downloaded and verified in memory (the cache could not keep it).
struct MemoryContent {
  std::unique_ptr<std::byte[]> data;
  std::uint64_t size = 0;
};

// Where a servable read reads from.
struct Source {
  std::shared_ptr<const MemoryContent> memory;  // null: from the cache
};

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

class Fetcher {
 public:
  // A download is stored in puts of at least this many bytes (whole blocks) as they arrive.
  static constexpr std::uint64_t kStreamPutBytes = 512 << 10;
  Fetcher(cache::BlockStore& store, hub::HubClient& hub, FetcherConfig config);
  ~Fetcher();
  Fetcher(const Fetcher&) = delete;
  Fetcher& operator=(const Fetcher&) = delete;

  // Makes the bytes of `need` servable and says where they are: with verified serving, the
  // whole content downloaded (the blocks of `need` first) and verified by this process; when
  // streaming, the blocks of `need` present. `then` is queued as a prefetch after the
  // downloads this read waits for (streaming readahead).
  Expected<Source, ReadError> ensure(const FileContent& content, BlockRange need,
                                     const WaitPolicy& wait,
                                     std::optional<BlockRange> then = std::nullopt);

  // Bytes of a content for the daemon's own use (a wheel's metadata), whether or not the whole
  // content has matched its hash yet: from the cache, else downloaded into it (only the blocks
  // they span), else straight from one ranged GET. Never handed to a reader as such: whoever
  // uses them checks what it derives once the content is verified.
  Expected<std::string, ReadError> peek(const FileContent& content, std::uint64_t offset,
                                        std::size_t size, const WaitPolicy& wait);

  // Whether a cache read of this content may be handed to a reader now, without ensure():
  // verified serving needs the content verified by this process (or a trusted cache).
  bool servable_from_cache(const cache::ContentId& id) const;
  cache::BlockStore::ReadMode cache_read_mode(const cache::ContentId& id) const;
  const FetcherConfig& config() const { return config_; }

  // Queues a background download of a block range; blocks already in flight are skipped.
  void prefetch(const FileContent& content, BlockRange range);

  // Called (outside any lock) each time a content's downloaded bytes do not match its hash:
  // streaming readers may have been given some of them, so the kernel must drop its pages.
  void set_corrupt_listener(std::function<void(const cache::ContentId&)> listener);

  FetcherStats stats() const;
  // The downloads under way, and how long each ranged GET took (for status and metrics).
  Transfers& transfers() { return transfers_; }
  const Transfers& transfers() const { return transfers_; }
  const LatencyHistogram& download_latency() const { return download_latency_; }

  // Ends the workers; flights still queued fail with kCancelled.
  void shutdown();

 private:
  struct Flight;
  struct MemoryFetch;
  struct Verification;
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

  Expected<Source, ReadError> ensure_verified(const FileContent& c, BlockRange need,
                                              const WaitPolicy& wait);
  Expected<Source, ReadError> ensure_streaming(const FileContent& c, BlockRange need,
                                               const WaitPolicy& wait,
                                               std::optional<BlockRange> then);
  // Downloads the given missing blocks (in this order) into the cache, or waits for the
  // downloads already in flight for them.
  enum class Stored { kCached, kNotKept };
  Expected<Stored, ReadError> fetch_blocks(const FileContent& c,
                                           const std::vector<std::uint32_t>& missing,
                                           const WaitPolicy& wait, std::optional<BlockRange> then);
  // The whole content into memory, verified there.
  Expected<Source, ReadError> fetch_to_memory(const FileContent& c, const WaitPolicy& wait,
                                              const std::string& why);
  // This process's claim on downloading a content (shared by its readers), or the news that
  // another process finished it meanwhile; a null claim when there is nothing to coordinate
  // with (the cache cannot say) or this process takes over a stalled download.
  struct ClaimOutcome {
    std::shared_ptr<cache::BlockStore::DownloadClaim> claim;
    bool other_finished = false;
  };
  Expected<ClaimOutcome, ReadError> claim_or_wait(const FileContent& c, const WaitPolicy& wait);
  // The bytes [offset, offset + size) from the cache's present blocks; nullopt when one is
  // missing.
  std::optional<std::string> copy_present(const FileContent& c, std::uint64_t offset,
                                          std::size_t size);
  // Blocks of [first, end) not in the cache; nullopt when the cache cannot say.
  std::optional<std::vector<std::uint32_t>> missing_blocks(const FileContent& c, BlockRange r);

  // Streaming, and this content has not failed its hash before.
  bool streams(const cache::ContentId& id) const;
  std::optional<ReadError> blocked(const cache::ContentId& id, const std::string& path);
  void remember_failure(const FileContent& c, const ReadError& e);
  std::shared_ptr<const MemoryContent> memory_hit(const cache::ContentId& id);
  void trust(const cache::ContentId& id);
  bool trusted(const cache::ContentId& id) const;

  void prefetch_locked(const FileContent& content, BlockRange range);
  std::shared_ptr<Flight> start_flight_locked(const FileContent& c, BlockRange r, bool demand);
  void worker();
  void run(const std::shared_ptr<Flight>& f);
  void run_memory_piece(const std::shared_ptr<Flight>& f);
  void finish_memory_fetch(const std::shared_ptr<MemoryFetch>& m);
  // `abandon` (may be null) ends a download nobody waits for any more.
  Expected<Stored, ReadError> download(const FileContent& c, BlockRange r, Deadline deadline,
                                       const CancelFlag* abandon);
  // One ranged GET into `buf`, counted; `on_fill` as HubClient::read_range's.
  Expected<void, ReadError> get_range(const FileContent& c, std::uint64_t offset,
                                      std::span<std::byte> buf, Deadline deadline,
                                      const CancelFlag* abandon,
                                      const hub::HubClient::FillFn* on_fill = nullptr);
  // One ranged GET into this worker's buffer, stored in the cache as its blocks arrive.
  Expected<cache::Result<cache::ContentState>, ReadError> download_and_put(
      const FileContent& c, BlockRange r, Deadline deadline, const CancelFlag* abandon);
  // Verifies a complete content (single-flight per content); a mismatch downloads it once more.
  Expected<void, ReadError> verify_or_retry(const FileContent& c);
  Expected<void, ReadError> verify_once(const FileContent& c);
  void report_corrupt(const FileContent& c);
  void finish(const std::shared_ptr<Flight>& f, std::optional<ReadError> error,
              Stored stored = Stored::kCached);

  cache::BlockStore& store_;
  hub::HubClient& hub_;
  FetcherConfig config_;
  std::uint32_t max_blocks_;

  // Lock order: mu_ -> a Flight's or MemoryFetch's mu (never the other way). mu_ is never
  // held during I/O; trusted_mu_ and a Verification's mu are leaves.
  mutable std::mutex mu_;  // guards everything below up to trusted_mu_
  std::condition_variable work_cv_;
  std::unordered_map<Key, std::shared_ptr<Flight>, KeyHash> inflight_;
  std::deque<std::shared_ptr<Flight>> demand_q_;
  std::deque<std::shared_ptr<Flight>> prefetch_q_;
  std::unordered_map<cache::ContentId, Clock::time_point> quarantine_;
  struct Failure {
    Clock::time_point until;
    ReadError error;
  };
  std::unordered_map<cache::ContentId, Failure> failed_;
  // Contents whose download failed its hash: served only verified from then on, even when
  // streaming (until this process has verified them).
  std::unordered_set<cache::ContentId> suspect_;
  // Verifications in progress: hashing a whole file is the costliest step of a cold read, so
  // concurrent requests to verify one content wait for the one running.
  std::unordered_map<cache::ContentId, std::shared_ptr<Verification>> verifying_;
  std::unordered_map<cache::ContentId, std::shared_ptr<MemoryFetch>> memory_fetches_;
  std::unordered_map<cache::ContentId, std::weak_ptr<cache::BlockStore::DownloadClaim>> claims_;
  // Verified in-memory contents, most recently used first; open files keep theirs alive.
  std::list<std::pair<cache::ContentId, std::shared_ptr<const MemoryContent>>> memory_;
  std::uint64_t memory_bytes_ = 0;  // in memory_ and in memory_fetches_
  std::function<void(const cache::ContentId&)> corrupt_listener_;
  FetcherStats stats_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;

  // Readers waiting for flights sleep here; every finished flight wakes them. A leaf lock.
  std::mutex progress_mu_;
  std::condition_variable progress_cv_;

  Transfers transfers_;  // a leaf, thread-safe itself
  LatencyHistogram download_latency_;

  mutable std::shared_mutex trusted_mu_;          // guards trusted_
  std::unordered_set<cache::ContentId> trusted_;  // verified by this process
};

}  // namespace whfs::reader
