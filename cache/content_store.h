#pragma once
// ContentStore: the blocks and content records of the LMDB block cache (internal to cache/):
// records, block puts, and deletions (the read of blocks is LmdbBlockCache::read_blocks). The
// store the quota keeps under its cap (QuotaStore); recency and pins are the quota's.

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/block_cache.h"
#include "cache/quota.h"
#include "cache/running_hashes.h"
#include "cache/txn_engine.h"

namespace whfs::cache {

class ContentStore final : public QuotaStore {
 public:
  ContentStore(TxnEngine& engine, RunningHashes& hashes, const BlockGeometry& geometry,
               bool read_only)
      : engine_(engine), hashes_(hashes), geometry_(geometry), read_only_(read_only) {}
  ContentStore(const ContentStore&) = delete;
  ContentStore& operator=(const ContentStore&) = delete;
  // The quota told of every access and deletion (set once, before the first call).
  void set_quota(Quota* quota) { quota_ = quota; }

  // BlockStore's calls (block_store.h).
  Result<ContentState> put_blocks(const ContentId& id, std::uint64_t content_size,
                                  std::uint32_t first, std::span<const std::byte> data);
  Result<std::optional<ContentState>> content_state(const ContentId& id);

  // Deletes the blocks of `damaged` that (still) fail their checksum.
  Result<void> drop_damaged_blocks(const ContentId& id, const std::vector<std::uint32_t>& damaged);
  // The record of `id`, as a read-only store's changes not written (below) make it.
  lmdb::Res<std::optional<ContentRecord>> load_record(const lmdb::Txn& txn, const ContentId& id);
  lmdb::Res<void> store_record(WriteScope& s, const ContentId& id,
                               const std::optional<ContentRecord>& old, const ContentRecord& rec);

  // QuotaStore.
  Result<void> write(WriteBody body) override { return engine_.write(0, body); }
  Result<void> write_evicting(WriteBody body) override {
    return engine_.write(0, body, /*evicting=*/true);
  }
  lmdb::Res<void> touch(WriteScope& s, const ContentId& id, std::uint64_t ms) override;
  lmdb::Res<bool> purge(WriteScope& s, const ContentId& id) override;

  // A read-only store cannot write what its verification found: this process keeps it instead
  // (a match: the record is verified; a mismatch: the content is gone, as a writable store
  // drops it), and load_record answers as a writable store would after writing it.
  enum class Found { kMatch, kMismatch };
  void keep_unwritten(const ContentId& id, Found found);
  // A read-only store's content that failed its hash here: its blocks are not there for reads.
  bool dropped_unwritten(const ContentId& id);

 private:
  lmdb::Res<void> put_txn(WriteScope& s, const ContentId& id, std::uint64_t content_size,
                          std::uint32_t first, std::span<const std::byte> data, ContentState* state,
                          std::uint32_t* epoch, bool* skipped);

  TxnEngine& engine_;
  RunningHashes& hashes_;
  Quota* quota_ = nullptr;
  const BlockGeometry geometry_;
  const bool read_only_;     // a lower tier: no write txn, no pending updates
  std::mutex unwritten_mu_;  // guards unwritten_ (read-only stores only); a leaf
  std::unordered_map<ContentId, Found> unwritten_;
};

}  // namespace whfs::cache
