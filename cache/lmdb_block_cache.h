#pragma once
// The LMDB implementation of BlockCache (internal to cache/): a facade over the classes that
// do the work, one idea each, each with its own locks if any (their order is below):
//   TxnEngine (txn_engine.h)       read and write txns, the map size, MDB_MAP_FULL handling
//   Quota (quota.h; LruQuota)      recency, eviction, water marks, pins and leases, pending
//                                  updates of reads
//   ContentStore (content_store.h) content records, block puts, deletions (the read of blocks,
//                                  the hot path, is this class's own: read_blocks)
//   RunningHashes, ContentVerifier whole-content hashes and verification
//   MetadataRecords                revisions, listings, wheel metadata
//   DownloadClaims                 cross-process download claims
// and store_open.h, which opens the store they share.
//
// Why these LMDB flags (see open_once() in store_open.cpp):
//  - MDB_NOSYNC: a cache does not need durability, only integrity. LMDB writes a txn's pages
//    and then its meta page with write(2); a process killed at any moment (kill -9, OOM, a
//    crash) leaves them in the OS page cache in that order, so the store stays consistent
//    without fsync. Only a power loss or kernel crash can lose or reorder unsynced pages, so
//    the store is synced on close and flush(), and the first open after a reboot that
//    followed an unclean close checks the structure first (session.h). Blocks carry checksums
//    and contents are verified against their hash, so damage LMDB cannot see is a miss, never
//    wrong bytes.
//  - no MDB_WRITEMAP: it saves the write(2) copy of each put, but is no faster here (the
//    sparse file's first-touch faults eat the gain; figures in tests/bench/README.md); and a
//    full disk then kills the process with SIGBUS instead of failing a write, and LMDB
//    truncates the data file to the map size of whichever process opens it.
//  - MDB_NOTLS: FUSE serves requests from a thread pool; read txns must not be tied to threads
//    (and are pooled, see read_txn_pool.h).
//  - map size = the cap less a small reserve for evictions (put_map_size in records.h): the
//    data file can never grow past the cap.

#include <functional>
#include <memory>

#include "cache/block_cache.h"
#include "cache/content_store.h"
#include "cache/content_verifier.h"
#include "cache/download_claims.h"
#include "cache/lru_quota.h"
#include "cache/metadata_records.h"
#include "cache/metadata_tiers.h"
#include "cache/quota.h"
#include "cache/running_hashes.h"
#include "cache/session.h"
#include "cache/store_open.h"
#include "cache/txn_engine.h"

namespace whfs::cache {

class LmdbBlockCache final : public MetadataTiers {
 public:
  // Makes the quota of the store (a unit test passes a double); by default an LruQuota.
  using QuotaFactory =
      std::function<std::unique_ptr<Quota>(QuotaStore& store, const LruQuota::Config& config)>;
  static Result<std::unique_ptr<BlockCache>> open(const Options& options,
                                                  const QuotaFactory& make_quota = {});

  ~LmdbBlockCache() override;
  LmdbBlockCache(const LmdbBlockCache&) = delete;
  LmdbBlockCache& operator=(const LmdbBlockCache&) = delete;

  std::uint32_t block_size() const override { return geometry_.block_size(); }
  Result<std::vector<std::uint32_t>> read_blocks(const ContentId& id, std::uint64_t content_size,
                                                 std::uint32_t first, std::uint32_t count,
                                                 BlockFn fn, ReadMode mode) override;
  Result<ContentState> put_blocks(const ContentId& id, std::uint64_t content_size,
                                  std::uint32_t first, std::span<const std::byte> data) override {
    return contents_.put_blocks(id, content_size, first, data);
  }
  Result<ContentState> verify_content(const ContentId& id, std::uint64_t content_size) override;
  Result<std::optional<ContentState>> content_state(const ContentId& id) override {
    return contents_.content_state(id);
  }
  Result<void> pin(const ContentId& id) override;
  void unpin(const ContentId& id) override;
  Result<std::unique_ptr<DownloadClaim>> claim_download(const ContentId& id) override {
    return claims_.claim(id);
  }
  Result<bool> granted(const ContentId& id, Audiences readable) override {
    return metadata_.granted(id.to_string(), readable);
  }
  Result<void> grant(const ContentId& id, Audience audience) override {
    return metadata_.grant(id.to_string(), audience);
  }
  Result<void> refresh_pins() override;
  Result<void> flush() override;
  Result<CacheStats> stats() override;
  Result<std::vector<ContentInfo>> list_contents() override;
  Result<VerifyReport> verify_all() override;
  Result<bool> evict(const ContentId& id) override;
  Result<void> clear() override;
  Result<std::uint64_t> evict_to(std::uint64_t target_bytes) override;
  const std::filesystem::path& dir() const override { return options_.dir; }
  bool read_only() const override { return read_only_; }
  bool owner_only() const override { return owner_only_; }
  bool in_use_by_others() const override { return session_.in_use_by_others(); }

 private:
  LmdbBlockCache(Options options, OpenedStore store, const QuotaFactory& make_quota);
  MetadataStore& writable_metadata() override { return metadata_; }
  MetadataStore* lower_metadata() override { return nullptr; }

  const Options options_;
  Session session_;
  const BlockGeometry geometry_;
  const bool read_only_;   // a lower tier: no write txn, no pending updates, no pins
  const bool owner_only_;  // OpenedStore::owner_only

  // Lock order, complete (a lock is only ever taken after the ones left of it):
  //   a RunningHash's mu (RunningHashes) -> TxnEngine's map_mutex_ (shared, for the read txn
  //     that hashes stored blocks)
  //   a RunningHash's mu -> RunningHashes' mu_ (forget)
  //   TxnEngine's map_mutex_ (shared for every txn and every LMDB call that reads the map,
  //     exclusive to remap; lmdb::Env keeps the page and map sizes so that asking needs none)
  //     -> the session's OFD locks (writer, reader table) -> LMDB's writer lock -> LruQuota's
  //     pins_mu_, a PendingShard's mu (LruQuota) and RunningHashes' mu_ (a write txn's body)
  // RunningHashes' mu_, LruQuota's pins_mu_ and a PendingShard's mu are leaves: nothing is
  // locked while they are held, and none is held across an LMDB call that may block.
  // DownloadClaims takes no lock of ours (its OFD locks are never waited for) and
  // MetadataRecords and ContentVerifier none of their own (only the ones above, through
  // TxnEngine, RunningHashes and the quota); ContentStore's unwritten_mu_ (a read-only store's
  // findings) is a leaf, taken inside a read txn.
  TxnEngine engine_;  // before the classes that use it
  RunningHashes hashes_;
  ContentStore contents_;
  ContentVerifier verifier_;
  MetadataRecords metadata_;
  DownloadClaims claims_;
  std::unique_ptr<Quota> quota_;  // uses contents_ (its QuotaStore): destroyed first
};

}  // namespace whfs::cache
