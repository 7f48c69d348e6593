#pragma once
// Whole-content hashing as blocks arrive in order, so that verifying a file downloaded front
// to back needs no second pass over it at the end (the hash runs beside the downloads). A
// running hash stands for the stored content only if no block was deleted since it started:
// deletions in this process drop it (forget), and the record's epoch (random when a record is
// created, bumped on every deletion) catches other processes' deletions.
//
// One thread at a time hashes a content; the others never wait for it. A put that finds the
// hash busy leaves a mark and returns at once: the thread hashing looks at the store once more
// before it lets go, so the blocks of that put are hashed by it (or by the next put, or by
// take_digest, which catches up first). Parallel downloads of one file (16 connections, each
// storing its blocks as they arrive) would otherwise queue behind the one that closes a gap and
// then hashes tens of MiB that arrived out of order.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/content_id.h"
#include "cache/records.h"
#include "cache/stored_copy.h"
#include "cache/txn_engine.h"
#include "fs/common/hash.h"

namespace whfs::cache {

// Hashes stored bytes read in a txn, in the order added, from copies out of the data file
// (stored_copy.h says why not through the map), kScratch bytes at a time.
class StoredBytesHasher {
 public:
  StoredBytesHasher(Hasher& hasher, const lmdb::Env& env) : hasher_(hasher), copy_(env) {}
  void add(std::span<const std::byte> payload);
  void flush();  // hashes what was added; before the txn ends

 private:
  static constexpr std::size_t kScratch = std::size_t{256} << 10;
  Hasher& hasher_;
  StoredCopy copy_;
  std::byte* scratch_ = nullptr;  // this thread's
  std::size_t used_ = 0;
};

class RunningHashes {
 public:
  RunningHashes(TxnEngine& engine, const BlockGeometry& geometry)
      : engine_(engine), geometry_(geometry) {}
  RunningHashes(const RunningHashes&) = delete;
  RunningHashes& operator=(const RunningHashes&) = delete;

  // Blocks [first, ...) of `data` were put (`exact`: these are the stored bytes) in a record
  // of `epoch`: hashes them, and the stored blocks that follow up to the next gap.
  void advance(const ContentId& id, std::uint64_t content_size, std::uint32_t first,
               std::span<const std::byte> data, bool exact, std::uint32_t epoch);
  // The digest, when the hash covers all blocks of a record of `content_size` and `epoch`
  // (stored blocks not hashed yet are hashed first); ends it.
  std::optional<std::vector<std::uint8_t>> take_digest(const ContentId& id,
                                                       std::uint64_t content_size,
                                                       std::uint32_t epoch);
  // Drops the running hash of `id` (a block of it was deleted).
  void forget(const ContentId& id);

 private:
  struct RunningHash {
    RunningHash(Hasher h, std::uint64_t size, std::uint32_t e)
        : hasher(std::move(h)), content_size(size), epoch(e) {}
    std::mutex mu;  // guards hasher and next; held while hashing (reads, never a write txn);
                    // see the lock order in lmdb_block_cache.h
    Hasher hasher;
    std::uint32_t next = 0;  // blocks hashed so far
    const std::uint64_t content_size;
    const std::uint32_t epoch;
    std::atomic<bool> more{false};  // blocks were put while another thread held mu
  };
  // Hashes the stored blocks from h.next up to the next gap (h.mu held); false when the store
  // could not be read (the hash is dropped).
  bool catch_up(const ContentId& id, RunningHash& h);

  TxnEngine& engine_;
  const BlockGeometry geometry_;
  std::mutex mu_;  // guards hashes_; a leaf (lock order in lmdb_block_cache.h)
  std::unordered_map<ContentId, std::shared_ptr<RunningHash>> hashes_;
};

}  // namespace whfs::cache
