#pragma once
// The read path's view of the block cache: what fs/reader needs, and the seam where its tests
// inject faults by subclassing (a BlockStore that loses, corrupts or refuses blocks).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "cache/audience.h"
#include "cache/cache_error.h"
#include "cache/content_id.h"
#include "fs/common/function_ref.h"

namespace whfs::cache {

struct ContentState {
  std::uint32_t present = 0;  // blocks stored
  std::uint32_t total = 0;    // blocks of the whole content
  bool verified = false;      // the whole content matched its hash
  bool complete() const { return present == total; }
  bool operator==(const ContentState&) const = default;
};

class BlockStore {
 public:
  // Called with a block's index and its bytes. The span points into the cache's memory map
  // and is valid only during the call; the callback must not call back into the store.
  using BlockFn = FunctionRef<void(std::uint32_t index, std::span<const std::byte> bytes)>;

  virtual ~BlockStore() = default;

  // Bytes per block (the last block of a content may be shorter).
  virtual std::uint32_t block_size() const = 0;

  // How read_blocks treats a content whose whole-file hash has not matched:
  //  kVerified: not at all. Every block of a content that is not recorded as verified is
  //    reported missing: a reader gets bytes only once the whole file matched its hash.
  //  kPartial: blocks are served as they arrive (streaming), except that a complete content
  //    not verified yet reports every block missing (verify_content() first), so that no
  //    reader ever receives every byte of a file that may be wrong.
  //  kPresence: which blocks are stored, from the keys alone: `fn` is not called, checksums
  //    are not checked, and neither the hit/miss counters nor recency change (a downloader
  //    asking what is left to fetch is not a reader).
  //  kHashedHere: kVerified without the block checksums, for a content whose whole hash the
  //    caller computed moments ago over these same stored bytes (the checksums would check
  //    bytes just hashed; they were a twelfth of a cold read's CPU).
  enum class ReadMode { kVerified, kPartial, kPresence, kHashedHere };

  // Calls `fn` for each present, checksum-valid block of [first, first + count) in order, in
  // one read transaction, and returns the indices it did not call `fn` for. Never waits for
  // a writer. A block that fails its checksum is deleted and reported missing.
  virtual Result<std::vector<std::uint32_t>> read_blocks(const ContentId& id,
                                                         std::uint64_t content_size,
                                                         std::uint32_t first, std::uint32_t count,
                                                         BlockFn fn, ReadMode mode) = 0;

  // Stores consecutive whole blocks starting at block `first` (only the content's final block
  // may be short) in one write transaction. Blocks already present are left as they are.
  // Returns the content's state afterwards. kFull when nothing could be evicted to make room.
  virtual Result<ContentState> put_blocks(const ContentId& id, std::uint64_t content_size,
                                          std::uint32_t first, std::span<const std::byte> data) = 0;

  // Once every block is present: hashes the whole content against its id now, whatever its
  // record says (whose record is taken at its word is the read path's decision alone:
  // fs/reader/serving_gate.h). A match is recorded (state.verified); a mismatch drops every
  // block of it and returns kCorrupt. Returns the state unverified when blocks are missing.
  virtual Result<ContentState> verify_content(const ContentId& id, std::uint64_t content_size) = 0;

  virtual Result<std::optional<ContentState>> content_state(const ContentId& id) = 0;

  // An open file holds its content: it is not evicted until unpinned (or, if this process
  // dies, until its lease expires). Pins nest: each successful pin() needs one unpin(); a
  // failed pin() pins nothing.
  virtual Result<void> pin(const ContentId& id) = 0;
  virtual void unpin(const ContentId& id) = 0;

  // Downloads are coordinated between the processes sharing a cache, so that the Hub serves
  // each file about once: a process downloads a content while it holds its claim, the others
  // wait for the blocks to appear (or take over when the holder dies or makes no progress).
  // A claim is released when destroyed, or by the kernel when its process dies.
  class DownloadClaim {
   public:
    virtual ~DownloadClaim() = default;
  };
  // The claim, or nullptr when another process holds it now.
  virtual Result<std::unique_ptr<DownloadClaim>> claim_download(const ContentId& id) = 0;

  // Who may read a content's bytes (audience.h): whether one of `readable` holds a grant for
  // it, and recording one for `audience`. The blocks are shared by everybody who may read them;
  // a grant outlives the blocks (it says who may, not what is there).
  virtual Result<bool> granted(const ContentId& id, Audiences readable) = 0;
  virtual Result<void> grant(const ContentId& id, Audience audience) = 0;
};

}  // namespace whfs::cache
