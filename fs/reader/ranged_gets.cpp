#include "fs/reader/ranged_gets.h"

#include <spdlog/spdlog.h>

#include <optional>

namespace whfs::reader {
namespace {

// What a Hub failure means for the bytes of a file the listing has (a 404 is EIO: the Hub
// lost them), decided by the Hub's one mapping.
ReadError from_hub(const hub::HubError& e) { return hub::to_fs_error(e, hub::Asked::kContent); }

}  // namespace

void RangedGets::add_to(FetcherStats& s) const {
  s.requests += requests_.load();
  s.bytes += bytes_.load();
  s.errors += errors_.load();
}

Expected<void, ReadError> RangedGets::get(const FileContent& c, std::uint64_t offset,
                                          std::span<std::byte> buf, Deadline deadline,
                                          const CancelFlag* abandon,
                                          const hub::HubClient::FillFn* on_fill) {
  // Counted as the bytes arrive (every 64 KiB at most once: a lock per libcurl write would
  // cost more than it tells), for `wheelhouse status` and the metrics.
  transfers_.open(c.id, c.path, c.size);
  std::size_t counted = 0;
  auto count_fn = [&](std::size_t filled) {
    if (filled >= counted + (64u << 10) || (filled == buf.size() && filled > counted)) {
      transfers_.received(c.id, filled - counted);
      counted = filled;
    }
    if (on_fill != nullptr) (*on_fill)(filled);
  };
  const hub::HubClient::FillFn counting = count_fn;
  const auto t0 = Clock::now();
  auto got = hub_.read_range(hub::FileRef{c.commit, c.path, c.size}, offset, buf, deadline, abandon,
                             &counting);
  latency_.observe(Clock::now() - t0);
  if (got && counted < buf.size()) transfers_.received(c.id, buf.size() - counted);
  transfers_.close(c.id);
  requests_++;
  if (got) {
    bytes_ += buf.size();
  } else {
    errors_++;
  }
  if (!got) {
    ReadError e = from_hub(got.error());
    if (abandon == nullptr || !abandon->cancelled()) {
      spdlog::error("{}: download of bytes {}-{} failed: {}", c.path, offset,
                    offset + buf.size() - 1, got.error().describe());
      e.logged = true;
    }
    return unexpected(std::move(e));
  }
  return {};
}

Expected<cache::Result<cache::ContentState>, ReadError> RangedGets::get_and_put(
    const FileContent& c, BlockRange r, Deadline deadline, const CancelFlag* abandon) {
  const std::uint64_t bs = store_.block_size();
  const std::uint64_t offset = static_cast<std::uint64_t>(r.first) * bs;
  const std::uint64_t end = std::min(c.size, static_cast<std::uint64_t>(r.end()) * bs);
  // Each worker reuses one buffer: a fresh 4 MiB allocation per request costs a zero-fill and
  // page faults on every download.
  thread_local std::unique_ptr<std::byte[]> scratch;
  thread_local std::size_t scratch_size = 0;
  if (scratch_size < end - offset) {
    scratch.reset(new std::byte[end - offset]);  // not value-initialised
    scratch_size = end - offset;
  }
  const std::span<std::byte> buf(scratch.get(), end - offset);
  // Whole blocks are stored as they arrive, a few hundred KiB at a time, while they are still
  // in the CPU's cache: the block checksum, the copy into LMDB's page and (for the front of the
  // file) the running SHA-256 then read them from there, not from memory (issue 17). Blocks
  // of a transfer that fails midway stay stored; the retry asks for the rest.
  std::uint64_t stored = 0;  // bytes of buf put so far (whole blocks)
  std::optional<cache::Result<cache::ContentState>> put;
  auto store = [&](std::uint64_t upto) {
    if (put && !*put) return;  // the cache refused: the memory path takes over at the end
    put = store_.put_blocks(c.id, c.size, r.first + static_cast<std::uint32_t>(stored / bs),
                            buf.subspan(stored, upto - stored));
    if (*put) stored = upto;
  };
  auto on_fill_fn = [&](std::size_t filled) {
    const std::uint64_t whole = filled == buf.size() ? filled : filled / bs * bs;
    if (whole >= stored + kStreamPutBytes || (whole == buf.size() && whole > stored)) store(whole);
  };
  const hub::HubClient::FillFn on_fill = on_fill_fn;
  const auto got = get(c, offset, buf, deadline, abandon, &on_fill);
  if (!got) return unexpected(got.error());
  if (stored < buf.size() && !(put && !*put)) store(buf.size());
  return std::move(*put);
}

}  // namespace whfs::reader
