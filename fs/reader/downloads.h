#pragma once
// The read path's downloads (the only code that asks the HubClient for bytes, through
// RangedGets): single-flight per block (concurrent readers wait for one GET), adjacent missing
// blocks as one ranged GET sized by the link's measured rate (request_size.h), demand downloads
// ahead of prefetches (a queued prefetch a reader now needs is promoted), and a worker pool that
// bounds connections. A download goes into the cache, stored in whole blocks as they arrive, or
// into a buffer in memory (BufferFetch) when the cache cannot keep the content. Downloads have
// no deadline: a reader waits for them while their bytes arrive (wait_for).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/block_store.h"
#include "fs/common/cancel.h"
#include "fs/common/clock.h"
#include "fs/common/expected.h"
#include "fs/hub/hub_client.h"
#include "fs/reader/block_math.h"
#include "fs/reader/ranged_gets.h"
#include "fs/reader/read_types.h"

namespace whfs::reader {

class Downloads {
 public:
  struct Flight;  // one ranged GET of consecutive blocks (downloads.cpp)

  // A whole content downloaded into memory, in pieces of one request each. `on_complete`
  // runs on the worker that finishes the last piece, before that piece counts as done, so that
  // whoever waits for the pieces sees its outcome.
  struct BufferFetch {
    explicit BufferFetch(FileContent c) : content(std::move(c)) {}
    FileContent content;
    std::unique_ptr<std::byte[]> data;
    std::vector<std::shared_ptr<Flight>> pieces;  // set before any piece runs; cleared (by
                                                  // its owner) when it is done
    std::atomic<std::uint32_t> left{0};           // pieces not finished yet
    std::function<void(BufferFetch&)> on_complete;
    std::mutex mu;  // guards error and result
    std::optional<ReadError> error;
    std::shared_ptr<const MemoryContent> result;
  };

  // What to do once a download made a content complete in the cache (verify it, if the
  // serving gate asks for it); also run by a prefetch that finds a content complete already.
  using OnComplete =
      std::function<Expected<void, ReadError>(const FileContent&, const cache::ContentState&)>;
  // Bytes of a content arrived from the Hub and were stored (before on_complete, so that
  // whoever sees the content complete sees this too).
  using OnFetched = std::function<void(const FileContent&)>;

  Downloads(cache::BlockStore& store, hub::HubClient& hub, const FetcherConfig& config,
            ReadPathStats& stats, OnComplete on_complete, OnFetched on_fetched = {});
  ~Downloads();
  Downloads(const Downloads&) = delete;
  Downloads& operator=(const Downloads&) = delete;

  enum class Stored { kCached, kNotKept };
  // Downloads the given missing blocks (in this order, the caller's priority) into the cache,
  // or waits for the downloads already in flight for them. `then` is queued as a prefetch
  // after them.
  Expected<Stored, ReadError> fetch_blocks(const FileContent& c,
                                           const std::vector<std::uint32_t>& missing,
                                           const WaitPolicy& wait, std::optional<BlockRange> then);
  // Queues a background download of a block range; blocks already in flight are skipped.
  void prefetch(const FileContent& c, BlockRange range);

  // A BufferFetch of the whole content with its pieces made, not started: no lock is taken,
  // so its owner may publish it (for readers to join) before start_buffer().
  // Each piece holds its BufferFetch and the fetch its pieces: the owner breaks the cycle by
  // clearing `pieces` once the fetch is done (or at shutdown), under its own lock, so joiners
  // take their copy of the pieces under that lock too.
  std::shared_ptr<BufferFetch> plan_buffer(const FileContent& c,
                                           std::function<void(BufferFetch&)> on_complete) const;
  void start_pieces(const std::vector<std::shared_ptr<Flight>>& pieces);
  // Waits for `flights`, counted as a reader waiting on the content's transfer.
  Expected<void, ReadError> wait_for(const FileContent& c,
                                     const std::vector<std::shared_ptr<Flight>>& flights,
                                     const WaitPolicy& wait);
  // The whole content once more, into the cache (in order) or into `data`.
  Expected<void, ReadError> refill_cache(const FileContent& c);
  Expected<void, ReadError> refill_buffer(const FileContent& c, std::byte* data);

  // One ranged GET into `buf` (see RangedGets::get).
  Expected<void, ReadError> get_range(const FileContent& c, std::uint64_t offset,
                                      std::span<std::byte> buf, Deadline deadline,
                                      const CancelFlag* abandon) {
    return gets_.get(c, offset, buf, deadline, abandon);
  }
  // Blocks of the range not in the cache; nullopt when the cache cannot say.
  std::optional<std::vector<std::uint32_t>> missing_blocks(const FileContent& c, BlockRange r);

  bool stopping() const;
  // Ends the workers; flights still queued fail as interrupted.
  void shutdown();

 private:
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

  void prefetch_locked(const FileContent& c, BlockRange range);
  std::shared_ptr<Flight> start_flight_locked(const FileContent& c, BlockRange r, bool demand);
  void worker();
  void run(const std::shared_ptr<Flight>& f);
  void run_buffer_piece(const std::shared_ptr<Flight>& f);
  // `abandon` (may be null) ends a download nobody waits for any more.
  Expected<Stored, ReadError> download(const FileContent& c, BlockRange r, Deadline deadline,
                                       const CancelFlag* abandon);
  void finish(const std::shared_ptr<Flight>& f, std::optional<ReadError> error,
              Stored stored = Stored::kCached);

  // Blocks per ranged GET for a download of `blocks` blocks over `connections` connections
  // (0: every worker), from the rate measured lately (request_size.h).
  std::uint32_t request_blocks(std::uint64_t blocks, unsigned connections = 0) const;

  cache::BlockStore& store_;
  ReadPathStats& stats_;
  RangedGets gets_;  // thread-safe itself
  const FetcherConfig config_;
  const OnComplete on_complete_;
  const OnFetched on_fetched_;

  // Lock order: mu_ -> a Flight's mu (never the other way); mu_ is never held during I/O.
  mutable std::mutex mu_;  // guards everything below up to progress_mu_
  std::condition_variable work_cv_;
  std::unordered_map<Key, std::shared_ptr<Flight>, KeyHash> inflight_;
  std::deque<std::shared_ptr<Flight>> demand_q_;
  std::deque<std::shared_ptr<Flight>> prefetch_q_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;

  // Readers waiting for flights sleep here; every finished flight wakes them. A leaf lock.
  std::mutex progress_mu_;
  std::condition_variable progress_cv_;
};

}  // namespace whfs::reader
