#pragma once
// Internal to the fetcher (fetcher.cpp, fetcher_io.cpp, fetcher_verify.cpp): the records of
// downloads in flight, and the helpers the three share.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fs/common/hash.h"
#include "fs/reader/fetcher.h"

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
  std::vector<std::shared_ptr<Flight>> pieces;  // set before any piece runs; guarded by the
                                                // fetcher's mu_, cleared when it is done
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

// A Hub failure as a read failure.
ReadError from_hub(const hub::HubError& e);

// The hash a content is checked against: its LFS sha256, or its git blob sha1.
Hasher hasher_for(const FileContent& c);

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

}  // namespace whfs::reader
