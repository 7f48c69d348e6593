#pragma once
// ContentVerifier: the verification of a whole content against its hash (internal to
// cache/): from the running hash when it covers every block, else by a pass over the stored
// blocks; a mismatch drops the blocks that fail their own checksum, or else the content. A
// read-only store keeps what it found in memory instead (ContentStore::keep_unwritten).

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "cache/content_store.h"
#include "cache/running_hashes.h"
#include "cache/txn_engine.h"

namespace whfs::cache {

class ContentVerifier {
 public:
  ContentVerifier(TxnEngine& engine, ContentStore& store, RunningHashes& hashes,
                  const BlockGeometry& geometry, bool read_only)
      : engine_(engine),
        store_(store),
        hashes_(hashes),
        geometry_(geometry),
        read_only_(read_only) {}
  ContentVerifier(const ContentVerifier&) = delete;
  ContentVerifier& operator=(const ContentVerifier&) = delete;

  // BlockStore::verify_content.
  Result<ContentState> verify(const ContentId& id, std::uint64_t content_size);
  // Contents verify() hashed in a pass of their own (CacheStats::second_hash_passes).
  std::uint64_t second_hash_passes() const { return second_passes_.load(); }

 private:
  // The blocks of a content whose own checksum fails (damage at rest).
  Result<std::vector<std::uint32_t>> blocks_failing_checksum(const ContentId& id,
                                                             std::uint64_t content_size);
  // The digest of the whole content, or nullopt when a block is missing or bad.
  Result<std::optional<std::vector<std::uint8_t>>> hash_content(const ContentId& id,
                                                                std::uint64_t content_size);

  TxnEngine& engine_;
  ContentStore& store_;
  RunningHashes& hashes_;
  const BlockGeometry geometry_;
  const bool read_only_;
  std::atomic<std::uint64_t> second_passes_{0};
};

}  // namespace whfs::cache
