// The fetcher's downloads: flights of consecutive blocks, the worker pool that runs them, and
// the waiting for them.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "fs/reader/fetcher_internal.h"

namespace whfs::reader {

// ---- waiting for flights -----------------------------------------------------------------

Expected<Fetcher::Stored, ReadError> Fetcher::fetch_blocks(
    const FileContent& content, const std::vector<std::uint32_t>& missing, const WaitPolicy& wait,
    std::optional<BlockRange> then) {
  std::vector<std::shared_ptr<Flight>> waits;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return unexpected(ReadError{ReadError::Kind::kCancelled, "shutting down"});
    std::vector<std::uint32_t> todo;
    for (std::uint32_t b : missing) {
      const auto it = inflight_.find(Key{content.id, b});
      if (it == inflight_.end() || it->second->abandon.cancelled()) {
        todo.push_back(b);  // (an abandoned download ends with an error: start a new one)
        continue;
      }
      auto& f = it->second;
      if (std::find(waits.begin(), waits.end(), f) == waits.end()) {
        waits.push_back(f);
        stats_.waits_joined++;
        if (!f->demand && !f->started.load()) {
          // Promote: a reader waits for this prefetch now, so it runs first.
          f->demand = true;
          demand_q_.push_back(f);
        }
      }
    }
    // Runs of consecutive blocks in the order asked (the caller's priority), each capped at
    // one request.
    std::vector<BlockRange> runs;
    for (std::uint32_t b : todo) {
      if (!runs.empty() && runs.back().end() == b && runs.back().count < max_blocks_) {
        runs.back().count++;
      } else {
        runs.push_back({b, 1});
      }
    }
    for (const auto& r : runs) {
      auto f = start_flight_locked(content, r, true);
      f->asked_by_reader = true;
      waits.push_back(std::move(f));
    }
    for (const auto& f : waits) ++f->waiters;
    if (then) prefetch_locked(content, *then);
  }
  work_cv_.notify_all();
  transfers_.wait(content.id, content.path, content.size);
  auto w = wait_all(waits, progress_mu_, progress_cv_, wait, content.path);
  transfers_.unwait(content.id);
  {
    // A download its readers all gave up on (killed, or out of patience) is dropped: it must
    // not hold a connection and a worker that the next reader needs.
    std::lock_guard lock(mu_);
    for (const auto& f : waits) {
      if (--f->waiters == 0 && f->asked_by_reader && !f->done) f->abandon.cancel();
    }
  }
  if (!w) return unexpected(w.error());
  Stored stored = Stored::kCached;
  for (const auto& f : waits) {
    std::lock_guard lock(f->mu);
    if (f->stored == Stored::kNotKept) stored = Stored::kNotKept;
  }
  return stored;
}

// ---- workers -----------------------------------------------------------------------------

void Fetcher::prefetch(const FileContent& content, BlockRange range) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    prefetch_locked(content, range);
  }
  work_cv_.notify_all();
}

void Fetcher::prefetch_locked(const FileContent& content, BlockRange range) {
  std::vector<std::uint32_t> todo;
  for (std::uint32_t b = range.first; b < range.end(); ++b) {
    if (inflight_.count(Key{content.id, b}) == 0) todo.push_back(b);
  }
  for (const auto& r : coalesce(todo, max_blocks_)) start_flight_locked(content, r, false);
}

std::shared_ptr<Fetcher::Flight> Fetcher::start_flight_locked(const FileContent& c, BlockRange r,
                                                              bool demand) {
  auto f = std::make_shared<Flight>(c, r, demand);
  for (std::uint32_t b = r.first; b < r.end(); ++b) inflight_[Key{c.id, b}] = f;
  (demand ? demand_q_ : prefetch_q_).push_back(f);
  return f;
}

void Fetcher::worker() {
  while (true) {
    std::shared_ptr<Flight> f;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !demand_q_.empty() || !prefetch_q_.empty(); });
      if (stopping_) return;
      auto& q = !demand_q_.empty() ? demand_q_ : prefetch_q_;
      f = std::move(q.front());
      q.pop_front();
      if (f->started.exchange(true)) continue;  // a promoted copy already ran
      (f->demand ? stats_.demand_requests : stats_.prefetch_requests)++;
    }
    if (f->abandon.cancelled()) {
      finish(f, ReadError{ReadError::Kind::kCancelled, "nobody waits for it any more"});
      continue;
    }
    if (f->memory) {
      run_memory_piece(f);
    } else {
      run(f);
    }
  }
}

void Fetcher::run(const std::shared_ptr<Flight>& f) {
  std::optional<ReadError> error;
  Stored stored = Stored::kCached;
  const Deadline deadline = Clock::now() + config_.request_timeout;
  // A prefetch may be overtaken by readers that fetched the same content meanwhile: skip
  // contents that are complete already (verifying them if nobody did).
  auto state = store_.content_state(f->content.id);
  const bool complete = state && *state && (*state)->complete();
  if (!complete) {
    // Download only what is still missing of the range.
    auto missing = missing_blocks(f->content, f->range);
    const std::vector<BlockRange> runs =
        missing ? coalesce(*missing, max_blocks_) : std::vector<BlockRange>{f->range};
    for (const auto& r : runs) {
      auto d = download(f->content, r, deadline, &f->abandon);
      if (!d) {
        error = d.error();
        break;
      }
      if (*d == Stored::kNotKept) stored = Stored::kNotKept;
    }
  } else if (!(*state)->verified || (config_.serving == Serving::kVerified &&
                                     !config_.trust_cache && !trusted(f->content.id))) {
    if (auto r = verify_or_retry(f->content); !r) error = r.error();
  }
  finish(f, std::move(error), stored);
}

Expected<Fetcher::Stored, ReadError> Fetcher::download(const FileContent& c, BlockRange r,
                                                       Deadline deadline,
                                                       const CancelFlag* abandon) {
  auto put = download_and_put(c, r, deadline, abandon);
  if (!put) return unexpected(put.error());
  if (!*put) {
    if (put->error().kind != cache::CacheError::Kind::kFull) {
      spdlog::warn("{}: cache write failed ({})", c.path, put->error().message);
    }
    std::lock_guard lock(mu_);
    stats_.uncached++;
    return Stored::kNotKept;  // its readers take the memory path
  }
  const bool need_check = !(*put)->verified || (config_.serving == Serving::kVerified &&
                                                !config_.trust_cache && !trusted(c.id));
  if ((*put)->complete() && need_check) {
    if (auto v = verify_or_retry(c); !v) return unexpected(v.error());
  }
  return Stored::kCached;
}

Expected<void, ReadError> Fetcher::get_range(const FileContent& c, std::uint64_t offset,
                                             std::span<std::byte> buf, Deadline deadline,
                                             const CancelFlag* abandon,
                                             const hub::HubClient::FillFn* on_fill) {
  // Counted as the bytes arrive (every 64 KiB at most once: a lock per libcurl write would
  // cost more than it tells), for `wheelhouse status` and the metrics.
  transfers_.open(c.id, c.path, c.size);
  std::size_t counted = 0;
  auto count_fn = [&](std::size_t filled) {
    if (filled >= counted + (64u << 10) || (filled == buf.size() && filled > counted)) {
      transfers_.received(c.id, filled - counted);
      counted = filled;
    }
    if (on_fill != nullptr) (*on_fill)(filled);
  };
  const hub::HubClient::FillFn counting = count_fn;
  const auto t0 = Clock::now();
  auto got = hub_.read_range(hub::FileRef{c.commit, c.path, c.size}, offset, buf, deadline, abandon,
                             &counting);
  download_latency_.observe(Clock::now() - t0);
  if (got && counted < buf.size()) transfers_.received(c.id, buf.size() - counted);
  transfers_.close(c.id);
  {
    std::lock_guard lock(mu_);
    stats_.requests++;
    if (got) stats_.bytes += buf.size();
    if (!got) stats_.errors++;
  }
  if (!got) {
    ReadError e = from_hub(got.error());
    if (abandon == nullptr || !abandon->cancelled()) {
      spdlog::error("{}: download of bytes {}-{} failed: {}", c.path, offset,
                    offset + buf.size() - 1, got.error().describe());
      e.logged = true;
    }
    return unexpected(std::move(e));
  }
  return {};
}

Expected<cache::Result<cache::ContentState>, ReadError> Fetcher::download_and_put(
    const FileContent& c, BlockRange r, Deadline deadline, const CancelFlag* abandon) {
  const std::uint64_t bs = store_.block_size();
  const std::uint64_t offset = static_cast<std::uint64_t>(r.first) * bs;
  const std::uint64_t end = std::min(c.size, static_cast<std::uint64_t>(r.end()) * bs);
  // Each worker reuses one buffer: a fresh 4 MiB allocation per request costs a zero-fill and
  // page faults on every download.
  thread_local std::unique_ptr<std::byte[]> scratch;
  thread_local std::size_t scratch_size = 0;
  if (scratch_size < end - offset) {
    scratch.reset(new std::byte[end - offset]);  // not value-initialised
    scratch_size = end - offset;
  }
  const std::span<std::byte> buf(scratch.get(), end - offset);
  // Whole blocks are stored as they arrive, a few hundred KiB at a time, while they are still
  // in the CPU's cache: the block checksum, the copy into LMDB's page and (for the front of the
  // file) the running SHA-256 then read them from there, not from memory (issue 17). Blocks
  // of a transfer that fails midway stay stored; the retry asks for the rest.
  std::uint64_t stored = 0;  // bytes of buf put so far (whole blocks)
  std::optional<cache::Result<cache::ContentState>> put;
  auto store = [&](std::uint64_t upto) {
    if (put && !*put) return;  // the cache refused: the memory path takes over at the end
    put = store_.put_blocks(c.id, c.size, r.first + static_cast<std::uint32_t>(stored / bs),
                            buf.subspan(stored, upto - stored));
    if (*put) stored = upto;
  };
  auto on_fill_fn = [&](std::size_t filled) {
    const std::uint64_t whole = filled == buf.size() ? filled : filled / bs * bs;
    if (whole >= stored + kStreamPutBytes || (whole == buf.size() && whole > stored)) store(whole);
  };
  const hub::HubClient::FillFn on_fill = on_fill_fn;
  const auto got = get_range(c, offset, buf, deadline, abandon, &on_fill);
  if (!got) return unexpected(got.error());
  if (stored < buf.size() && !(put && !*put)) store(buf.size());
  return std::move(*put);
}

void Fetcher::finish(const std::shared_ptr<Flight>& f, std::optional<ReadError> error,
                     Stored stored) {
  if (!f->memory) {
    std::lock_guard lock(mu_);
    for (std::uint32_t b = f->range.first; b < f->range.end(); ++b) {
      const auto it = inflight_.find(Key{f->content.id, b});
      if (it != inflight_.end() && it->second == f) inflight_.erase(it);
    }
  }
  {
    std::lock_guard lock(f->mu);
    f->error = std::move(error);
    f->stored = stored;
  }
  {
    // Under the waiters' mutex: a waiter between its check and its sleep cannot miss this.
    std::lock_guard lock(progress_mu_);
    f->done = true;
  }
  progress_cv_.notify_all();
}

}  // namespace whfs::reader
