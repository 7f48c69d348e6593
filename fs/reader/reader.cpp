#include "fs/reader/reader.h"

#include <spdlog/spdlog.h>

#include <optional>
#include <utility>
#include <vector>

namespace whfs::reader {
namespace {

void reply_from_memory(const MemoryContent& m, std::uint64_t offset, std::size_t size,
                       Reader::ReplyFn reply) {
  const iovec one{const_cast<std::byte*>(m.data.get() + offset), size};
  reply(std::span<const iovec>(&one, 1));
}

}  // namespace

Reader::Reader(cache::BlockStore& store, hub::HubClient& hub, const cache::AccessScope& scope,
               ReaderConfig config)
    : store_(store), config_(config), fetcher_(store, hub, scope, config.fetcher) {}

std::unique_ptr<OpenFile> Reader::open(const FileContent& content, bool is_wheel) {
  auto f =
      std::make_unique<OpenFile>(content, Readahead(config_.readahead, content.size, is_wheel));
  if (auto r = store_.pin(content.id); r) {
    f->pinned_ = true;
  } else {
    spdlog::debug("{}: cannot pin its cache entry ({}); it may be evicted while open", content.path,
                  r.error().message);
  }
  return f;
}

void Reader::release(OpenFile& file) {
  if (file.pinned_) store_.unpin(file.content_.id);
  file.pinned_ = false;
}

Expected<void, ReadError> Reader::read(OpenFile& file, std::uint64_t offset, std::size_t size,
                                       const WaitPolicy& wait, ReplyFn reply) {
  const auto t0 = Clock::now();
  bool waited = false;
  auto r = read_once(file, offset, size, wait, reply, waited);
  read_latency_.observe(Clock::now() - t0);
  reads_.fetch_add(1, std::memory_order_relaxed);
  if (!r) {
    read_errors_.fetch_add(1, std::memory_order_relaxed);
  } else if (waited) {
    read_misses_.fetch_add(1, std::memory_order_relaxed);
  }
  return r;
}

ReadStats Reader::read_stats() const {
  ReadStats s;
  s.reads = reads_.load(std::memory_order_relaxed);
  s.misses = read_misses_.load(std::memory_order_relaxed);
  s.errors = read_errors_.load(std::memory_order_relaxed);
  s.hits = s.reads - s.misses - s.errors;
  return s;
}

Expected<void, ReadError> Reader::read_once(OpenFile& file, std::uint64_t offset, std::size_t size,
                                            const WaitPolicy& wait, ReplyFn reply, bool& waited) {
  const FileContent& c = file.content_;
  if (offset >= c.size || size == 0) {
    reply(std::span<const iovec>());
    return {};
  }
  size = static_cast<std::size_t>(std::min<std::uint64_t>(size, c.size - offset));
  const bool streaming = config_.fetcher.serving == Serving::kStreaming;  // (readahead)
  const std::uint32_t bs = store_.block_size();
  std::shared_ptr<const MemoryContent> memory;
  // Streaming: the readahead this read starts is queued after the read's own downloads (a
  // window that begins inside the read's last block would otherwise make the read wait for
  // all of it). Verified serving fetches the whole file at the first read instead.
  std::optional<BlockRange> ahead;
  {
    std::lock_guard lock(file.mu_);
    memory = file.memory_;
    if (!memory && streaming) {
      if (auto pf = file.ra_.on_read(offset, size)) {
        ahead = blocks_for(pf->offset, pf->length, c.size, bs);
      }
    }
  }
  if (memory) {
    reply_from_memory(*memory, offset, size, reply);
    return {};
  }
  const auto start_ahead = [&] {
    if (ahead) fetcher_.prefetch(c, *std::exchange(ahead, std::nullopt));
  };
  const BlockRange range = blocks_for(offset, size, c.size, bs);
  const std::uint64_t end = offset + size;
  for (int attempt = 0; attempt < 3; ++attempt) {
    // Ask the gate; read the store, or ensure-then-read.
    if (const Verdict v = fetcher_.verdict(c.id); v.kind == Verdict::Kind::kFromCache) {
      std::vector<iovec> iov;
      iov.reserve(range.count);
      bool replied = false;
      auto on_block = [&](std::uint32_t index, std::span<const std::byte> bytes) {
        const std::uint64_t block_start = static_cast<std::uint64_t>(index) * bs;
        const std::uint64_t from = std::max(offset, block_start) - block_start;
        const std::uint64_t to =
            std::min<std::uint64_t>(end, block_start + bytes.size()) - block_start;
        if (to <= from || iov.size() != index - range.first) return;  // a gap: not servable now
        iov.push_back(iovec{const_cast<std::byte*>(bytes.data() + from), to - from});
        if (iov.size() == range.count) {
          // Nothing of `file` may be touched once the reply is out: the kernel may send the
          // RELEASE that destroys it at once, to another thread. The read's own blocks are all
          // here, so its readahead goes first.
          start_ahead();
          reply(iov);  // inside the cache's read transaction: the bytes are still mapped
          replied = true;
        }
      };
      // The store gets a copy of the id: the reply inside may destroy `file`, and `c` with it.
      auto missing = store_.read_blocks(cache::ContentId(c.id), c.size, range.first, range.count,
                                        on_block, v.mode);
      if (replied) return {};
      if (!missing) {
        spdlog::warn("{}: cache read failed ({})", c.path, missing.error().message);
      }
    }
    waited = true;
    auto source = fetcher_.ensure(c, range, wait, std::exchange(ahead, std::nullopt));
    if (!source) return unexpected(source.error());
    if (source->memory) {
      memory = std::move(source->memory);
      {
        std::lock_guard lock(file.mu_);
        file.memory_ = memory;
      }
      reply_from_memory(*memory, offset, size, reply);
      return {};
    }
  }
  start_ahead();
  return unexpected(
      ReadError{FsErrorKind::kIo, c.path + ": its blocks left the cache while it was read"});
}

}  // namespace whfs::reader
