#include "fs/reader/readahead.h"

#include <algorithm>

namespace whfs::reader {

std::optional<Prefetch> Readahead::on_read(std::uint64_t offset, std::uint64_t length) {
  const std::uint64_t end = std::min(size_, offset + length);
  const bool first = first_;
  first_ = false;
  if (whole_file_) return std::nullopt;
  if (first && wheel_ && size_ <= config_.whole_file_max && offset + config_.zip_tail >= size_) {
    whole_file_ = true;
    return Prefetch{0, size_};
  }
  // Sequential: this read starts near where the reads so far ended. The kernel sends several
  // reads of a file at once (its own readahead, FUSE async reads) and they reach the request
  // threads in any order, so "near" allows some slack on both sides, scaled to the read size
  // so that small random reads rarely look sequential by chance.
  const std::uint64_t slack =
      std::min(config_.sequential_slack, std::max<std::uint64_t>(8 * length, 128 << 10));
  const bool sequential = !first && offset + slack >= next_ && offset <= next_ + slack;
  if (sequential || (first && offset == 0)) {
    ++run_;
    next_ = std::max(next_, end);
  } else {
    run_ = 0;
    window_ = 0;
    fetched_until_ = 0;
    next_ = end;
  }
  // A read from the start, or a second sequential read in a row, starts the window.
  if (run_ == 0 || (run_ == 1 && offset != 0)) return std::nullopt;
  // Quadrupling reaches a full window in three reads: a reader that keeps going gets every
  // connection soon, which is what a CDN that caps each stream rewards.
  window_ = window_ == 0 ? config_.initial_window : std::min(window_ * 4, config_.max_window);
  const std::uint64_t want_until = std::min(size_, end + window_);
  const std::uint64_t from = std::max(fetched_until_, end);
  // Ask in pieces of at least one download request, so that downloads are large requests
  // rather than one per kernel read, and the window stays full as requests complete.
  if (want_until <= from ||
      (fetched_until_ > end && want_until - from < config_.batch && want_until < size_)) {
    return std::nullopt;
  }
  fetched_until_ = want_until;
  return Prefetch{from, want_until - from};
}

}  // namespace whfs::reader
