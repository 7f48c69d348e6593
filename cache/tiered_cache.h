#pragma once
// Caches that are not one plain writable directory:
//
// TieredCache: a read-only cache (the lower tier: a cache baked into an image layer, or
// bind-mounted `:ro` into a container) under a writable one (the upper tier). Both are read,
// the lower first; new blocks, listings and revisions go to the upper one. The lower tier is
// never written, locked or moved aside: a content of it that fails its hash is gone from it for
// this process (as a read-only store keeps its findings: ContentStore::keep_unwritten), so it
// is read from the upper tier, where it is downloaded.
//
// NullCache: no cache at all (its directory is held by a stopped process, say): every read
// misses and nothing is kept, so the mount serves what it verifies in memory.

#include <unistd.h>

#include <memory>

#include "cache/block_cache.h"
#include "cache/metadata_tiers.h"

namespace whfs::cache {

class TieredCache final : public MetadataTiers {
 public:
  // `lower` is read-only; `upper` is writable and has the same block size.
  TieredCache(std::unique_ptr<BlockCache> lower, std::unique_ptr<BlockCache> upper);

  std::uint32_t block_size() const override { return upper_->block_size(); }
  Result<std::vector<std::uint32_t>> read_blocks(const ContentId& id, std::uint64_t content_size,
                                                 std::uint32_t first, std::uint32_t count,
                                                 BlockFn fn, ReadMode mode) override;
  Result<ContentState> put_blocks(const ContentId& id, std::uint64_t content_size,
                                  std::uint32_t first, std::span<const std::byte> data) override;
  Result<ContentState> verify_content(const ContentId& id, std::uint64_t content_size) override;
  Result<std::optional<ContentState>> content_state(const ContentId& id) override;
  Result<void> pin(const ContentId& id) override { return upper_->pin(id); }
  void unpin(const ContentId& id) override { upper_->unpin(id); }
  Result<std::unique_ptr<DownloadClaim>> claim_download(const ContentId& id) override {
    return upper_->claim_download(id);
  }
  // A grant of either tier counts; new ones go to the upper tier.
  Result<bool> granted(const ContentId& id, Audiences readable) override;
  Result<void> grant(const ContentId& id, Audience audience) override {
    return upper_->grant(id, audience);
  }

  // Maintenance is the upper tier's: the lower one is not this mount's to change.
  Result<void> refresh_pins() override { return upper_->refresh_pins(); }
  Result<void> flush() override { return upper_->flush(); }
  Result<CacheStats> stats() override { return upper_->stats(); }
  Result<std::vector<ContentInfo>> list_contents() override { return upper_->list_contents(); }
  Result<VerifyReport> verify_all() override { return upper_->verify_all(); }
  Result<bool> evict(const ContentId& id) override { return upper_->evict(id); }
  Result<void> clear() override { return upper_->clear(); }
  Result<std::uint64_t> evict_to(std::uint64_t target_bytes) override {
    return upper_->evict_to(target_bytes);
  }
  const std::filesystem::path& dir() const override { return upper_->dir(); }
  bool read_only() const override { return false; }
  bool in_use_by_others() const override { return upper_->in_use_by_others(); }

 private:
  // Metadata: the upper tier's, then the lower one's (metadata_tiers.h).
  MetadataStore& writable_metadata() override { return *upper_; }
  MetadataStore* lower_metadata() override { return lower_.get(); }
  // The lower tier holds the whole content (one that failed its hash here is gone from it).
  bool from_lower(const ContentId& id);

  std::unique_ptr<BlockCache> lower_;
  std::unique_ptr<BlockCache> upper_;
};

class NullCache final : public BlockCache {
 public:
  // `why` is the reason every write gives (kBusy). Its blocks are a new cache's on this
  // machine unless `block_size` says otherwise.
  NullCache(std::filesystem::path dir, std::string why,
            std::uint32_t block_size = BlockGeometry::payload_for_pages(
                Options{}.block_pages, static_cast<std::uint32_t>(::sysconf(_SC_PAGESIZE))))
      : dir_(std::move(dir)), why_(std::move(why)), block_size_(block_size) {}

  std::uint32_t block_size() const override { return block_size_; }
  Result<std::vector<std::uint32_t>> read_blocks(const ContentId&, std::uint64_t,
                                                 std::uint32_t first, std::uint32_t count, BlockFn,
                                                 ReadMode) override {
    std::vector<std::uint32_t> all;
    for (std::uint32_t b = first; b < first + count; ++b) all.push_back(b);
    return all;
  }
  Result<ContentState> put_blocks(const ContentId&, std::uint64_t, std::uint32_t,
                                  std::span<const std::byte>) override {
    return busy();
  }
  Result<ContentState> verify_content(const ContentId&, std::uint64_t) override { return busy(); }
  Result<std::optional<ContentState>> content_state(const ContentId&) override {
    return std::optional<ContentState>();
  }
  Result<void> pin(const ContentId&) override { return {}; }
  void unpin(const ContentId&) override {}
  Result<std::unique_ptr<DownloadClaim>> claim_download(const ContentId&) override {
    return std::make_unique<DownloadClaim>();
  }
  Result<bool> granted(const ContentId&, Audiences) override { return false; }
  Result<void> grant(const ContentId&, Audience) override { return busy(); }
  Result<void> put_revision(std::string_view, std::string_view, std::string_view, Audience,
                            std::string_view, std::chrono::system_clock::time_point) override {
    return busy();
  }
  Result<std::optional<RevisionRecord>> get_revision(std::string_view, std::string_view,
                                                     std::string_view, Audiences) override {
    return std::optional<RevisionRecord>();
  }
  Result<void> put_listing(std::string_view, std::string_view, std::string_view, std::string_view,
                           Audience, const std::vector<RemoteEntry>&) override {
    return busy();
  }
  Result<std::optional<std::vector<RemoteEntry>>> get_listing(std::string_view, std::string_view,
                                                              std::string_view, std::string_view,
                                                              Audiences) override {
    return std::optional<std::vector<RemoteEntry>>();
  }
  Result<void> put_wheel_metadata(std::string_view, Audience, const WheelMetadataRecord&) override {
    return busy();
  }
  Result<std::optional<WheelMetadataRecord>> get_wheel_metadata(std::string_view,
                                                                Audiences) override {
    return std::optional<WheelMetadataRecord>();
  }
  Result<void> refresh_pins() override { return {}; }
  Result<void> flush() override { return {}; }
  Result<CacheStats> stats() override { return busy(); }
  Result<std::vector<ContentInfo>> list_contents() override { return busy(); }
  Result<VerifyReport> verify_all() override { return busy(); }
  Result<bool> evict(const ContentId&) override { return busy(); }
  Result<void> clear() override { return busy(); }
  Result<std::uint64_t> evict_to(std::uint64_t) override { return busy(); }
  const std::filesystem::path& dir() const override { return dir_; }
  bool read_only() const override { return true; }
  bool in_use_by_others() const override { return false; }

 private:
  Unexpected<CacheError> busy() const { return cache_error(CacheError::Kind::kBusy, why_); }
  std::filesystem::path dir_;
  std::string why_;
  std::uint32_t block_size_;
};

}  // namespace whfs::cache
