#include "cache/stored_copy.h"

#include <cerrno>
#include <cstring>
#include <memory>

namespace whfs::cache {
namespace {

constexpr std::size_t kGapBuffer = 16u << 10;

// Where the bytes between two values go; nobody reads them. The thread's own: preadv writes it
// (and TSan sees those writes).
std::byte* gap_buffer() {
  thread_local std::unique_ptr<std::byte[]> buf;
  if (!buf) buf.reset(new std::byte[kGapBuffer]);
  return buf.get();
}

}  // namespace

StoredCopy::StoredCopy(const lmdb::Env& env)
    : map_(env.map_address()), map_size_(env.map_size()), fd_(env.data_fd()) {
  static_assert(kGapBuffer >= kMaxGap);
}

void StoredCopy::add(std::span<const std::byte> from, std::byte* to) {
  if (from.empty()) return;
  const bool in_file = fd_ >= 0 && map_ != nullptr && from.data() >= map_ &&
                       from.size() <= map_size_ &&
                       static_cast<std::size_t>(from.data() - map_) <= map_size_ - from.size();
  if (!in_file) {
    std::memcpy(to, from.data(), from.size());
    return;
  }
  const auto off = static_cast<std::uint64_t>(from.data() - map_);
  if (!pending_.empty() && (off < end_ || off - end_ > kMaxGap || iov_.size() + 2 > kMaxIov ||
                            off + from.size() - start_ > kMaxRun)) {
    flush();
  }
  if (pending_.empty()) {
    start_ = end_ = off;
  } else if (off > end_) {
    iov_.push_back(iovec{gap_buffer(), static_cast<std::size_t>(off - end_)});
  }
  iov_.push_back(iovec{to, from.size()});
  pending_.push_back(Piece{from, to});
  end_ = off + from.size();
}

void StoredCopy::flush() {
  if (pending_.empty()) return;
  const std::uint64_t want = end_ - start_;
  ssize_t got = -1;
  ++reads_;
  do {
    got = ::preadv(fd_, iov_.data(), static_cast<int>(iov_.size()), static_cast<off_t>(start_));
  } while (got < 0 && errno == EINTR);
  if (got < 0 || static_cast<std::uint64_t>(got) != want) {
    // (A short read at the end of a file that LMDB extends only by writing it, or an error:
    // the map holds the same bytes.)
    for (const auto& p : pending_) std::memcpy(p.to, p.from.data(), p.from.size());
  }
  pending_.clear();
  iov_.clear();
}

}  // namespace whfs::cache
