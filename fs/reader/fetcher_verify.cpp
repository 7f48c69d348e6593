// The fetcher's checks: whole-file verification (once per content, a mismatch downloads it
// once more), and the path for contents the cache cannot keep: downloaded and verified in
// memory.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "fs/reader/fetcher_internal.h"

namespace whfs::reader {

// ---- the memory path ---------------------------------------------------------------------

Expected<Source, ReadError> Fetcher::fetch_to_memory(const FileContent& c, const WaitPolicy& wait,
                                                     const std::string& why) {
  std::shared_ptr<MemoryFetch> m;
  std::vector<std::shared_ptr<Flight>> pieces;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return unexpected(ReadError{ReadError::Kind::kCancelled, "shutting down"});
    if (auto it = memory_fetches_.find(c.id); it != memory_fetches_.end()) {
      m = it->second;
      stats_.waits_joined++;
    } else {
      if (c.size > config_.memory_limit) {
        return unexpected(ReadError{
            ReadError::Kind::kIo, c.path + ": not served: " + why + ", and at " +
                                      std::to_string(c.size >> 20) +
                                      " MiB it is larger than the memory it could be verified in"});
      }
      // Room for it: forget verified contents, least recently used first (open files keep
      // theirs alive).
      while (memory_bytes_ + c.size > config_.memory_limit && !memory_.empty()) {
        memory_bytes_ -= memory_.back().second->size;
        memory_.pop_back();
      }
      if (memory_bytes_ + c.size > config_.memory_limit) {
        return unexpected(ReadError{
            ReadError::Kind::kIo,
            c.path + ": not served: " + why + ", and the memory to verify it in is in use"});
      }
      spdlog::info("{}: {}; verifying it in memory", c.path, why);
      memory_bytes_ += c.size;
      stats_.in_memory++;
      m = std::make_shared<MemoryFetch>(c);
      m->data.reset(new std::byte[std::max<std::uint64_t>(1, c.size)]);  // not value-initialised
      const std::uint32_t total = block_count(c.size, store_.block_size());
      for (const auto& piece : split(BlockRange{0, total}, max_blocks_)) {
        auto f = std::make_shared<Flight>(c, piece, true);
        f->memory = m;
        m->pieces.push_back(f);
      }
      m->left = static_cast<std::uint32_t>(m->pieces.size());
      memory_fetches_[c.id] = m;
      if (m->pieces.empty()) {  // an empty file
        memory_fetches_.erase(c.id);
        memory_bytes_ -= c.size;
        auto empty = std::make_shared<MemoryContent>();
        return Source{std::move(empty)};
      }
      for (const auto& f : m->pieces) demand_q_.push_back(f);
    }
    pieces = m->pieces;
  }
  work_cv_.notify_all();
  transfers_.wait(c.id, c.path, c.size);
  auto w = wait_all(pieces, progress_mu_, progress_cv_, wait, c.path);
  transfers_.unwait(c.id);
  if (!w) return unexpected(w.error());
  std::lock_guard lock(m->mu);
  if (m->error) return unexpected(*m->error);
  return Source{m->result};
}

void Fetcher::run_memory_piece(const std::shared_ptr<Flight>& f) {
  const std::shared_ptr<MemoryFetch> m = f->memory;
  const std::uint64_t bs = store_.block_size();
  const std::uint64_t offset = static_cast<std::uint64_t>(f->range.first) * bs;
  const std::uint64_t end =
      std::min(f->content.size, static_cast<std::uint64_t>(f->range.end()) * bs);
  auto got = get_range(f->content, offset, std::span(m->data.get() + offset, end - offset),
                       Clock::now() + config_.request_timeout, nullptr);
  if (!got) {
    std::lock_guard lock(m->mu);
    if (!m->error) m->error = got.error();
  }
  // The last piece verifies the whole content before its own flight is marked done, so that a
  // waiter that sees every piece done also sees the outcome.
  if (--m->left == 0) finish_memory_fetch(m);
  finish(f, std::nullopt);
}

void Fetcher::finish_memory_fetch(const std::shared_ptr<MemoryFetch>& m) {
  const FileContent& c = m->content;
  std::optional<ReadError> error;
  {
    std::lock_guard lock(m->mu);
    error = m->error;
  }
  for (int attempt = 0; !error; ++attempt) {
    Hasher h = hasher_for(c);
    h.update(std::span<const std::byte>(m->data.get(), c.size));
    const auto digest = h.finish();
    if (std::equal(digest.begin(), digest.end(), c.id.digest().begin(), c.id.digest().end())) {
      break;
    }
    {
      std::lock_guard lock(mu_);
      stats_.corrupt++;
    }
    report_corrupt(c);
    if (attempt >= 1) {
      spdlog::error(
          "{}: corrupt download: its bytes do not match {} twice; reads fail with EIO "
          "for {} s",
          c.path, c.id.to_string(), config_.corrupt_quarantine.count());
      std::lock_guard lock(mu_);
      quarantine_[c.id] = Clock::now() + config_.corrupt_quarantine;
      error = ReadError{ReadError::Kind::kCorrupt,
                        c.path + ": downloaded bytes do not match " + c.id.to_string(), true};
      break;
    }
    spdlog::warn("{}: downloaded bytes do not match {}; downloading the file again", c.path,
                 c.id.to_string());
    for (std::uint64_t off = 0; off < c.size && !error; off += config_.max_request) {
      const std::uint64_t n = std::min<std::uint64_t>(config_.max_request, c.size - off);
      auto got = get_range(c, off, std::span(m->data.get() + off, n),
                           Clock::now() + config_.request_timeout, nullptr);
      if (!got) error = got.error();
    }
  }
  std::shared_ptr<const MemoryContent> result;
  if (!error) {
    auto mc = std::make_shared<MemoryContent>();
    mc->data = std::move(m->data);
    mc->size = c.size;
    result = std::move(mc);
  }
  {
    std::lock_guard lock(mu_);
    memory_fetches_.erase(c.id);
    // Each piece holds the fetch and the fetch its pieces: break the cycle now that no one can
    // join (waiters hold their own copies of the pieces).
    m->pieces.clear();
    if (result) {
      memory_.emplace_front(c.id, result);
    } else {
      memory_bytes_ -= c.size;
    }
  }
  std::lock_guard lock(m->mu);
  m->error = error;
  m->result = std::move(result);
}

// ---- verification ------------------------------------------------------------------------

Expected<void, ReadError> Fetcher::verify_or_retry(const FileContent& c) {
  std::shared_ptr<Verification> v;
  bool mine = false;
  {
    std::lock_guard lock(mu_);
    auto& slot = verifying_[c.id];
    if (!slot) {
      slot = std::make_shared<Verification>();
      mine = true;
    }
    v = slot;
  }
  if (!mine) {
    std::unique_lock lock(v->mu);
    v->cv.wait(lock, [&] { return v->done; });
    if (v->result) return unexpected(*v->result);
    return {};
  }
  auto r = verify_once(c);
  {
    std::lock_guard lock(mu_);
    verifying_.erase(c.id);
  }
  std::lock_guard lock(v->mu);
  v->done = true;
  if (!r) v->result = r.error();
  v->cv.notify_all();
  return r;
}

Expected<void, ReadError> Fetcher::verify_once(const FileContent& c) {
  for (int attempt = 0;; ++attempt) {
    // Unless the cache is trusted, hash it here even when another process recorded it as
    // verified: one process's mistake or malice must not become every process's bytes.
    auto v = config_.trust_cache ? store_.verify_content(c.id, c.size)
                                 : store_.recheck_content(c.id, c.size);
    if (v) {
      if (v->verified) {
        trust(c.id);
        std::lock_guard lock(mu_);
        stats_.rechecks++;
      }
      return {};  // (or blocks went missing while hashing: the caller looks again)
    }
    if (v.error().kind != cache::CacheError::Kind::kCorrupt) {
      return unexpected(ReadError{ReadError::Kind::kIo, c.path + ": " + v.error().message});
    }
    {
      std::lock_guard lock(mu_);
      stats_.corrupt++;
    }
    report_corrupt(c);
    if (attempt >= 1) break;
    spdlog::warn("{}: downloaded bytes do not match {}; downloading the file again", c.path,
                 c.id.to_string());
    // The cache dropped every block: fetch the whole content once more, in order.
    const auto total = block_count(c.size, store_.block_size());
    for (const auto& piece : split(BlockRange{0, total}, max_blocks_)) {
      auto put = download_and_put(c, piece, Clock::now() + config_.request_timeout, nullptr);
      if (!put) return unexpected(put.error());
      if (!*put) {
        return unexpected(ReadError{ReadError::Kind::kIo, c.path + ": " + put->error().message});
      }
    }
  }
  spdlog::error(
      "{}: corrupt download: its bytes do not match {} twice; reads fail with EIO for {} s", c.path,
      c.id.to_string(), config_.corrupt_quarantine.count());
  std::lock_guard lock(mu_);
  quarantine_[c.id] = Clock::now() + config_.corrupt_quarantine;
  return unexpected(ReadError{ReadError::Kind::kCorrupt,
                              c.path + ": downloaded bytes do not match " + c.id.to_string(),
                              true});
}

void Fetcher::report_corrupt(const FileContent& c) {
  std::function<void(const cache::ContentId&)> listener;
  {
    // Streaming stops for this content: its next download is served only once it matched.
    std::lock_guard lock(mu_);
    listener = corrupt_listener_;
    suspect_.insert(c.id);
  }
  if (listener) listener(c.id);
}

}  // namespace whfs::reader
