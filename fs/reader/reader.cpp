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

Reader::Reader(cache::BlockStore& store, hub::HubClient& hub, ServingGate& gate,
               ReadPathStats& stats, ReaderConfig config)
    : store_(store),
      gate_(gate),
      stats_(stats),
      config_(config),
      fetcher_(store, hub, gate, stats, config.fetcher) {}

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
  stats_.read_latency.observe(Clock::now() - t0);
  stats_.reads.add();
  if (!r) {
    stats_.read_errors.add();
  } else if (waited) {
    stats_.read_misses.add();
  }
  return r;
}

Expected<void, ReadError> Reader::read_once(OpenFile& file, std::uint64_t offset, std::size_t size,
                                            const WaitPolicy& wait, ReplyFn reply, bool& waited) {
  const FileContent& c = file.content_;
  if (offset >= c.size || size == 0) {
    reply(std::span<const iovec>());
    return {};
  }
  size = static_cast<std::size_t>(std::min<std::uint64_t>(size, c.size - offset));
  const std::uint32_t bs = store_.block_size();
  std::shared_ptr<const MemoryContent> memory;
  // Streaming: the readahead this read starts is queued after the read's own downloads (a
  // window that begins inside the read's last block would otherwise make the read wait for
  // all of it). Verified serving fetches the whole file at the first read instead.
  std::optional<BlockRange> ahead;
  {
    std::lock_guard lock(file.mu_);
    memory = file.memory_;
    if (!memory && gate_.streaming()) {
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
  // Serves the read from the cache in `mode`; false when a block of it is not servable now.
  const auto from_cache = [&](cache::BlockStore::ReadMode mode) {
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
                                      on_block, mode);
    if (!missing && !replied) {
      spdlog::warn("{}: cache read failed ({})", c.path, missing.error().message);
    }
    return replied;
  };
  // The gate's verdict first (a warm read: one question to the gate, one to the cache); then
  // the fetcher's, each time it made the read servable.
  Verdict verdict = gate_.verdict(c.id);
  for (int attempt = 0;; ++attempt) {
    if (verdict.from_cache() && from_cache(verdict.mode)) return {};
    if (attempt == kEnsureAttempts) break;
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
    verdict = source->verdict;
  }
  start_ahead();
  return unexpected(
      ReadError{FsErrorKind::kIo, c.path + ": its blocks left the cache while it was read"});
}

}  // namespace whfs::reader
