#pragma once
// StoredCopy: copies bytes read in a txn out of LMDB's data file with preadv, rather than
// through the memory map.
//
// Why: a value read in a txn points into the map, and the first touch of each 4 KiB page of a
// mapping costs this process a page fault (on the VMs we measure, 1.0-1.25 us a page: touching
// the 65,536 pages of 256 MiB just written took 66-82 ms). A cold read stores its bytes in new
// pages and hashes them before it serves any, so the hash is on the read's critical path. The
// kernel copies the same pages out of its page cache with no fault (18 GB/s here), into a
// buffer that stays mapped. Measured on a cold 256 MiB read: the hash 1.0 -> 1.45 GB/s of its
// thread's CPU. (Serving READs the same way was slower: the FUSE reply's own copy out of the
// map costs less than one more copy; tests/bench/README.md.)
//
// The bytes are the same: LMDB writes its pages with pwrite(2) (no MDB_WRITEMAP), the map is
// MAP_SHARED over the same page cache, and pages a txn can see are not reused before it ends.
// So every copy happens before the txn ends (flush()); bytes outside the map, or a read that
// fails, are copied from the map instead.

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cache/lmdb.h"

namespace whfs::cache {

class StoredCopy {
 public:
  explicit StoredCopy(const lmdb::Env& env);
  StoredCopy(const StoredCopy&) = delete;
  StoredCopy& operator=(const StoredCopy&) = delete;

  // Copies `from` (bytes of a value read in the current txn) to `to` (room for from.size()),
  // now or by the next flush(). Bytes that lie close together in the file, in file order,
  // are read by one preadv.
  void add(std::span<const std::byte> from, std::byte* to);
  // Completes every copy added; before the txn ends.
  void flush();
  // preadv calls made so far.
  std::uint64_t reads() const { return reads_; }

 private:
  static constexpr std::size_t kMaxIov = 64;
  static constexpr std::uint64_t kMaxGap = 16u << 10;  // read and dropped between two values
  static constexpr std::uint64_t kMaxRun = 4u << 20;   // bytes of the file per preadv
  struct Piece {
    std::span<const std::byte> from;
    std::byte* to;
  };

  const std::byte* const map_;
  const std::size_t map_size_;
  const int fd_;
  std::vector<Piece> pending_;
  std::vector<iovec> iov_;
  std::uint64_t start_ = 0, end_ = 0;  // the file's bytes [start_, end_) that iov_ reads
  std::uint64_t reads_ = 0;
};

}  // namespace whfs::cache
