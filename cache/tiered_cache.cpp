#include "cache/tiered_cache.h"

#include <spdlog/spdlog.h>

namespace whfs::cache {

TieredCache::TieredCache(std::unique_ptr<BlockCache> lower, std::unique_ptr<BlockCache> upper)
    : lower_(std::move(lower)), upper_(std::move(upper)) {}

bool TieredCache::from_lower(const ContentId& id) {
  auto st = lower_->content_state(id);
  return st && *st && (*st)->complete();
}

Result<std::vector<std::uint32_t>> TieredCache::read_blocks(const ContentId& id,
                                                            std::uint64_t content_size,
                                                            std::uint32_t first,
                                                            std::uint32_t count, BlockFn fn,
                                                            ReadMode mode) {
  return (from_lower(id) ? *lower_ : *upper_).read_blocks(id, content_size, first, count, fn, mode);
}

Result<ContentState> TieredCache::put_blocks(const ContentId& id, std::uint64_t content_size,
                                             std::uint32_t first, std::span<const std::byte> data) {
  return upper_->put_blocks(id, content_size, first, data);
}

Result<ContentState> TieredCache::verify_content(const ContentId& id, std::uint64_t content_size) {
  if (!from_lower(id)) return upper_->verify_content(id, content_size);
  auto r = lower_->verify_content(id, content_size);
  if (!r && r.error().kind == CacheError::Kind::kCorrupt) {
    spdlog::warn("read-only cache {}: {} does not match its hash; using the writable cache {}",
                 lower_->dir().string(), id.to_string(), upper_->dir().string());
  }
  return r;
}

Result<std::optional<ContentState>> TieredCache::content_state(const ContentId& id) {
  // (The verified flag of a lower content was set by whoever built the image: whether it is
  // taken at its word is the read path's decision, as for any shared cache.)
  return from_lower(id) ? lower_->content_state(id) : upper_->content_state(id);
}

Result<bool> TieredCache::granted(const ContentId& id, Audiences readable) {
  auto up = upper_->granted(id, readable);
  if (up && *up) return up;
  auto low = lower_->granted(id, readable);
  if (low && *low) return low;
  return up;
}

}  // namespace whfs::cache
