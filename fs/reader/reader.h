#pragma once
// The read path: a read asks the serving gate (serving_gate.h) whether the cache's blocks may be
// served now; if so it is served from them (straight from the cache's memory map), else the
// fetcher (fetcher.h) makes them servable first, or hands over a content verified in memory
// when the cache cannot keep it. Streaming readers get readahead (readahead.h). A read never hangs:
// it fails once its downloads stop making progress, or when its caller goes away.

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "cache/block_store.h"
#include "fs/common/expected.h"
#include "fs/common/function_ref.h"
#include "fs/hub/hub_client.h"
#include "fs/reader/fetcher.h"
#include "fs/reader/readahead.h"

namespace whfs::reader {

struct ReaderConfig {
  FetcherConfig fetcher;
  ReadaheadConfig readahead;  // streaming only: verified serving fetches whole files
};

// One open file: its content, its readahead state, and its verified bytes when they live in
// memory rather than in the cache.
class OpenFile {
 public:
  OpenFile(FileContent content, Readahead ra) : content_(std::move(content)), ra_(ra) {}
  const FileContent& content() const { return content_; }

 private:
  friend class Reader;
  FileContent content_;
  std::mutex mu_;  // guards ra_ and memory_
  Readahead ra_;
  std::shared_ptr<const MemoryContent> memory_;
  bool pinned_ = false;
};

// Reads that reached the daemon (the kernel's page cache answers the rest): hits were
// served from the cache or memory at once, misses waited for the fetcher (a download, a
// verification), errors failed. hits + misses + errors == reads.
struct ReadStats {
  std::uint64_t reads = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t errors = 0;
};

class Reader {
 public:
  // Receives the bytes of a read as pieces; they are valid only during the call.
  using ReplyFn = FunctionRef<void(std::span<const iovec>)>;

  // `scope`: whose cached bytes this process may read (fetcher.h).
  Reader(cache::BlockStore& store, hub::HubClient& hub, const cache::AccessScope& scope,
         ReaderConfig config);

  // Pins the content in the cache while open; `is_wheel` enables the zip-reader prefetch.
  std::unique_ptr<OpenFile> open(const FileContent& content, bool is_wheel);
  void release(OpenFile& file);

  // Reads up to `size` bytes at `offset` (fewer at the end of the file) and hands them to
  // `reply` exactly once on success. `reply` is the last use of `file`: once it returns,
  // `file` may already be released and destroyed (by the kernel's RELEASE, on another thread).
  Expected<void, ReadError> read(OpenFile& file, std::uint64_t offset, std::size_t size,
                                 const WaitPolicy& wait, ReplyFn reply);

  // Bytes of a content for the daemon's own use, possibly before the content is verified (see
  // Fetcher::peek): never for a reader.
  Expected<std::string, ReadError> peek(const FileContent& content, std::uint64_t offset,
                                        std::size_t size, const WaitPolicy& wait) {
    return fetcher_.peek(content, offset, size, wait);
  }
  // Whether the cache holds the whole content and it matched its hash.
  bool verified(const FileContent& content) {
    auto state = store_.content_state(content.id);
    return state && *state && (*state)->verified;
  }

  FetcherStats stats() const { return fetcher_.stats(); }
  ReadStats read_stats() const;
  const LatencyHistogram& read_latency() const { return read_latency_; }
  const LatencyHistogram& download_latency() const { return fetcher_.download_latency(); }
  std::vector<Transfer> transfers() { return fetcher_.transfers().snapshot(); }
  std::uint64_t received_bytes() const { return fetcher_.transfers().received_total(); }
  void set_corrupt_listener(std::function<void(const cache::ContentId&)> listener) {
    fetcher_.set_corrupt_listener(std::move(listener));
  }
  void shutdown() { fetcher_.shutdown(); }

 private:
  Expected<void, ReadError> read_once(OpenFile& file, std::uint64_t offset, std::size_t size,
                                      const WaitPolicy& wait, ReplyFn reply, bool& waited);

  cache::BlockStore& store_;
  ReaderConfig config_;
  Fetcher fetcher_;
  std::atomic<std::uint64_t> reads_{0};
  std::atomic<std::uint64_t> read_misses_{0};
  std::atomic<std::uint64_t> read_errors_{0};
  LatencyHistogram read_latency_;
};

}  // namespace whfs::reader
