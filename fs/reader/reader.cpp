#include "fs/reader/reader.h"

#include <spdlog/spdlog.h>

#include <optional>
#include <utility>
#include <vector>

namespace whfs::reader {

Reader::Reader(cache::BlockStore& store, hub::HubClient& hub, ReaderConfig config)
    : store_(store), hub_(hub), config_(config), fetcher_(store, hub, config.fetcher) {}

std::unique_ptr<OpenFile> Reader::open(const FileContent& content, bool is_wheel) {
  auto f =
      std::make_unique<OpenFile>(content, Readahead(config_.readahead, content.size, is_wheel));
  if (auto r = store_.pin(content.id); r) {
    f->pinned_ = true;
  } else {
    spdlog::warn("{}: cannot pin its cache entry ({}); it may be evicted while open", content.path,
                 r.error().message);
  }
  return f;
}

void Reader::release(OpenFile& file) {
  if (file.pinned_) store_.unpin(file.content_.id);
  file.pinned_ = false;
}

Expected<void, ReadError> Reader::read(OpenFile& file, std::uint64_t offset, std::size_t size,
                                       Deadline deadline, ReplyFn reply) {
  const FileContent& c = file.content_;
  if (offset >= c.size || size == 0) {
    reply(std::span<const iovec>());
    return {};
  }
  size = static_cast<std::size_t>(std::min<std::uint64_t>(size, c.size - offset));
  // Checked before downloading only: what the cache serves has been verified.
  const auto quarantined = [&]() -> std::optional<ReadError> {
    if (!fetcher_.quarantined(c.id)) return std::nullopt;
    return ReadError{ReadError::Kind::kCorrupt, c.path + ": its download did not match its hash"};
  };
  const std::uint32_t bs = store_.block_size();
  // The readahead this read starts is queued after the read's own downloads (a window that
  // begins inside the read's last block would otherwise make the read wait for all of it).
  std::optional<BlockRange> ahead;
  {
    std::lock_guard lock(file.mu_);
    if (auto pf = file.ra_.on_read(offset, size)) {
      ahead = blocks_for(pf->offset, pf->length, c.size, bs);
    }
  }
  const auto start_ahead = [&] {
    if (ahead) fetcher_.prefetch(c, *std::exchange(ahead, std::nullopt));
  };
  const BlockRange range = blocks_for(offset, size, c.size, bs);
  const std::uint64_t end = offset + size;
  for (int attempt = 0; attempt < 3; ++attempt) {
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
                                      on_block, cache::BlockStore::ReadMode::kServable);
    if (replied) return {};
    if (!missing) {
      spdlog::warn("{}: cache read failed ({}); reading from the Hub", c.path,
                   missing.error().message);
      break;
    }
    // (A complete content not verified yet shows all its blocks as missing: the fetch
    // verifies it.)
    if (auto e = quarantined()) return unexpected(*e);
    auto r = fetcher_.fetch(c, *missing, deadline, std::exchange(ahead, std::nullopt));
    if (!r) {
      // A download this read joined may have ended with an earlier reader's deadline: try
      // again while this read still has time.
      if (r.error().kind == ReadError::Kind::kTimedOut && Clock::now() < deadline) continue;
      return unexpected(r.error());
    }
    if (auto e = quarantined()) return unexpected(*e);
    if (*r == Stored::kNotKept) break;  // downloaded, not kept: read directly, once
  }
  start_ahead();
  if (Clock::now() >= deadline) {
    return unexpected(
        ReadError{ReadError::Kind::kTimedOut, c.path + ": no data before the read deadline"});
  }
  // The cache could not keep the blocks (full of open files, or failing): read directly.
  return read_direct(c, offset, size, deadline, reply);
}

Expected<void, ReadError> Reader::read_direct(const FileContent& c, std::uint64_t offset,
                                              std::size_t size, Deadline deadline, ReplyFn reply) {
  std::vector<std::byte> buf(size);
  auto r = hub_.read_range(hub::FileRef{c.commit, c.path, c.size}, offset, buf, deadline);
  if (!r) {
    const auto kind = r.error().kind == hub::HubErrorKind::kTimeout ? ReadError::Kind::kTimedOut
                                                                    : ReadError::Kind::kIo;
    return unexpected(ReadError{kind, r.error().describe()});
  }
  const iovec one{buf.data(), buf.size()};
  reply(std::span<const iovec>(&one, 1));
  return {};
}

}  // namespace whfs::reader
