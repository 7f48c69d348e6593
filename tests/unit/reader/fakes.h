#pragma once
// Test doubles for the read path: an in-memory BlockStore and a HubClient serving one
// content, both counting what they are asked and able to misbehave on request.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "cache/block_store.h"
#include "fs/common/hash.h"
#include "fs/hub/hub_client.h"

namespace whfs::reader::testing {

class MemoryStore : public cache::BlockStore {
 public:
  explicit MemoryStore(std::uint32_t block) : block_(block) {}
  std::uint32_t block_size() const override { return block_; }

  cache::Result<std::vector<std::uint32_t>> read_blocks(const cache::ContentId& id,
                                                        std::uint64_t size, std::uint32_t first,
                                                        std::uint32_t count, BlockFn fn,
                                                        ReadMode mode) override {
    std::lock_guard lock(mu_);
    (mode == ReadMode::kPresence ? presence_reads : serving_reads)++;
    std::vector<std::uint32_t> missing;
    Content& c = contents_.count(id.to_string()) != 0 ? contents_[id.to_string()] : empty_;
    const bool hidden =
        (mode == ReadMode::kPartial && c.complete(size, block_) && !c.verified) ||
        ((mode == ReadMode::kVerified || mode == ReadMode::kHashedHere) && !c.verified);
    for (std::uint32_t b = first; b < first + count; ++b) {
      auto it = c.blocks.find(b);
      if (it == c.blocks.end() || hidden) {
        missing.push_back(b);
        continue;
      }
      if (mode != ReadMode::kPresence) fn(b, std::as_bytes(std::span(it->second)));
    }
    last_read = id.to_string();  // like the real cache's recency record, after the callbacks
    return missing;
  }

  cache::Result<cache::ContentState> put_blocks(const cache::ContentId& id, std::uint64_t size,
                                                std::uint32_t first,
                                                std::span<const std::byte> data) override {
    std::lock_guard lock(mu_);
    puts++;
    if (full) return cache::cache_error(cache::CacheError::Kind::kFull, "full");
    if (refuse) return cache::cache_error(*refuse, "refused");
    auto& c = contents_[id.to_string()];
    for (std::size_t off = 0; off < data.size(); off += block_) {
      const auto n = std::min<std::size_t>(block_, data.size() - off);
      auto& blk = c.blocks[first + static_cast<std::uint32_t>(off / block_)];
      if (blk.empty()) blk.assign(reinterpret_cast<const char*>(data.data() + off), n);
    }
    return state(c, size);
  }

  cache::Result<cache::ContentState> verify_content(const cache::ContentId& id,
                                                    std::uint64_t size) override {
    return verify(id, size);
  }

  // Stores `bytes` as the whole content of `id`, recorded as verified whether or not they
  // match: what another process sharing the cache could leave there, granted to `audience`
  // (by default the public one the tests' readers have; nullopt: to nobody).
  void plant(const cache::ContentId& id, const std::string& bytes,
             std::optional<std::string> audience = std::string(cache::kPublicAudience)) {
    std::lock_guard lock(mu_);
    if (audience) grants_.emplace(id.to_string(), *audience);
    auto& c = contents_[id.to_string()];
    c.blocks.clear();
    for (std::size_t off = 0; off < bytes.size(); off += block_) {
      c.blocks[static_cast<std::uint32_t>(off / block_)] = bytes.substr(off, block_);
    }
    c.verified = true;
    c.size = bytes.size();
  }

  // What the store was asked: reads that serve bytes, reads of which blocks are stored (kPresence),
  // states (content_state), puts and verifications.
  std::atomic<int> serving_reads{0};
  std::atomic<int> presence_reads{0};
  std::atomic<int> states{0};
  std::atomic<int> puts{0};
  std::atomic<int> verifies{0};
  std::atomic<int> hashed{0};  // verifications that hashed the bytes
  std::atomic<int> pins{0};
  std::atomic<bool> full{false};
  std::optional<cache::CacheError::Kind> refuse;  // every put fails so (kBusy, kReadOnly...)

  // What a shared cache can do to a content behind a reader's back.
  void lose(const cache::ContentId& id) {  // evicted (by this or another process)
    std::lock_guard lock(mu_);
    contents_.erase(id.to_string());
  }
  void corrupt_block(const cache::ContentId& id, std::uint32_t index) {  // damage or malice
    std::lock_guard lock(mu_);
    auto& b = contents_[id.to_string()].blocks[index];
    if (!b.empty()) b[0] = static_cast<char>(~b[0]);
  }
  std::string last_read;  // the content of the latest read_blocks (under mu_)

 private:
  cache::Result<cache::ContentState> verify(const cache::ContentId& id, std::uint64_t size) {
    std::lock_guard lock(mu_);
    verifies++;
    auto& c = contents_[id.to_string()];
    if (!c.complete(size, block_)) return state(c, size);
    hashed++;
    c.verified = false;
    Hasher h(HashAlgo::kSha256);
    for (auto& [i, b] : c.blocks) h.update(b);
    if (to_hex(h.finish()) != id.hex()) {
      c.blocks.clear();
      return cache::cache_error(cache::CacheError::Kind::kCorrupt, "hash mismatch");
    }
    c.verified = true;
    return state(c, size);
  }

 public:
  cache::Result<std::optional<cache::ContentState>> content_state(
      const cache::ContentId& id) override {
    std::lock_guard lock(mu_);
    states++;
    auto it = contents_.find(id.to_string());
    if (it == contents_.end() || it->second.blocks.empty()) {
      return std::optional<cache::ContentState>();
    }
    return std::optional<cache::ContentState>(state(it->second, it->second.size));
  }

  cache::Result<void> pin(const cache::ContentId&) override {
    pins++;
    return {};
  }
  void unpin(const cache::ContentId&) override { pins--; }
  // Another process holds every claim while `claimed_elsewhere` is set.
  cache::Result<std::unique_ptr<DownloadClaim>> claim_download(const cache::ContentId&) override {
    if (claimed_elsewhere) return std::unique_ptr<DownloadClaim>();
    return std::make_unique<DownloadClaim>();
  }
  std::atomic<bool> claimed_elsewhere{false};

  cache::Result<bool> granted(const cache::ContentId& id, cache::Audiences readable) override {
    std::lock_guard lock(mu_);
    for (const auto& a : readable) {
      if (grants_.count({id.to_string(), a}) != 0) return true;
    }
    return false;
  }
  cache::Result<void> grant(const cache::ContentId& id, cache::Audience audience) override {
    std::lock_guard lock(mu_);
    grants_.emplace(id.to_string(), std::string(audience.name));
    return {};
  }
  std::size_t grant_count() {
    std::lock_guard lock(mu_);
    return grants_.size();
  }

 private:
  struct Content {
    std::map<std::uint32_t, std::string> blocks;
    bool verified = false;
    std::uint64_t size = 0;
    bool complete(std::uint64_t s, std::uint32_t bs) const {
      return blocks.size() == (s + bs - 1) / bs;
    }
  };
  cache::ContentState state(Content& c, std::uint64_t size) {
    c.size = size;
    return cache::ContentState{static_cast<std::uint32_t>(c.blocks.size()),
                               static_cast<std::uint32_t>((size + block_ - 1) / block_),
                               c.verified};
  }
  std::uint32_t block_;
  std::mutex mu_;
  std::map<std::string, Content> contents_;
  std::set<std::pair<std::string, std::string>> grants_;  // (content, audience)
  Content empty_;
};

// The audience of a mount without a token (cache/audience.h): what the tests' readers read as.
inline const cache::AccessScope& public_scope() {
  static const cache::AccessScope scope{std::string(cache::kPublicAudience)};
  return scope;
}

// Serves `bytes` for any file; can delay, fail, flip a byte, or hold requests until released.
class MemoryHub : public hub::HubClient {
 public:
  explicit MemoryHub(std::string bytes) : bytes_(std::move(bytes)) {}

  Expected<hub::Revision, hub::HubError> resolve_revision(std::string_view, Deadline) override {
    return hub::Revision{std::string(40, 'a'), ""};
  }
  Expected<std::vector<RemoteEntry>, hub::HubError> list_folder(std::string_view, std::string_view,
                                                                bool, Deadline,
                                                                std::size_t) override {
    return std::vector<RemoteEntry>{};
  }
  Expected<void, hub::HubError> stream_range(const hub::FileRef&, std::uint64_t offset,
                                             std::uint64_t length, Deadline deadline,
                                             const CancelFlag* abandon, ChunkFn consume) override {
    {
      std::lock_guard lock(mu_);
      calls++;
      ranges.emplace_back(offset, static_cast<std::size_t>(length));
    }
    {
      std::unique_lock lock(gate_mu_);
      auto opened = [&] { return open_ || (abandon != nullptr && abandon->cancelled()); };
      // (Polls for the abandon flag: the fake has no transfer to abort.)
      while (!opened() && Clock::now() < deadline) {
        gate_cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(10)),
                            opened);
      }
      if (abandon != nullptr && abandon->cancelled()) {
        abandoned++;
        return unexpected(hub::HubError{hub::HubErrorKind::kCancelled, "abandoned", 0, "", "", ""});
      }
      if (!open_) {
        return unexpected(hub::HubError{hub::HubErrorKind::kTimeout, "held", 0, "", "", ""});
      }
    }
    if (fail)
      return unexpected(hub::HubError{hub::HubErrorKind::kUnavailable, "down", 503, "", "", ""});
    if (deny) {
      return unexpected(
          hub::HubError{hub::HubErrorKind::kForbidden, "no access", 403, "GatedRepo", "", ""});
    }
    std::string out =
        bytes_.substr(static_cast<std::size_t>(offset), static_cast<std::size_t>(length));
    if (corrupt && offset == 0 && !out.empty()) out[0] = static_cast<char>(~out[0]);
    if (const std::int64_t at = corrupt_at.load();
        at >= 0 && static_cast<std::uint64_t>(at) >= offset &&
        static_cast<std::uint64_t>(at) < offset + out.size()) {
      auto& b = out[static_cast<std::size_t>(at - static_cast<std::int64_t>(offset))];
      b = static_cast<char>(~b);
    }
    if (delay.load().count() > 0) std::this_thread::sleep_for(delay.load());
    // The body arrives in pieces, as a transfer delivers it; with fail_midway, half of it and
    // then the connection drops.
    const std::size_t upto = fail_midway ? out.size() / 2 : out.size();
    for (std::size_t n = 0; n < upto;) {
      if (n > 0 && piece_delay.load().count() > 0) std::this_thread::sleep_for(piece_delay.load());
      const std::size_t next = std::min(upto, n + fill_piece.load());
      consume(std::as_bytes(std::span(out)).subspan(n, next - n));
      n = next;
    }
    if (fail_midway) {
      if (down_after_midway) fail = true;  // the link is gone from now on
      return unexpected(
          hub::HubError{hub::HubErrorKind::kUnavailable, "reset midway", 0, "", "", ""});
    }
    return {};
  }
  static constexpr std::size_t kFillPiece = 100000;
  const hub::HubStats& stats() const override { return stats_; }
  void cancel() override {}

  // Requests wait until released (to line up concurrent readers).
  void hold() {
    std::lock_guard lock(gate_mu_);
    open_ = false;
  }
  void release() {
    {
      std::lock_guard lock(gate_mu_);
      open_ = true;
    }
    gate_cv_.notify_all();
  }

  std::atomic<int> calls{0};
  std::atomic<int> abandoned{0};  // calls that ended because nobody wanted them any more
  std::atomic<bool> fail{false};
  std::atomic<bool> deny{false};               // 403: this credential may not read the file
  std::atomic<bool> fail_midway{false};        // deliver half of each range, then fail
  std::atomic<bool> down_after_midway{false};  // ... and every later request fails (fail)
  std::atomic<bool> corrupt{false};            // flip the first byte of the file
  std::atomic<std::int64_t> corrupt_at{-1};    // flip the byte at this offset (-1: none)
  std::atomic<std::chrono::milliseconds> delay{std::chrono::milliseconds(0)};  // per request
  // A slow link: the body arrives in pieces of `fill_piece` bytes, `piece_delay` apart.
  std::atomic<std::size_t> fill_piece{kFillPiece};
  std::atomic<std::chrono::milliseconds> piece_delay{std::chrono::milliseconds(0)};
  std::vector<std::pair<std::uint64_t, std::size_t>> ranges;  // guarded by mu_
  std::mutex mu_;

 private:
  std::string bytes_;
  hub::HubStats stats_;
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool open_ = true;
};

}  // namespace whfs::reader::testing
