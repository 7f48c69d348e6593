#pragma once
// The LMDB implementation of BlockCache (internal to cache/).
//
// Why these LMDB flags (see open() in block_cache.cpp):
//  - MDB_NOSYNC: a cache does not need durability, only integrity. LMDB writes a txn's pages
//    and then its meta page with write(2); a process killed at any moment (kill -9, OOM, a
//    crash) leaves them in the OS page cache in that order, so the store stays consistent
//    without fsync. Only a power loss or kernel crash can lose or reorder unsynced pages, so
//    the store is synced on close and flush(), and the first open after a reboot that
//    followed an unclean close checks the structure first (session.h). Blocks carry checksums
//    and contents are verified against their hash, so damage LMDB cannot see is a miss, never
//    wrong bytes.
//  - no MDB_WRITEMAP: it saves the write(2) copy of each put, but is no faster here (the
//    sparse file's first-touch faults eat the gain; figures in README's architecture
//    section); and a full disk then kills the process with SIGBUS
//    instead of failing a write, and LMDB truncates the data file to the map size of
//    whichever process opens it.
//  - MDB_NOTLS: FUSE serves requests from a thread pool; read txns must not be tied to threads
//    (and are pooled, see read_txn_pool.h).
//  - map size = the cap less a small reserve for evictions (put_map_size in records.h): the
//    data file can never grow past the cap.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/block_cache.h"
#include "cache/lmdb.h"
#include "cache/read_txn_pool.h"
#include "cache/records.h"
#include "cache/session.h"
#include "fs/common/hash.h"

namespace whfs::cache {

class LmdbBlockCache final : public BlockCache {
 public:
  static Result<std::unique_ptr<BlockCache>> open(const Options& options);

  ~LmdbBlockCache() override;
  LmdbBlockCache(const LmdbBlockCache&) = delete;
  LmdbBlockCache& operator=(const LmdbBlockCache&) = delete;

  std::uint32_t block_size() const override { return geometry_.block_size(); }
  Result<std::vector<std::uint32_t>> read_blocks(const ContentId& id, std::uint64_t content_size,
                                                 std::uint32_t first, std::uint32_t count,
                                                 BlockFn fn, ReadMode mode) override;
  Result<ContentState> put_blocks(const ContentId& id, std::uint64_t content_size,
                                  std::uint32_t first, std::span<const std::byte> data) override;
  Result<ContentState> verify_content(const ContentId& id, std::uint64_t content_size) override;
  Result<ContentState> recheck_content(const ContentId& id, std::uint64_t content_size) override;
  Result<std::optional<ContentState>> content_state(const ContentId& id) override;
  Result<void> pin(const ContentId& id) override;
  void unpin(const ContentId& id) override;
  Result<std::unique_ptr<DownloadClaim>> claim_download(const ContentId& id) override;
  Result<void> refresh_pins() override;
  Result<void> flush() override;
  Result<void> put_revision(std::string_view endpoint, std::string_view repo, std::string_view rev,
                            std::string_view commit,
                            std::chrono::system_clock::time_point resolved_at) override;
  Result<std::optional<RevisionRecord>> get_revision(std::string_view endpoint,
                                                     std::string_view repo,
                                                     std::string_view rev) override;
  Result<void> put_listing(std::string_view endpoint, std::string_view repo,
                           std::string_view commit, std::string_view folder,
                           const std::vector<RemoteEntry>& entries) override;
  Result<std::optional<std::vector<RemoteEntry>>> get_listing(std::string_view endpoint,
                                                              std::string_view repo,
                                                              std::string_view commit,
                                                              std::string_view folder) override;
  Result<void> put_wheel_metadata(std::string_view content_id,
                                  const WheelMetadataRecord& record) override;
  Result<std::optional<WheelMetadataRecord>> get_wheel_metadata(
      std::string_view content_id) override;
  Result<CacheStats> stats() override;
  Result<std::vector<ContentInfo>> list_contents() override;
  Result<VerifyReport> verify_all() override;
  Result<bool> evict(const ContentId& id) override;
  Result<void> clear() override;
  Result<std::uint64_t> evict_to(std::uint64_t target_bytes) override;
  const std::filesystem::path& dir() const override { return options_.dir; }
  bool read_only() const override { return read_only_; }
  bool in_use_by_others() const override { return session_.in_use_by_others(); }

 private:
  struct Dbs {
    lmdb::Dbi meta, blocks, contents, lru, leases, revisions, listings;
  };
  // What a write txn body works with; usage and counters are saved before the commit.
  struct WriteScope {
    lmdb::Txn& txn;
    Usage usage;
    Counters counters;  // deltas
    std::uint64_t cap = 0;
    std::uint64_t now_ms = 0;
  };
  using WriteBody = FunctionRef<lmdb::Res<void>(WriteScope&)>;
  using ReadBody = FunctionRef<lmdb::Res<void>(ReadTxnPool::Reader&)>;

  // In-memory state flushed with the next write txn (so reads never write). Sharded by
  // thread like the read-txn pool: every read records its hits and recency here.
  struct Pending {
    std::unordered_map<ContentId, std::uint64_t> touched;  // content -> last access (ms)
    std::vector<ContentId> released;                       // leases to drop
    Counters counters;
    void merge(Pending&& other);
  };
  struct alignas(64) PendingShard {
    std::mutex mu;  // a leaf lock, never held across an LMDB call
    Pending pending;
  };
  static constexpr std::size_t kPendingShards = 16;

  struct StoreInit {
    Dbs dbs;
    BlockGeometry geometry{1, 1};
    std::uint64_t cap = 0;
  };

  // `downloads_fd`: downloads.lock, opened (claims.cpp), or -1: no claims.
  LmdbBlockCache(Options options, Session session, lmdb::Env env, const StoreInit& init,
                 bool read_only = false, int downloads_fd = -1);

  static Result<std::unique_ptr<BlockCache>> open_once(const Options& options, Session& session);
  static Result<std::unique_ptr<BlockCache>> open_read_only(const Options& options);
  // Opens the DBs, creates or checks the format record, records the cap and sizes the map.
  static Result<StoreInit> init_store(lmdb::Env& env, const Options& options, Session& session);
  static Result<StoreInit> init_read_only(lmdb::Env& env, const Options& options);
  // Opens (with `flags`: MDB_CREATE or 0) every named DB; `failed` names the one that failed.
  static lmdb::Res<void> open_dbs(lmdb::Txn& txn, unsigned flags, Dbs* dbs,
                                  const char** failed = nullptr);
  static Result<StoreInit> init_store_txn(lmdb::Env& env, const Options& options, bool write_cap,
                                          int* lmdb_code);
  std::uint64_t now_ms() const;

  // Runs `body` in one read txn; adopts a map grown by another process and retries.
  Result<void> read(ReadBody body);
  // Runs `body` in one write txn with the pending updates and commits it. `need_bytes` > 0
  // makes room first when the cache is past its high-water mark. MDB_MAP_FULL is handled
  // here (grow the map to the cap, or evict, and retry) and never returned; kFull when
  // nothing can be evicted.
  // An eviction's own txn (`evicting`) never evicts in turn: it fails with kFull instead.
  Result<void> write(std::uint64_t need_bytes, WriteBody body, bool evicting = false);
  lmdb::Res<void> write_once(std::uint64_t need_bytes, WriteBody body, bool* over_high_water);
  Result<void> make_room(std::uint64_t need_bytes, int attempt);
  Result<void> adopt_map_size();
  // Remaps to `bytes` (LMDB rounds up to the pages in use) under the exclusive map lock.
  Result<void> set_map(std::uint64_t bytes);
  Result<Usage> read_usage();
  CacheError to_error(const lmdb::Error& e);

  // Usage from LMDB's own page counts, when the usage record is unreadable.
  lmdb::Res<Usage> count_usage(const lmdb::Txn& txn);
  // Pages of every DB (B-tree and overflow pages), in bytes.
  lmdb::Res<std::uint64_t> bytes_in_use(const lmdb::Txn& txn);
  PendingShard& pending_shard();
  Pending take_pending();
  lmdb::Res<void> apply_pending(WriteScope& scope, Pending& pending);
  // One eviction txn's worth. `more`: stopped at the batch limit; `exhausted`: nothing left
  // that may be evicted (all pinned or leased).
  lmdb::Res<std::uint64_t> evict_batch(WriteScope& scope, std::uint64_t target_bytes, bool* more,
                                       bool* exhausted);
  struct Evicted {
    std::uint64_t bytes = 0;
    bool exhausted = false;
  };
  Result<Evicted> evict_until(std::uint64_t target_bytes);
  lmdb::Res<bool> has_live_lease(WriteScope& scope, const ContentId& id);
  lmdb::Res<bool> purge_content(WriteScope& scope, const ContentId& id);
  lmdb::Res<void> store_record(WriteScope& scope, const ContentId& id,
                               const std::optional<ContentRecord>& old, const ContentRecord& rec);
  lmdb::Res<std::optional<ContentRecord>> load_record(const lmdb::Txn& txn, const ContentId& id);
  std::uint64_t high_water() const;
  std::uint64_t low_water() const;
  Result<void> drop_bad_blocks(const ContentId& id, const std::vector<std::uint32_t>& bad);
  // Whole-content hashing as blocks arrive in order, so that verifying a file downloaded front
  // to back needs no second pass over it at the end (the hash runs beside the downloads). It
  // stands for the stored content only if no block was deleted since it started: deletions in
  // this process drop it, and the record's epoch (random when a record is created, bumped on
  // every deletion) catches other processes' deletions.
  struct RunningHash {
    std::mutex mu;  // guards the fields; held while hashing (reads, never a write txn); see
                    // the lock order below
    std::optional<Hasher> hasher;
    std::uint32_t next = 0;  // blocks hashed so far
    std::uint32_t epoch = 0;
  };
  void advance_hash(const ContentId& id, std::uint64_t content_size, std::uint32_t first,
                    std::span<const std::byte> data, bool exact, std::uint32_t epoch);
  std::optional<std::vector<std::uint8_t>> take_running_digest(const ContentId& id,
                                                               std::uint32_t total,
                                                               std::uint32_t epoch);
  void forget_hash(const ContentId& id);
  std::mutex hashes_mu_;  // guards hashes_ and read_only_verified_; a leaf (lock order below)
  std::unordered_map<ContentId, std::shared_ptr<RunningHash>> hashes_;
  // A read-only cache cannot record that a content matched: this process remembers it.
  std::unordered_set<ContentId> read_only_verified_;
  bool verified_here_read_only(const ContentId& id);

  lmdb::Res<void> put_txn(WriteScope& s, const ContentId& id, std::uint64_t content_size,
                          std::uint32_t first, std::span<const std::byte> data, ContentState* state,
                          std::uint32_t* epoch, bool* skipped);
  Result<ContentState> verify(const ContentId& id, std::uint64_t content_size, bool force);
  // The blocks of a content whose own checksum fails (damage at rest).
  Result<std::vector<std::uint32_t>> blocks_failing_checksum(const ContentId& id,
                                                             std::uint64_t content_size);
  // The digest of the whole content, or nullopt when a block is missing or bad.
  Result<std::optional<std::vector<std::uint8_t>>> hash_content(const ContentId& id,
                                                                std::uint64_t content_size);
  bool pinned_here(const ContentId& id);
  // Drops one in-process pin; true when it was the last.
  bool unpin_here(const ContentId& id);
  void note_corruption(const lmdb::Error& e);

  const Options options_;
  Session session_;
  lmdb::Env env_;
  const Dbs dbs_;
  const BlockGeometry geometry_;
  const bool read_only_;  // a lower tier: no write txn, no pending updates, no pins
  Holder holder_{};       // this instance's lease holder id (random)

  // Lock order, complete (a lock is only ever taken after the ones left of it):
  //   a RunningHash's mu -> map_mutex_ (shared, for the read txn that hashes stored blocks)
  //   a RunningHash's mu -> hashes_mu_ (forget_hash)
  //   map_mutex_ (shared for every txn and every LMDB call that reads the map, exclusive to
  //     remap; lmdb::Env keeps the page and map sizes so that asking needs none) -> the session's
  //     OFD locks (writer, reader table) -> LMDB's writer lock -> pins_mu_ -> a PendingShard's mu
  // hashes_mu_, pins_mu_ and a PendingShard's mu are leaves: nothing is locked while they are
  // held, and none is held across an LMDB call that may block.
  std::shared_mutex map_mutex_;
  ReadTxnPool readers_;  // after env_: destroyed (txns ended) before the env closes
  std::array<PendingShard, kPendingShards> pending_;
  std::mutex pins_mu_;
  std::unordered_map<ContentId, int> pins_;
  std::atomic<std::uint64_t> cap_bytes_{0};  // as stored; refreshed by every write txn
  int downloads_fd_ = -1;                    // downloads.lock (claims.cpp)
};

}  // namespace whfs::cache
