#include "fs/reader/fetcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <thread>

#include "fs/common/hash.h"
#include "fs/reader/fetcher_internal.h"

namespace whfs::reader {

ReadError from_hub(const hub::HubError& e) {
  // The one Hub-to-filesystem mapping (hub_error.h), in the reader's terms.
  FsErr f = hub::to_fs_error(e);
  switch (f.kind) {
    case FsErrorKind::kAccess:
      return {ReadError::Kind::kAccess, std::move(f.message)};
    case FsErrorKind::kNotFound:
      return {ReadError::Kind::kNotFound, std::move(f.message)};
    case FsErrorKind::kTimedOut:
      return {ReadError::Kind::kTimedOut, std::move(f.message)};
    case FsErrorKind::kInterrupted:
      return {ReadError::Kind::kCancelled, std::move(f.message)};
    default:
      return {ReadError::Kind::kIo, std::move(f.message)};
  }
}

Hasher hasher_for(const FileContent& c) {
  return c.id.kind() == cache::ContentId::Kind::kSha256 ? Hasher(HashAlgo::kSha256)
                                                        : git_blob_hasher(c.size);
}

Fetcher::Fetcher(cache::BlockStore& store, hub::HubClient& hub, FetcherConfig config)
    : store_(store), hub_(hub), config_(config) {
  max_blocks_ = static_cast<std::uint32_t>(
      std::max<std::uint64_t>(1, config_.max_request / store_.block_size()));
  for (unsigned i = 0; i < std::max(1u, config_.workers); ++i) {
    workers_.emplace_back([this] { worker(); });
  }
}

Fetcher::~Fetcher() { shutdown(); }

void Fetcher::shutdown() {
  std::deque<std::shared_ptr<Flight>> left;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    left.insert(left.end(), demand_q_.begin(), demand_q_.end());
    left.insert(left.end(), prefetch_q_.begin(), prefetch_q_.end());
    demand_q_.clear();
    prefetch_q_.clear();
  }
  work_cv_.notify_all();
  for (auto& f : left) {
    if (!f->started.exchange(true)) {
      finish(f, ReadError{ReadError::Kind::kCancelled, "shutting down"});
    }
  }
  for (auto& t : workers_) t.join();
  workers_.clear();
  // Memory fetches whose pieces were cancelled above never finish: break their cycles too.
  std::lock_guard lock(mu_);
  for (auto& [id, m] : memory_fetches_) m->pieces.clear();
  memory_fetches_.clear();
}

void Fetcher::set_corrupt_listener(std::function<void(const cache::ContentId&)> listener) {
  std::lock_guard lock(mu_);
  corrupt_listener_ = std::move(listener);
}

FetcherStats Fetcher::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

// ---- trust, quarantine, recent failures -------------------------------------------------

void Fetcher::trust(const cache::ContentId& id) {
  {
    std::unique_lock lock(trusted_mu_);
    trusted_.insert(id);
  }
  std::lock_guard lock(mu_);
  suspect_.erase(id);
}

bool Fetcher::trusted(const cache::ContentId& id) const {
  std::shared_lock lock(trusted_mu_);
  return trusted_.count(id) != 0;
}

bool Fetcher::streams(const cache::ContentId& id) const {
  if (config_.serving != Serving::kStreaming) return false;
  std::lock_guard lock(mu_);
  return suspect_.count(id) == 0;
}

bool Fetcher::servable_from_cache(const cache::ContentId& id) const {
  return streams(id) || config_.trust_cache || trusted(id);
}

cache::BlockStore::ReadMode Fetcher::cache_read_mode(const cache::ContentId& id) const {
  return streams(id) ? cache::BlockStore::ReadMode::kPartial
                     : cache::BlockStore::ReadMode::kVerified;
}

std::optional<ReadError> Fetcher::blocked(const cache::ContentId& id, const std::string& path) {
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  if (const auto q = quarantine_.find(id); q != quarantine_.end()) {
    if (now < q->second) {
      stats_.failed_fast++;
      return ReadError{ReadError::Kind::kCorrupt, path + ": its download did not match its hash"};
    }
    quarantine_.erase(q);
  }
  if (const auto f = failed_.find(id); f != failed_.end()) {
    if (now < f->second.until) {
      stats_.failed_fast++;
      ReadError e = f->second.error;
      e.message += " (failed moments ago; not tried again yet)";
      return e;
    }
    failed_.erase(f);
  }
  return std::nullopt;
}

void Fetcher::remember_failure(const FileContent& c, const ReadError& e) {
  if (e.kind == ReadError::Kind::kCancelled || config_.failure_memo.count() <= 0) return;
  std::lock_guard lock(mu_);
  failed_[c.id] = Failure{Clock::now() + config_.failure_memo, e};
  if (failed_.size() > 10000) failed_.erase(failed_.begin());  // bound memory
}

std::shared_ptr<const MemoryContent> Fetcher::memory_hit(const cache::ContentId& id) {
  std::lock_guard lock(mu_);
  for (auto it = memory_.begin(); it != memory_.end(); ++it) {
    if (it->first == id) {
      memory_.splice(memory_.begin(), memory_, it);  // most recently used first
      return memory_.front().second;
    }
  }
  return nullptr;
}

// ---- ensure ------------------------------------------------------------------------------

Expected<Source, ReadError> Fetcher::ensure(const FileContent& content, BlockRange need,
                                            const WaitPolicy& wait,
                                            std::optional<BlockRange> then) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return unexpected(ReadError{ReadError::Kind::kCancelled, "shutting down"});
  }
  if (auto e = blocked(content.id, content.path)) return unexpected(std::move(*e));
  if (auto m = memory_hit(content.id)) return Source{std::move(m)};
  auto r = streams(content.id) ? ensure_streaming(content, need, wait, then)
                               : ensure_verified(content, need, wait);
  if (!r) {
    remember_failure(content, r.error());
    if (r.error().kind == ReadError::Kind::kCancelled && wait.cancel && wait.cancel->cancelled()) {
      std::lock_guard lock(mu_);
      stats_.interrupted++;
    }
  }
  return r;
}

Expected<std::string, ReadError> Fetcher::peek(const FileContent& c, std::uint64_t offset,
                                               std::size_t size, const WaitPolicy& wait) {
  if (offset >= c.size) return std::string();
  size = static_cast<std::size_t>(std::min<std::uint64_t>(size, c.size - offset));
  {
    std::lock_guard lock(mu_);
    if (stopping_) return unexpected(ReadError{ReadError::Kind::kCancelled, "shutting down"});
  }
  if (auto e = blocked(c.id, c.path)) return unexpected(std::move(*e));
  if (auto m = memory_hit(c.id)) {
    return std::string(reinterpret_cast<const char*>(m->data.get() + offset), size);
  }
  const BlockRange need = blocks_for(offset, size, c.size, store_.block_size());
  const bool from_cache = !config_.peek_verified_only || config_.trust_cache || trusted(c.id);
  for (int attempt = 0; from_cache && attempt < 3; ++attempt) {
    if (auto bytes = copy_present(c, offset, size)) return std::move(*bytes);
    // A complete content that was not hashed yet is withheld by the cache: hash it (locally).
    if (auto state = store_.content_state(c.id);
        state && *state && (*state)->complete() && !(*state)->verified) {
      if (auto v = verify_or_retry(c); !v) return unexpected(v.error());
      continue;
    }
    auto missing = missing_blocks(c, need);
    if (!missing) break;
    if (missing->empty()) continue;
    auto r = fetch_blocks(c, *missing, wait, std::nullopt);
    if (!r) {
      remember_failure(c, r.error());
      return unexpected(r.error());
    }
    if (*r == Stored::kNotKept) break;
  }
  // The cache cannot hold them: one GET of just these bytes.
  std::string out(size, '\0');
  auto got = get_range(c, offset, std::as_writable_bytes(std::span<char>(out)),
                       Clock::now() + config_.request_timeout, wait.cancel);
  if (!got) return unexpected(got.error());
  return out;
}

std::optional<std::string> Fetcher::copy_present(const FileContent& c, std::uint64_t offset,
                                                 std::size_t size) {
  const std::uint32_t bs = store_.block_size();
  const BlockRange r = blocks_for(offset, size, c.size, bs);
  std::string out;
  out.reserve(size);
  bool gap = false;
  auto missing = store_.read_blocks(
      c.id, c.size, r.first, r.count,
      [&](std::uint32_t index, std::span<const std::byte> bytes) {
        const std::uint64_t start = static_cast<std::uint64_t>(index) * bs;
        if (gap || start > offset + out.size()) {
          gap = true;
          return;
        }
        const std::uint64_t from = offset + out.size() - start;
        const std::uint64_t to = std::min<std::uint64_t>(offset + size - start, bytes.size());
        if (from < to) {
          out.append(reinterpret_cast<const char*>(bytes.data() + from),
                     static_cast<std::size_t>(to - from));
        }
      },
      cache::BlockStore::ReadMode::kPartial);
  if (!missing || !missing->empty() || gap || out.size() != size) return std::nullopt;
  return out;
}

Expected<Source, ReadError> Fetcher::ensure_verified(const FileContent& c, BlockRange need,
                                                     const WaitPolicy& wait) {
  const std::uint32_t total = block_count(c.size, store_.block_size());
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto state = store_.content_state(c.id);
    if (!state)
      return fetch_to_memory(c, wait, "the cache cannot be read: " + state.error().message);
    if (*state && (*state)->verified) {
      if (config_.trust_cache || trusted(c.id)) return Source{};
      if (auto v = verify_or_retry(c); !v) return unexpected(v.error());
      if (trusted(c.id)) return Source{};
      continue;  // blocks went missing while it was hashed
    }
    auto missing = missing_blocks(c, BlockRange{0, total});
    if (!missing) return fetch_to_memory(c, wait, "the cache cannot be read");
    if (missing->empty()) {  // complete, not verified yet
      if (auto v = verify_or_retry(c); !v) return unexpected(v.error());
      continue;
    }
    {
      // Its blocks are changing: whatever this process verified before no longer holds.
      std::unique_lock lock(trusted_mu_);
      trusted_.erase(c.id);
    }
    // Another process sharing the cache may be downloading it already: wait for its blocks
    // rather than have the Hub serve them twice.
    auto claimed = claim_or_wait(c, wait);
    if (!claimed) return unexpected(claimed.error());
    if (claimed->other_finished) continue;
    missing = missing_blocks(c, BlockRange{0, total});  // (a stalled holder left some)
    if (!missing) return fetch_to_memory(c, wait, "the cache cannot be read");
    if (missing->empty()) continue;
    // The read's own blocks first, then the rest of the file from there on, then the front.
    std::stable_partition(missing->begin(), missing->end(),
                          [&](std::uint32_t b) { return b >= need.first && b < need.end(); });
    const auto rest = std::find_if(missing->begin(), missing->end(), [&](std::uint32_t b) {
      return !(b >= need.first && b < need.end());
    });
    std::stable_partition(rest, missing->end(), [&](std::uint32_t b) { return b >= need.end(); });
    auto r = fetch_blocks(c, *missing, wait, std::nullopt);
    if (!r) return unexpected(r.error());
    if (*r == Stored::kNotKept) return fetch_to_memory(c, wait, "the cache could not keep it");
  }
  return unexpected(ReadError{ReadError::Kind::kIo,
                              c.path + ": its blocks keep leaving the cache while it is read"});
}

Expected<Source, ReadError> Fetcher::ensure_streaming(const FileContent& c, BlockRange need,
                                                      const WaitPolicy& wait,
                                                      std::optional<BlockRange> then) {
  auto state = store_.content_state(c.id);
  if (!state) return fetch_to_memory(c, wait, "the cache cannot be read: " + state.error().message);
  if (*state && (*state)->complete()) {
    if (!(*state)->verified) {
      if (auto v = verify_or_retry(c); !v) return unexpected(v.error());
    }
    return Source{};
  }
  auto missing = missing_blocks(c, need);
  if (!missing) return fetch_to_memory(c, wait, "the cache cannot be read");
  if (missing->empty()) return Source{};
  auto r = fetch_blocks(c, *missing, wait, then);
  if (!r) return unexpected(r.error());
  if (*r == Stored::kNotKept) return fetch_to_memory(c, wait, "the cache could not keep it");
  return Source{};
}

Expected<Fetcher::ClaimOutcome, ReadError> Fetcher::claim_or_wait(const FileContent& c,
                                                                  const WaitPolicy& wait) {
  {
    std::lock_guard lock(mu_);
    if (auto it = claims_.find(c.id); it != claims_.end()) {
      if (auto held = it->second.lock()) return ClaimOutcome{std::move(held), false};
      claims_.erase(it);
    }
  }
  auto take = [&]() -> std::optional<ClaimOutcome> {
    auto claim = store_.claim_download(c.id);
    if (!claim) return ClaimOutcome{};  // nothing to coordinate with: download
    if (!*claim) return std::nullopt;   // another process holds it
    std::shared_ptr<cache::BlockStore::DownloadClaim> shared(std::move(*claim));
    std::lock_guard lock(mu_);
    claims_[c.id] = shared;
    return ClaimOutcome{std::move(shared), false};
  };
  if (auto mine = take()) return *mine;
  {
    std::lock_guard lock(mu_);
    stats_.shared_waits++;
  }
  // Wait for the other process's blocks; take over when it dies (its claim goes) or makes no
  // progress for claim_takeover.
  std::uint32_t last_present = 0;
  Deadline last_progress = Clock::now();
  auto pause = std::chrono::milliseconds(5);
  while (true) {
    const Deadline until = Clock::now() + pause;
    if (wait.cancel != nullptr) {
      wait.cancel->wait_until(progress_mu_, progress_cv_, until, [] { return false; });
      if (wait.cancel->cancelled()) {
        return unexpected(ReadError{ReadError::Kind::kCancelled,
                                    c.path + ": the reader went away while waiting"});
      }
    } else {
      std::this_thread::sleep_until(until);
    }
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
    auto st = store_.content_state(c.id);
    if (!st) return ClaimOutcome{};
    if (*st && (*st)->complete()) return ClaimOutcome{nullptr, true};
    const std::uint32_t present = *st ? (*st)->present : 0;
    if (present != last_present) {
      last_present = present;
      last_progress = Clock::now();
    }
    if (auto mine = take()) return *mine;
    if (Clock::now() - last_progress >= config_.claim_takeover) {
      spdlog::warn(
          "{}: the process downloading it for the cache made no progress for {} s; "
          "downloading the rest here",
          c.path, config_.claim_takeover.count());
      std::lock_guard lock(mu_);
      stats_.takeovers++;
      return ClaimOutcome{};
    }
  }
}

std::optional<std::vector<std::uint32_t>> Fetcher::missing_blocks(const FileContent& c,
                                                                  BlockRange r) {
  auto missing = store_.read_blocks(
      c.id, c.size, r.first, r.count, [](std::uint32_t, std::span<const std::byte>) {},
      cache::BlockStore::ReadMode::kPresence);
  if (!missing) {
    spdlog::warn("{}: cache read failed ({})", c.path, missing.error().message);
    return std::nullopt;
  }
  return std::move(*missing);
}

}  // namespace whfs::reader
