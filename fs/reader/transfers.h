#pragma once
// The downloads under way, for `wheelhouse status` and the metrics: per content the bytes
// received so far (counted as they arrive, not when a ranged GET ends), the rate over the
// last seconds, the connections open for it and the readers waiting on it. A leaf: its mutex
// is taken inside the fetcher's, never around it.

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/content_id.h"
#include "fs/common/clock.h"

namespace whfs::reader {

struct Transfer {
  std::string path;
  std::uint64_t size = 0;
  std::uint64_t received = 0;  // bytes of this content received since the transfer began
  double rate = 0;             // bytes/s over the last few seconds
  unsigned connections = 0;    // ranged GETs open for it now
  unsigned readers = 0;        // reads waiting for it now
  double seconds = 0;          // since it began
};

class Transfers {
 public:
  // A transfer stays listed this long after its last connection and reader are gone, so a
  // file fetched in consecutive ranged GETs is one transfer, not a flicker.
  static constexpr std::chrono::seconds kLinger{2};
  static constexpr std::chrono::seconds kRateWindow{5};

  // One connection of `id` opens / closes; bytes arrive on it.
  void open(const cache::ContentId& id, const std::string& path, std::uint64_t size);
  void received(const cache::ContentId& id, std::uint64_t bytes);
  void close(const cache::ContentId& id);
  // A reader starts / stops waiting for `id`.
  void wait(const cache::ContentId& id, const std::string& path, std::uint64_t size);
  void unwait(const cache::ContentId& id);

  // The transfers under way (or just ended), the largest remaining first.
  std::vector<Transfer> snapshot();
  // Every byte received since start, counted as it arrives.
  std::uint64_t received_total() const;
  // The bytes of `id`'s transfer so far (0 when none is listed): while a reader waits for
  // it, it stays listed and this only grows.
  std::uint64_t received_of(const cache::ContentId& id) const;

 private:
  struct Entry {
    std::string path;
    std::uint64_t size = 0;
    std::uint64_t received = 0;
    unsigned connections = 0;
    unsigned readers = 0;
    Clock::time_point began;
    Clock::time_point idle_since;  // when connections and readers both reached 0
    std::deque<std::pair<Clock::time_point, std::uint64_t>> samples;  // (when, received)
  };
  Entry& entry_locked(const cache::ContentId& id, const std::string& path, std::uint64_t size,
                      Clock::time_point now);
  void drop_idle_locked(Clock::time_point now);

  mutable std::mutex mu_;
  std::unordered_map<cache::ContentId, Entry> entries_;
  std::uint64_t received_total_ = 0;
};

}  // namespace whfs::reader
