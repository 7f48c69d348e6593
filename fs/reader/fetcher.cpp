#include "fs/reader/fetcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <optional>

namespace whfs::reader {

struct Fetcher::Flight {
  Flight(FileContent c, BlockRange r, bool d, std::optional<Deadline> dl)
      : content(std::move(c)), range(r), demand(d), deadline(dl) {}
  FileContent content;
  BlockRange range;
  bool demand = false;  // guarded by Fetcher::mu_
  // A demand download ends with its reader's deadline (a reader that gave up must not leave a
  // stuck download for the next one to join); a prefetch gets fetch_timeout from its start.
  std::optional<Deadline> deadline;
  std::atomic<bool> started{false};
  std::mutex mu;  // guards done, error and stored
  std::condition_variable cv;
  bool done = false;
  std::optional<ReadError> error;
  Stored stored = Stored::kCached;
};

struct Fetcher::Verification {
  std::mutex mu;  // guards done and result
  std::condition_variable cv;
  bool done = false;
  std::optional<ReadError> result;
};

namespace {

ReadError from_hub(const hub::HubError& e) {
  using K = hub::HubErrorKind;
  switch (e.kind) {
    case K::kUnauthorized:
    case K::kForbidden:
      return {ReadError::Kind::kAccess, e.describe()};
    case K::kNotFound:
      return {ReadError::Kind::kNotFound, e.describe()};
    case K::kTimeout:
      return {ReadError::Kind::kTimedOut, e.describe()};
    case K::kCancelled:
      return {ReadError::Kind::kCancelled, e.describe()};
    default:
      return {ReadError::Kind::kIo, e.describe()};
  }
}

}  // namespace

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
    if (!f->started.exchange(true))
      finish(f, ReadError{ReadError::Kind::kCancelled, "shutting down"});
  }
  for (auto& t : workers_) t.join();
  workers_.clear();
}

std::shared_ptr<Fetcher::Flight> Fetcher::start_flight_locked(const FileContent& c, BlockRange r,
                                                              bool demand,
                                                              std::optional<Deadline> deadline) {
  auto f = std::make_shared<Flight>(c, r, demand, deadline);
  for (std::uint32_t b = r.first; b < r.end(); ++b) inflight_[Key{c.id, b}] = f;
  (demand ? demand_q_ : prefetch_q_).push_back(f);
  return f;
}

Expected<Stored, ReadError> Fetcher::fetch(const FileContent& content,
                                           const std::vector<std::uint32_t>& missing,
                                           Deadline deadline, std::optional<BlockRange> then) {
  std::vector<std::shared_ptr<Flight>> waits;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return unexpected(ReadError{ReadError::Kind::kCancelled, "shutting down"});
    std::vector<std::uint32_t> todo;
    for (std::uint32_t b : missing) {
      const auto it = inflight_.find(Key{content.id, b});
      if (it == inflight_.end()) {
        todo.push_back(b);
        continue;
      }
      auto& f = it->second;
      if (std::find(waits.begin(), waits.end(), f) == waits.end()) {
        waits.push_back(f);
        stats_.waits_joined++;
        if (!f->demand && !f->started.load()) {
          // Promote: a reader waits for this prefetch now, so it runs first and ends with
          // that reader's deadline. (One already running keeps its own; a stalled one is cut
          // by the transfer's low-speed limit.)
          f->demand = true;
          f->deadline = deadline;
          demand_q_.push_back(f);
        }
      }
    }
    for (const auto& r : coalesce(todo, max_blocks_)) {
      waits.push_back(start_flight_locked(content, r, true, deadline));
    }
    if (then) prefetch_locked(content, *then);
  }
  work_cv_.notify_all();
  Stored stored = Stored::kCached;
  for (const auto& f : waits) {
    std::unique_lock lock(f->mu);
    if (!f->cv.wait_until(lock, deadline, [&] { return f->done; })) {
      return unexpected(ReadError{ReadError::Kind::kTimedOut,
                                  content.path + ": no data before the read deadline"});
    }
    if (f->error) return unexpected(*f->error);
    if (f->stored == Stored::kNotKept) stored = Stored::kNotKept;
  }
  return stored;
}

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
  for (const auto& r : coalesce(todo, max_blocks_)) {
    start_flight_locked(content, r, false, std::nullopt);
  }
}

bool Fetcher::quarantined(const cache::ContentId& id) {
  std::lock_guard lock(mu_);
  const auto it = quarantine_.find(id);
  if (it == quarantine_.end()) return false;
  if (Clock::now() >= it->second) {
    quarantine_.erase(it);
    return false;
  }
  return true;
}

FetcherStats Fetcher::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
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
    run(f);
  }
}

void Fetcher::run(const std::shared_ptr<Flight>& f) {
  std::optional<ReadError> error;
  Stored stored = Stored::kCached;
  const Deadline deadline = f->deadline.value_or(Clock::now() + config_.fetch_timeout);
  // A prefetch may be overtaken by readers that fetched the same content meanwhile: skip
  // contents that are complete already (verifying them if nobody did).
  auto state = store_.content_state(f->content.id);
  const bool complete = state && *state && (*state)->complete();
  if (!complete) {
    // Download only what is still missing of the range.
    auto missing = store_.read_blocks(
        f->content.id, f->content.size, f->range.first, f->range.count,
        [](std::uint32_t, std::span<const std::byte>) {}, cache::BlockStore::ReadMode::kPresence);
    std::vector<BlockRange> runs;
    if (missing) {
      runs = coalesce(*missing, max_blocks_);
    } else {
      runs = {f->range};
    }
    for (const auto& r : runs) {
      auto d = download(f->content, r, deadline);
      if (!d) {
        error = d.error();
        break;
      }
      if (*d == Stored::kNotKept) stored = Stored::kNotKept;
    }
  } else if (!(*state)->verified) {
    if (auto r = verify_or_retry(f->content); !r) error = r.error();
  }
  finish(f, std::move(error), stored);
}

Expected<Stored, ReadError> Fetcher::download(const FileContent& c, BlockRange r,
                                              Deadline deadline) {
  auto put = download_and_put(c, r, deadline);
  if (!put) return unexpected(put.error());
  if (!*put) {
    if (put->error().kind != cache::CacheError::Kind::kFull) {
      spdlog::warn("{}: cache write failed ({}); serving without caching", c.path,
                   put->error().message);
    }
    std::lock_guard lock(mu_);
    stats_.uncached++;
    return Stored::kNotKept;  // its readers read the bytes directly
  }
  if ((*put)->complete() && !(*put)->verified) {
    if (auto v = verify_or_retry(c); !v) return unexpected(v.error());
  }
  return Stored::kCached;
}

Expected<cache::Result<cache::ContentState>, ReadError> Fetcher::download_and_put(
    const FileContent& c, BlockRange r, Deadline deadline) {
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
  auto got = hub_.read_range(hub::FileRef{c.commit, c.path, c.size}, offset, buf, deadline);
  {
    std::lock_guard lock(mu_);
    stats_.requests++;
    if (got) stats_.bytes += buf.size();
    if (!got) stats_.errors++;
  }
  if (!got) {
    spdlog::error("{}: download of bytes {}-{} failed: {}", c.path, offset, end - 1,
                  got.error().describe());
    return unexpected(from_hub(got.error()));
  }
  return store_.put_blocks(c.id, c.size, r.first, buf);
}

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
    auto v = store_.verify_content(c.id, c.size);
    if (v) return {};
    if (v.error().kind != cache::CacheError::Kind::kCorrupt) {
      return unexpected(ReadError{ReadError::Kind::kIo, c.path + ": " + v.error().message});
    }
    {
      std::lock_guard lock(mu_);
      stats_.corrupt++;
    }
    if (attempt >= 1) break;
    spdlog::warn("{}: downloaded bytes do not match {}; downloading the file again", c.path,
                 c.id.to_string());
    // The cache dropped every block: fetch the whole content once more, in order.
    const auto total = block_count(c.size, store_.block_size());
    for (const auto& piece : split(BlockRange{0, total}, max_blocks_)) {
      auto put = download_and_put(c, piece, Clock::now() + config_.fetch_timeout);
      if (!put) return unexpected(put.error());
      if (!*put) {
        return unexpected(ReadError{ReadError::Kind::kIo, c.path + ": " + put->error().message});
      }
    }
  }
  spdlog::error(
      "{}: corrupt download: its bytes do not match {} twice; reads fail with EIO "
      "for {} s",
      c.path, c.id.to_string(), config_.corrupt_quarantine.count());
  std::lock_guard lock(mu_);
  quarantine_[c.id] = Clock::now() + config_.corrupt_quarantine;
  return unexpected(ReadError{ReadError::Kind::kCorrupt,
                              c.path + ": downloaded bytes do not match " + c.id.to_string()});
}

void Fetcher::finish(const std::shared_ptr<Flight>& f, std::optional<ReadError> error,
                     Stored stored) {
  {
    std::lock_guard lock(mu_);
    for (std::uint32_t b = f->range.first; b < f->range.end(); ++b) {
      const auto it = inflight_.find(Key{f->content.id, b});
      if (it != inflight_.end() && it->second == f) inflight_.erase(it);
    }
  }
  std::lock_guard lock(f->mu);
  f->done = true;
  f->error = std::move(error);
  f->stored = stored;
  f->cv.notify_all();
}

}  // namespace whfs::reader
