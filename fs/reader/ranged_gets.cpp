#include "fs/reader/ranged_gets.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <optional>

namespace whfs::reader {
namespace {

// What a Hub failure means for the bytes of a file the listing has (a 404 is EIO: the Hub
// lost them), decided by the Hub's one mapping.
ReadError from_hub(const hub::HubError& e) { return hub::to_fs_error(e, hub::Asked::kContent); }

}  // namespace

Expected<void, ReadError> RangedGets::counted(const FileContent& c, std::uint64_t offset,
                                              std::uint64_t length, Deadline deadline,
                                              const CancelFlag* abandon,
                                              hub::HubClient::ChunkFn consume) {
  // Counted as the bytes arrive, every 64 KiB or every second, whichever comes first (a lock
  // per libcurl write would cost more than it tells): for `wheelhouse status`, the metrics,
  // and the patience of the readers waiting for them (a slow download is progress too).
  Transfers& transfers = stats_.transfers;
  transfers.open(c.id, c.path, c.size);
  std::uint64_t arrived = 0, counted = 0;
  auto last_count = Clock::now();
  auto count = [&](std::span<const std::byte> bytes) {
    consume(bytes);
    arrived += bytes.size();
    if (arrived >= counted + (64u << 10) || arrived == length) {
      transfers.received(c.id, arrived - counted);
      counted = arrived;
      last_count = Clock::now();
    } else if (const auto now = Clock::now(); now - last_count >= std::chrono::seconds(1)) {
      transfers.received(c.id, arrived - counted);
      counted = arrived;
      last_count = now;
    }
  };
  // Each call of the Hub gets `patience_` (its retries included): one that moved no byte in
  // that time fails with the Hub's cause; one that moved bytes is progress, and the rest is
  // asked for at once. A slow link is never failed for being slow, a dead one is named.
  const auto t0 = Clock::now();
  Expected<void, hub::HubError> got;
  while (true) {
    const std::uint64_t before = arrived;
    got = hub_.stream_range(hub::FileRef{c.commit, c.path, c.size}, offset + arrived,
                            length - arrived, std::min(deadline, Clock::now() + patience_), abandon,
                            count);
    if (got || arrived == before || Clock::now() >= deadline) break;
    if (abandon != nullptr && abandon->cancelled()) break;
    if (got.error().kind != hub::HubErrorKind::kTimeout &&
        got.error().kind != hub::HubErrorKind::kUnavailable) {
      break;
    }
    spdlog::debug("{}: {} after {} bytes; asking for the rest", c.path, got.error().describe(),
                  arrived - before);
  }
  const auto took = Clock::now() - t0;
  stats_.download_latency.observe(took);
  if (got) sizer_.observe(length, took);
  if (got && counted < length) transfers.received(c.id, length - counted);
  transfers.close(c.id);
  stats_.requests.add();
  if (got) {
    stats_.bytes.add(length);
    return {};
  }
  stats_.download_errors.add();
  ReadError e = from_hub(got.error());
  if ((abandon == nullptr || !abandon->cancelled()) &&
      got.error().kind != hub::HubErrorKind::kCancelled) {  // (a shutdown: nothing went wrong)
    spdlog::error("{}: download of bytes {}-{} failed: {}", c.path, offset, offset + length - 1,
                  got.error().describe());
    e.logged = true;
  }
  return unexpected(std::move(e));
}

Expected<void, ReadError> RangedGets::get(const FileContent& c, std::uint64_t offset,
                                          std::span<std::byte> buf, Deadline deadline,
                                          const CancelFlag* abandon) {
  std::size_t filled = 0;
  auto fill = [&](std::span<const std::byte> bytes) {
    std::memcpy(buf.data() + filled, bytes.data(), bytes.size());
    filled += bytes.size();
  };
  return counted(c, offset, buf.size(), deadline, abandon, fill);
}

Expected<cache::Result<cache::ContentState>, ReadError> RangedGets::get_and_put(
    const FileContent& c, BlockRange r, Deadline deadline, const CancelFlag* abandon) {
  const std::uint64_t bs = store_.block_size();
  const std::uint64_t offset = static_cast<std::uint64_t>(r.first) * bs;
  const std::uint64_t length = std::min(c.size, static_cast<std::uint64_t>(r.end()) * bs) - offset;
  // Whole blocks are stored as they arrive, kStreamPutBytes at a time, from a buffer of this
  // thread's that holds that much and one block more: a buffer of the whole request (4 MiB per
  // worker) would be first touched by each worker's first download (page faults: a tenth of a
  // cold read's CPU) and its bytes would have left the CPU's cache before they were stored. Blocks
  // of a transfer that fails midway stay stored; the retry asks for the rest.
  const auto cap = static_cast<std::size_t>(((kStreamPutBytes + bs - 1) / bs + 1) * bs);
  thread_local std::unique_ptr<std::byte[]> staging;
  thread_local std::size_t staging_size = 0;
  if (staging_size < cap) {
    staging.reset(new std::byte[cap]);  // not value-initialised
    staging_size = cap;
  }
  std::byte* const buf = staging.get();
  std::uint64_t stored = 0;  // bytes of the range put (or dropped after a refusal)
  std::size_t fill = 0;      // bytes in the buffer: the range's bytes from `stored` on
  std::optional<cache::Result<cache::ContentState>> put;
  auto store = [&](std::size_t n) {  // whole blocks, or the range's last bytes
    if (!put || *put) {
      put = store_.put_blocks(c.id, c.size, r.first + static_cast<std::uint32_t>(stored / bs),
                              std::span<const std::byte>(buf, n));
    }  // (after a refusal the rest is dropped: the memory path takes over at the end)
    stored += n;
    std::memmove(buf, buf + n, fill - n);
    fill -= n;
  };
  auto take = [&](std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      const std::size_t n = std::min(bytes.size(), cap - fill);
      std::memcpy(buf + fill, bytes.data(), n);
      fill += n;
      bytes = bytes.subspan(n);
      const bool last = stored + fill == length;
      const std::size_t whole = last ? fill : fill / bs * bs;
      if (whole >= kStreamPutBytes || (last && whole > 0)) store(whole);
    }
  };
  if (auto got = counted(c, offset, length, deadline, abandon, take); !got) {
    return unexpected(got.error());
  }
  if (!put) put = store_.put_blocks(c.id, c.size, r.first, {});  // an empty range: the state
  return std::move(*put);
}

}  // namespace whfs::reader
