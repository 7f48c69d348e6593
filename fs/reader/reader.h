#pragma once
// The read path: a read is served from the cache's blocks (straight from its memory map), and
// missing blocks are fetched first (fetcher.h). Sequential readers and wheels opened by zip
// readers get readahead (readahead.h). A read never hangs: past its deadline it fails.

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>

#include "cache/block_store.h"
#include "cache/function_ref.h"
#include "fs/common/expected.h"
#include "fs/hub/hub_client.h"
#include "fs/reader/fetcher.h"
#include "fs/reader/readahead.h"

namespace whfs::reader {

struct ReaderConfig {
  FetcherConfig fetcher;
  ReadaheadConfig readahead;
};

// One open file: its content and readahead state.
class OpenFile {
 public:
  OpenFile(FileContent content, Readahead ra) : content_(std::move(content)), ra_(ra) {}
  const FileContent& content() const { return content_; }

 private:
  friend class Reader;
  FileContent content_;
  std::mutex mu_;  // guards ra_
  Readahead ra_;
  bool pinned_ = false;
};

class Reader {
 public:
  // Receives the bytes of a read as pieces; they are valid only during the call.
  using ReplyFn = cache::FunctionRef<void(std::span<const iovec>)>;

  Reader(cache::BlockStore& store, hub::HubClient& hub, ReaderConfig config);

  // Pins the content in the cache while open; `is_wheel` enables the zip-reader prefetch.
  std::unique_ptr<OpenFile> open(const FileContent& content, bool is_wheel);
  void release(OpenFile& file);

  // Reads up to `size` bytes at `offset` (fewer at the end of the file) and hands them to
  // `reply` exactly once on success. `reply` is the last use of `file`: once it returns,
  // `file` may already be released and destroyed (by the kernel's RELEASE, on another thread).
  Expected<void, ReadError> read(OpenFile& file, std::uint64_t offset, std::size_t size,
                                 Deadline deadline, ReplyFn reply);

  FetcherStats stats() const { return fetcher_.stats(); }
  void shutdown() { fetcher_.shutdown(); }

 private:
  Expected<void, ReadError> read_direct(const FileContent& c, std::uint64_t offset,
                                        std::size_t size, Deadline deadline, ReplyFn reply);

  cache::BlockStore& store_;
  hub::HubClient& hub_;
  ReaderConfig config_;
  Fetcher fetcher_;
};

}  // namespace whfs::reader
