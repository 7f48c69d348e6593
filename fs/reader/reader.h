#pragma once
// The read path: a read asks the serving gate (serving_gate.h) whether the cache's blocks may be
// served now; if so it is served from them (straight from the cache's memory map), else the
// fetcher (fetcher.h) makes them servable first and hands back the gate's verdict, or a
// content verified in memory when the cache cannot keep it. Streaming readers get readahead
// (readahead.h). A read never hangs: it fails once its downloads stop making progress, or when
// its caller goes away.

#include <sys/uio.h>

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
#include "fs/reader/read_stats.h"
#include "fs/reader/readahead.h"
#include "fs/reader/serving_gate.h"

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

class Reader {
 public:
  // Receives the bytes of a read as pieces; they are valid only during the call.
  using ReplyFn = FunctionRef<void(std::span<const iovec>)>;

  // `gate`: who may serve what (serving_gate.h); `stats`: where the read path records (counts
  // of reads, hits, misses and errors, their latency, and the fetcher's figures). Both are the
  // daemon's, and outlive the reader.
  Reader(cache::BlockStore& store, hub::HubClient& hub, ServingGate& gate, ReadPathStats& stats,
         ReaderConfig config);

  // A read tries the cache, then asks the fetcher to make it servable, at most this many
  // times: a cache that loses the blocks between ensure() and the read (evicted by another
  // process) is asked again, then the read fails with EIO. The read path's only retry of a
  // whole read (the fetcher makes one pass; downloads retry by progress, ranged_gets.h).
  static constexpr int kEnsureAttempts = 3;

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
  // Whether the content matched its hash, as the gate counts it: the cache holds it whole,
  // recorded as verified, and the gate serves that record (believed, or hashed here).
  bool verified(const FileContent& content) {
    if (!gate_.serves_verified(content.id)) return false;
    auto state = store_.content_state(content.id);
    return state && *state && (*state)->verified;
  }

  void shutdown() { fetcher_.shutdown(); }

 private:
  Expected<void, ReadError> read_once(OpenFile& file, std::uint64_t offset, std::size_t size,
                                      const WaitPolicy& wait, ReplyFn reply, bool& waited);

  cache::BlockStore& store_;
  ServingGate& gate_;
  ReadPathStats& stats_;
  ReaderConfig config_;
  Fetcher fetcher_;
};

}  // namespace whfs::reader
