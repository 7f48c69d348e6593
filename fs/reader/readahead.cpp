#include "fs/reader/readahead.h"

#include <algorithm>

namespace whfs::reader {

std::optional<Prefetch> Readahead::on_read(std::uint64_t offset, std::uint64_t length) {
  const std::uint64_t end = std::min(size_, offset + length);
  const bool first = first_;
  first_ = false;
  if (whole_file_) return std::nullopt;
  if (first && wheel_ && size_ <= config_.whole_file_max &&
      offset + config_.zip_tail >= size_) {
    whole_file_ = true;
    return Prefetch{0, size_};
  }
  // Sequential: this read starts where the last one ended (or overlaps its end a little, as
  // the kernel's page-aligned readahead does).
  const bool sequential = !first && offset <= next_ && next_ <= end;
  if (sequential || (first && offset == 0)) {
    window_ = window_ == 0 ? config_.initial_window : std::min(window_ * 2, config_.max_window);
  } else {
    window_ = 0;
    fetched_until_ = 0;
  }
  next_ = end;
  if (window_ == 0) return std::nullopt;
  const std::uint64_t want_until = std::min(size_, end + window_);
  const std::uint64_t from = std::max(fetched_until_, end);
  if (want_until <= from) return std::nullopt;
  fetched_until_ = want_until;
  return Prefetch{from, want_until - from};
}

}  // namespace whfs::reader
