#pragma once
// ContentStore: the blocks and content records of the LMDB block cache (internal to cache/):
// the read path (zero-copy, one read txn, no writes), block puts, and deletions. The store the
// quota keeps under its cap (QuotaStore); recency and pins are the quota's.

#include <cstdint>
#include <optional>
#include <span>
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
  Result<std::vector<std::uint32_t>> read_blocks(const ContentId& id, std::uint64_t content_size,
                                                 std::uint32_t first, std::uint32_t count,
                                                 BlockStore::BlockFn fn, BlockStore::ReadMode mode);
  Result<ContentState> put_blocks(const ContentId& id, std::uint64_t content_size,
                                  std::uint32_t first, std::span<const std::byte> data);
  Result<std::optional<ContentState>> content_state(const ContentId& id);

  // Deletes the blocks of `bad` that (still) fail their checksum.
  Result<void> drop_bad_blocks(const ContentId& id, const std::vector<std::uint32_t>& bad);
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

 private:
  lmdb::Res<void> put_txn(WriteScope& s, const ContentId& id, std::uint64_t content_size,
                          std::uint32_t first, std::span<const std::byte> data, ContentState* state,
                          std::uint32_t* epoch, bool* skipped);

  TxnEngine& engine_;
  RunningHashes& hashes_;
  Quota* quota_ = nullptr;
  const BlockGeometry geometry_;
  const bool read_only_;  // a lower tier: no write txn, no pending updates
};

}  // namespace whfs::cache
