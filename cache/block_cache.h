#pragma once
// The LMDB block cache: content-addressed blocks with per-block checksums, whole-content
// verification, persisted metadata, a size cap with LRU eviction, leases for open files, and
// crash safety without an fsync per write. Several processes (mounts, the CLI, containers
// bind-mounting the directory) may use one cache directory at once. Thread-safe.
//
// The implementation (lmdb_block_cache.h) is the only one; this header keeps LMDB out of the
// code that uses the cache.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "cache/block_store.h"
#include "cache/dir_policy.h"
#include "cache/metadata_codec.h"
#include "cache/metadata_store.h"
#include "cache/records.h"

namespace whfs::cache {

struct Options {
  std::filesystem::path dir;
  // The size cap in bytes (e.g. parse_size("20G")). 0 keeps the cap stored in the cache (the
  // CLI passes 0); a new cache without one gets kDefaultCap. The last opener that passes a
  // cap sets it for every process using the directory.
  std::uint64_t cap_bytes = 0;
  // Block size in LMDB pages, used when the cache is created (then fixed and recorded). A
  // block's value (8-byte checksum + payload) plus LMDB's 16-byte page header fills the pages
  // exactly: 8 pages of 4 KiB hold 32744 payload bytes (a power-of-two payload would waste a
  // whole page per block).
  //
  // Why 8: a cold random 4 KiB read fetches one whole block (two when it straddles a
  // boundary), so 200 random 4 KiB reads of a 256 MiB file fetch about 200 x 1.125 x 32 KiB =
  // 7 MiB (64 KiB blocks: 14 MiB); every read checksums its whole block, so small blocks keep
  // cached random reads cheap; and coalesced puts run as fast with 8 pages as with more. The
  // figures (tests/bench/cache_bench) are in tests/bench/README.md.
  std::uint32_t block_pages = 8;
  // Eviction starts when the blocks pass high_water_percent of the cap and stops at
  // low_water_percent; each write txn of it deletes at most evict_batch_blocks blocks.
  unsigned high_water_percent = 90;
  unsigned low_water_percent = 80;
  std::uint32_t evict_batch_blocks = 4096;
  // A pin's lease; call refresh_pins() at least every third of it.
  std::chrono::seconds lease_duration{600};
  // Slots in LMDB's reader table for every process sharing the directory (fixed by the first
  // process to open it), and how many one process holds at most: 64 x 32 daemons fit.
  unsigned max_readers = 2048;
  unsigned max_readers_per_process = 64;
  // Private to this user (dir_policy.h), or shared with a group.
  DirAccess access;
  // Open the cache read-only (also when the directory is on a read-only filesystem): it is
  // read, never written, locked or moved aside.
  bool read_only = false;
  // The longest a write or a new read txn waits for another process's lock, and an open for
  // the open/close gate: a stopped process must not stop the others (kBusy; the caller then
  // serves verified bytes without storing them).
  std::chrono::milliseconds lock_timeout{2000};
  std::chrono::milliseconds open_timeout{10000};
  // A damaged store is moved aside and replaced by an empty one. The CLI sets this to false:
  // it never repairs a cache that live mounts may use.
  bool repair = true;
  std::filesystem::path boot_id_file = "/proc/sys/kernel/random/boot_id";
  std::chrono::seconds check_timeout{600};
  // Wall clock for recency and leases (tests inject one). Wall, not steady: leases are
  // compared across processes and containers, which share CLOCK_REALTIME.
  std::function<std::chrono::system_clock::time_point()> clock;

  static constexpr std::uint64_t kDefaultCap = std::uint64_t{10} << 30;
};

struct ContentInfo {
  ContentId id;
  std::uint64_t size = 0;
  ContentState state;
  std::chrono::system_clock::time_point last_access;
};

struct CacheStats {
  std::uint64_t cap_bytes = 0;
  std::uint64_t map_bytes = 0;
  std::uint64_t file_bytes = 0;  // data.mdb's size
  std::uint64_t disk_bytes = 0;  // blocks it takes on disk
  std::uint32_t block_size = 0;
  Usage usage;
  Counters counters;
  // This process's, not recorded in the cache: complete contents it hashed in a pass of their
  // own over the stored blocks, because no running hash covered them (they were stored by
  // another process or before a restart, or a block of them was replaced).
  std::uint64_t second_hash_passes = 0;
};

struct VerifyReport {
  std::uint64_t checked = 0;     // complete contents hashed
  std::uint64_t corrupt = 0;     // of those, dropped
  std::uint64_t incomplete = 0;  // not hashed: blocks missing
};

class BlockCache : public BlockStore, public MetadataStore {
 public:
  // Opens (creating if needed) the cache in options.dir. A damaged store is moved aside and
  // replaced by an empty one (unless options.repair is false: kCorrupt); an unknown format is
  // kFormat; a directory that is not private (dir_policy.h) is kAccess; a gate held too long
  // by another process is kBusy.
  static Result<std::unique_ptr<BlockCache>> open(const Options& options);

  // Whether this cache is read-only (a lower tier): every write fails with kReadOnly.
  virtual bool read_only() const = 0;
  // Whether nobody but this user (and root) can have written anything the cache holds: a
  // private directory whose data file was this user's alone (mode 0600) when opened, and which
  // never recorded being shared with a group or writable by others. What such a cache records
  // as verified was verified by this user's own processes: a daemon may serve it without
  // hashing it again. False for a group-shared cache, a read-only one and tiers.
  virtual bool owner_only() const { return false; }
  // Whether another process (a mount) has the cache open now.
  virtual bool in_use_by_others() const = 0;
  // Deletes the store's files (the CLI's `cache clear` for a store of an unknown format).
  static Result<void> remove_store(const std::filesystem::path& dir, const DirAccess& access = {});

  // (The BlockStore calls: read_blocks, put_blocks, verify_content,
  // content_state, pin, unpin, claim_download, block_size; the MetadataStore calls: revisions
  // and listings.)

  // Extends the leases of this process's pins.
  virtual Result<void> refresh_pins() = 0;
  // Writes pending recency, counters and released leases, and syncs the store to disk.
  virtual Result<void> flush() = 0;

  // ---- maintenance (the CLI; safe while a mount uses the cache) ----------------------------
  virtual Result<CacheStats> stats() = 0;
  virtual Result<std::vector<ContentInfo>> list_contents() = 0;
  // Re-hashes every complete content (verified or not) and drops the corrupt ones.
  virtual Result<VerifyReport> verify_all() = 0;
  // Drops a content now, pinned or not; false when it was not cached.
  virtual Result<bool> evict(const ContentId& id) = 0;
  // Drops every block, content and metadata record (counters are kept).
  virtual Result<void> clear() = 0;
  // Evicts least recently used contents until the blocks take at most `target_bytes`.
  virtual Result<std::uint64_t> evict_to(std::uint64_t target_bytes) = 0;

  virtual const std::filesystem::path& dir() const = 0;
};

}  // namespace whfs::cache
