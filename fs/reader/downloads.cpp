#include "fs/reader/downloads.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace whfs::reader {
namespace {

RequestSizer::Config sizes_of(const FetcherConfig& c) {
  RequestSizer::Config s;
  s.max = std::max<std::uint64_t>(1, c.max_request);
  s.min = std::min(c.min_request, s.max);
  s.initial = std::clamp(c.first_request, s.min, s.max);
  s.target = c.request_target;
  return s;
}

// The downloads of files: no deadline of their own. They go on while bytes arrive; a
// connection that moves none for the stall limit is dropped and its range asked again, and a
// GET that moves no byte for request_timeout fails with its cause (ranged_gets.h); a reader
// gives up on them by its patience.
constexpr Deadline kNoDeadline = Deadline::max();

}  // namespace

struct Downloads::Flight {
  Flight(FileContent c, BlockRange r, bool d) : content(std::move(c)), range(r), demand(d) {}
  FileContent content;
  BlockRange range;
  bool demand = false;                  // guarded by Downloads::mu_
  bool asked_by_reader = false;         // created for a reader (not a prefetch); immutable
  int waiters = 0;                      // readers waiting for it; guarded by Downloads::mu_
  CancelFlag abandon;                   // raised when its last reader left before it was done
  std::shared_ptr<BufferFetch> buffer;  // set: the bytes go to this buffer
  std::atomic<bool> started{false};
  std::atomic<bool> done{false};  // set last, after error and stored
  std::mutex mu;                  // guards error and stored
  std::optional<ReadError> error;
  Stored stored = Stored::kCached;
};

Downloads::Downloads(cache::BlockStore& store, hub::HubClient& hub, const FetcherConfig& config,
                     ReadPathStats& stats, OnComplete on_complete, OnFetched on_fetched)
    : store_(store),
      stats_(stats),
      gets_(store, hub, sizes_of(config), config.request_timeout, stats),
      config_(config),
      on_complete_(std::move(on_complete)),
      on_fetched_(std::move(on_fetched)) {
  for (unsigned i = 0; i < std::max(1u, config_.workers); ++i) {
    workers_.emplace_back([this] { worker(); });
  }
}

Downloads::~Downloads() { shutdown(); }

bool Downloads::stopping() const {
  std::lock_guard lock(mu_);
  return stopping_;
}

void Downloads::shutdown() {
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
    if (!f->started.exchange(true)) finish(f, cancelled_error("shutting down"));
  }
  for (auto& t : workers_) t.join();
  workers_.clear();
}

// ---- waiting for flights -----------------------------------------------------------------

Expected<void, ReadError> Downloads::wait_for(const FileContent& c,
                                              const std::vector<std::shared_ptr<Flight>>& flights,
                                              const WaitPolicy& wait) {
  // The patience restarts whenever bytes of the content arrive or one of the flights ends: a
  // download on a slow link that keeps moving bytes is never cut short, one that moves none
  // is. Bytes are not signalled one by one: the wait looks at the count every second.
  Transfers& transfers = stats_.transfers;
  transfers.wait(c.id, c.path, c.size);
  auto count_done = [&] {
    return static_cast<std::size_t>(std::count_if(flights.begin(), flights.end(),
                                                  [](const auto& f) { return f->done.load(); }));
  };
  constexpr auto kLook = std::chrono::seconds(1);
  std::size_t seen = count_done();
  std::uint64_t bytes = transfers.received_of(c.id);
  Deadline until = Clock::now() + wait.patience;
  std::optional<ReadError> failed;
  while (seen < flights.size()) {
    auto more = [&] { return count_done() > seen; };
    const Deadline wake = std::min(until, Clock::now() + kLook);
    const bool ended =
        wait.cancel ? wait.cancel->wait_until(progress_mu_, progress_cv_, wake, more) : [&] {
          std::unique_lock lock(progress_mu_);
          return progress_cv_.wait_until(lock, wake, more);
        }();
    if (wait.cancel && wait.cancel->cancelled()) {
      failed = cancelled_error(c.path + ": the reader went away while waiting");
      break;
    }
    const std::uint64_t now_bytes = transfers.received_of(c.id);
    if (ended || now_bytes != bytes) {
      seen = count_done();
      bytes = now_bytes;
      until = Clock::now() + wait.patience;
      continue;
    }
    if (Clock::now() >= until) {
      failed = ReadError{
          FsErrorKind::kTimedOut,
          c.path + ": no download progress for " +
              std::to_string(
                  std::chrono::duration_cast<std::chrono::seconds>(wait.patience).count()) +
              " s"};
      break;
    }
  }
  transfers.unwait(c.id);
  if (failed) return unexpected(std::move(*failed));
  for (const auto& f : flights) {
    std::lock_guard lock(f->mu);
    if (f->error) return unexpected(*f->error);
  }
  return {};
}

Expected<Downloads::Stored, ReadError> Downloads::fetch_blocks(
    const FileContent& c, const std::vector<std::uint32_t>& missing, const WaitPolicy& wait,
    std::optional<BlockRange> then) {
  std::vector<std::shared_ptr<Flight>> waits;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return unexpected(cancelled_error("shutting down"));
    std::vector<std::uint32_t> todo;
    for (std::uint32_t b : missing) {
      const auto it = inflight_.find(Key{c.id, b});
      if (it == inflight_.end() || it->second->abandon.cancelled()) {
        todo.push_back(b);  // (an abandoned download ends with an error: start a new one)
        continue;
      }
      auto& f = it->second;
      if (std::find(waits.begin(), waits.end(), f) == waits.end()) {
        waits.push_back(f);
        stats_.waits_joined.add();
        if (!f->demand && !f->started.load()) {
          // Promote: a reader waits for this prefetch now, so it runs first.
          f->demand = true;
          demand_q_.push_back(f);
        }
      }
    }
    // Runs of consecutive blocks in the order asked (the caller's priority).
    for (const auto& r : coalesce(todo, request_blocks(todo.size()))) {
      auto f = start_flight_locked(c, r, true);
      f->asked_by_reader = true;
      waits.push_back(std::move(f));
    }
    for (const auto& f : waits) ++f->waiters;
    if (then) prefetch_locked(c, *then);
  }
  work_cv_.notify_all();
  auto w = wait_for(c, waits, wait);
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

// ---- into memory -------------------------------------------------------------------------

std::shared_ptr<Downloads::BufferFetch> Downloads::plan_buffer(
    const FileContent& c, std::function<void(BufferFetch&)> on_complete) const {
  auto m = std::make_shared<BufferFetch>(c);
  m->data.reset(new std::byte[std::max<std::uint64_t>(1, c.size)]);  // not value-initialised
  m->on_complete = std::move(on_complete);
  const std::uint32_t total = block_count(c.size, store_.block_size());
  for (const auto& piece : split(BlockRange{0, total}, request_blocks(total))) {
    auto f = std::make_shared<Flight>(c, piece, true);
    f->buffer = m;
    m->pieces.push_back(std::move(f));
  }
  m->left = static_cast<std::uint32_t>(m->pieces.size());
  return m;
}

void Downloads::start_pieces(const std::vector<std::shared_ptr<Flight>>& pieces) {
  {
    std::lock_guard lock(mu_);
    for (const auto& f : pieces) demand_q_.push_back(f);
  }
  work_cv_.notify_all();
}

void Downloads::run_buffer_piece(const std::shared_ptr<Flight>& f) {
  const std::shared_ptr<BufferFetch> owner = f->buffer;  // alive while this piece runs
  BufferFetch& m = *owner;
  const std::uint64_t bs = store_.block_size();
  const std::uint64_t offset = static_cast<std::uint64_t>(f->range.first) * bs;
  const std::uint64_t end =
      std::min(f->content.size, static_cast<std::uint64_t>(f->range.end()) * bs);
  auto got = gets_.get(f->content, offset, std::span(m.data.get() + offset, end - offset),
                       kNoDeadline, nullptr);
  if (!got) {
    std::lock_guard lock(m.mu);
    if (!m.error) m.error = got.error();
  }
  // The last piece completes the fetch before its own flight is marked done, so that a waiter
  // that sees every piece done also sees the outcome.
  if (--m.left == 0) m.on_complete(m);
  finish(f, std::nullopt);
}

Expected<void, ReadError> Downloads::refill_buffer(const FileContent& c, std::byte* data) {
  const std::uint64_t step = gets_.sizer().size_for(c.size, 1);
  for (std::uint64_t off = 0; off < c.size; off += step) {
    const std::uint64_t n = std::min<std::uint64_t>(step, c.size - off);
    auto got = gets_.get(c, off, std::span(data + off, n), kNoDeadline, nullptr);
    if (!got) return unexpected(got.error());
  }
  return {};
}

Expected<void, ReadError> Downloads::refill_cache(const FileContent& c) {
  const auto total = block_count(c.size, store_.block_size());
  for (const auto& piece : split(BlockRange{0, total}, request_blocks(total, 1))) {
    auto put = gets_.get_and_put(c, piece, kNoDeadline, nullptr);
    if (!put) return unexpected(put.error());
    if (!*put) return unexpected(ReadError{FsErrorKind::kIo, c.path + ": " + put->error().message});
  }
  return {};
}

// ---- workers -----------------------------------------------------------------------------

void Downloads::prefetch(const FileContent& c, BlockRange range) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    prefetch_locked(c, range);
  }
  work_cv_.notify_all();
}

void Downloads::prefetch_locked(const FileContent& c, BlockRange range) {
  std::vector<std::uint32_t> todo;
  for (std::uint32_t b = range.first; b < range.end(); ++b) {
    if (inflight_.count(Key{c.id, b}) == 0) todo.push_back(b);
  }
  for (const auto& r : coalesce(todo, request_blocks(todo.size()))) {
    start_flight_locked(c, r, false);
  }
}

std::shared_ptr<Downloads::Flight> Downloads::start_flight_locked(const FileContent& c,
                                                                  BlockRange r, bool demand) {
  auto f = std::make_shared<Flight>(c, r, demand);
  for (std::uint32_t b = r.first; b < r.end(); ++b) inflight_[Key{c.id, b}] = f;
  (demand ? demand_q_ : prefetch_q_).push_back(f);
  return f;
}

void Downloads::worker() {
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
      (f->demand ? stats_.demand_requests : stats_.prefetch_requests).add();
    }
    if (f->abandon.cancelled()) {
      finish(f, cancelled_error("nobody waits for it any more"));
      continue;
    }
    if (f->buffer) {
      run_buffer_piece(f);
    } else {
      run(f);
    }
  }
}

void Downloads::run(const std::shared_ptr<Flight>& f) {
  std::optional<ReadError> error;
  Stored stored = Stored::kCached;
  // Only what is still missing of the range: a prefetch may be overtaken by readers, and any
  // flight by another process sharing the cache.
  auto missing = missing_blocks(f->content, f->range);
  if (missing && missing->empty()) {
    // All there already: a content made complete meanwhile is verified if nobody did.
    auto state = store_.content_state(f->content.id);
    if (state && *state && (*state)->complete()) {
      if (auto r = on_complete_(f->content, **state); !r) error = r.error();
    }
  } else {
    const std::vector<BlockRange> runs =
        missing ? coalesce(*missing, f->range.count) : std::vector<BlockRange>{f->range};
    for (const auto& r : runs) {
      auto d = download(f->content, r, kNoDeadline, &f->abandon);
      if (!d) {
        error = d.error();
        break;
      }
      if (*d == Stored::kNotKept) stored = Stored::kNotKept;
    }
  }
  finish(f, std::move(error), stored);
}

Expected<Downloads::Stored, ReadError> Downloads::download(const FileContent& c, BlockRange r,
                                                           Deadline deadline,
                                                           const CancelFlag* abandon) {
  auto put = gets_.get_and_put(c, r, deadline, abandon);
  if (!put) return unexpected(put.error());
  if (!*put) {
    if (put->error().kind != cache::CacheError::Kind::kFull) {
      spdlog::warn("{}: cache write failed ({})", c.path, put->error().message);
    }
    stats_.uncached.add();
    return Stored::kNotKept;  // its readers take the memory path
  }
  if (on_fetched_) on_fetched_(c);
  if ((*put)->complete()) {
    if (auto v = on_complete_(c, **put); !v) return unexpected(v.error());
  }
  return Stored::kCached;
}

std::uint32_t Downloads::request_blocks(std::uint64_t blocks, unsigned connections) const {
  const std::uint64_t bs = store_.block_size();
  const std::uint64_t bytes = gets_.sizer().size_for(
      blocks * bs, connections == 0 ? std::max(1u, config_.workers) : connections);
  return static_cast<std::uint32_t>(std::max<std::uint64_t>(1, bytes / bs));
}

std::optional<std::vector<std::uint32_t>> Downloads::missing_blocks(const FileContent& c,
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

void Downloads::finish(const std::shared_ptr<Flight>& f, std::optional<ReadError> error,
                       Stored stored) {
  if (!f->buffer) {
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
