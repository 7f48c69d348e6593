#pragma once
// How many bytes one ranged GET asks for. About `target` of the rate the connections measured
// lately: small ranges on a slow link, so that each one ends and is stored soon and a reader
// sees its file come in; up to `max` (16 MiB, as aria2c asks) on a fast one, so that a fast
// link is not spent on the overhead of many requests. Never so large that a download has fewer
// requests than connections to run them. Thread-safe.

#include <atomic>
#include <chrono>
#include <cstdint>

#include "fs/common/clock.h"

namespace whfs::reader {

class RequestSizer {
 public:
  struct Config {
    std::uint64_t min = 256u << 10;
    std::uint64_t max = 16u << 20;
    std::uint64_t initial = 4u << 20;  // before any GET was measured
    std::chrono::milliseconds target{1000};
  };
  explicit RequestSizer(Config config);

  // A ranged GET of `bytes` took `took`, from its request to its last byte. GETs smaller than
  // kMinSample say more about latency than rate and are not counted.
  void observe(std::uint64_t bytes, Clock::duration took);
  static constexpr std::uint64_t kMinSample = 64u << 10;

  // Bytes per GET for a download of `total` bytes that `connections` connections share.
  std::uint64_t size_for(std::uint64_t total, unsigned connections) const;
  // Bytes per second of one connection (a moving average); 0 until the first sample.
  double rate() const { return rate_.load(std::memory_order_relaxed); }

 private:
  const Config config_;
  std::atomic<double> rate_{0};
};

}  // namespace whfs::reader
