#include "fs/reader/fetcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <thread>

#include "fs/common/hash.h"

namespace whfs::reader {

// One ranged GET of consecutive blocks, into the cache or into a MemoryFetch's buffer.
struct Fetcher::Flight {
  Flight(FileContent c, BlockRange r, bool d) : content(std::move(c)), range(r), demand(d) {}
  FileContent content;
  BlockRange range;
  bool demand = false;                  // guarded by Fetcher::mu_
  bool asked_by_reader = false;         // created for a reader (not a prefetch); immutable
  int waiters = 0;                      // readers waiting for it; guarded by Fetcher::mu_
  CancelFlag abandon;                   // raised when its last reader left before it was done
  std::shared_ptr<MemoryFetch> memory;  // set: the bytes go to memory, not to the cache
  std::atomic<bool> started{false};
  std::atomic<bool> done{false};  // set last, after error and stored
  std::mutex mu;                  // guards error and stored
  std::optional<ReadError> error;
  Stored stored = Stored::kCached;
};

// A whole content downloaded into memory (the cache cannot keep it), in pieces.
struct Fetcher::MemoryFetch {
  explicit MemoryFetch(FileContent c) : content(std::move(c)) {}
  FileContent content;
  std::unique_ptr<std::byte[]> data;
  std::vector<std::shared_ptr<Flight>> pieces;  // set before any piece runs
  std::atomic<std::uint32_t> left{0};           // pieces not finished yet
  std::mutex mu;                                // guards error and result
  std::optional<ReadError> error;
  std::shared_ptr<const MemoryContent> result;
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

Hasher hasher_for(const FileContent& c) {
  return c.id.kind() == cache::ContentId::Kind::kSha256 ? Hasher(HashAlgo::kSha256)
                                                        : git_blob_hasher(c.size);
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
    if (!f->started.exchange(true)) {
      finish(f, ReadError{ReadError::Kind::kCancelled, "shutting down"});
    }
  }
  for (auto& t : workers_) t.join();
  workers_.clear();
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
  for (int attempt = 0; attempt < 3; ++attempt) {
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

// ---- waiting for flights -----------------------------------------------------------------

namespace {

// Waits until every flight is done. The patience restarts whenever one of them finishes, so a
// large download that keeps making progress is never cut short, and one that stalls is.
template <class FlightPtr, class Mutex, class Cv>
Expected<void, ReadError> wait_all(const std::vector<FlightPtr>& flights, Mutex& m, Cv& cv,
                                   const WaitPolicy& wait, const std::string& path) {
  auto count_done = [&] {
    return static_cast<std::size_t>(std::count_if(flights.begin(), flights.end(),
                                                  [](const auto& f) { return f->done.load(); }));
  };
  std::size_t seen = count_done();
  Deadline until = Clock::now() + wait.patience;
  while (seen < flights.size()) {
    auto more = [&] { return count_done() > seen; };
    const bool progressed = wait.cancel ? wait.cancel->wait_until(m, cv, until, more) : [&] {
      std::unique_lock lock(m);
      return cv.wait_until(lock, until, more);
    }();
    if (!progressed) {
      if (wait.cancel && wait.cancel->cancelled()) {
        return unexpected(
            ReadError{ReadError::Kind::kCancelled, path + ": the reader went away while waiting"});
      }
      return unexpected(ReadError{
          ReadError::Kind::kTimedOut,
          path + ": no download progress for " +
              std::to_string(
                  std::chrono::duration_cast<std::chrono::seconds>(wait.patience).count()) +
              " s"});
    }
    seen = count_done();
    until = Clock::now() + wait.patience;
  }
  for (const auto& f : flights) {
    std::lock_guard lock(f->mu);
    if (f->error) return unexpected(*f->error);
  }
  return {};
}

}  // namespace

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
  auto w = wait_all(waits, progress_mu_, progress_cv_, wait, content.path);
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
  if (auto w = wait_all(pieces, progress_mu_, progress_cv_, wait, c.path); !w) {
    return unexpected(w.error());
  }
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
                        c.path + ": downloaded bytes do not match " + c.id.to_string()};
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
                                             const CancelFlag* abandon) {
  auto got =
      hub_.read_range(hub::FileRef{c.commit, c.path, c.size}, offset, buf, deadline, abandon);
  {
    std::lock_guard lock(mu_);
    stats_.requests++;
    if (got) stats_.bytes += buf.size();
    if (!got) stats_.errors++;
  }
  if (!got) {
    if (abandon == nullptr || !abandon->cancelled()) {
      spdlog::error("{}: download of bytes {}-{} failed: {}", c.path, offset,
                    offset + buf.size() - 1, got.error().describe());
    }
    return unexpected(from_hub(got.error()));
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
  if (auto got = get_range(c, offset, buf, deadline, abandon); !got) {
    return unexpected(got.error());
  }
  return store_.put_blocks(c.id, c.size, r.first, buf);
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
                              c.path + ": downloaded bytes do not match " + c.id.to_string()});
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
