#pragma once
// A latency histogram cheap enough for every read: fixed bucket bounds, one relaxed atomic
// increment per observation. The metrics exporter turns a snapshot into Prometheus's
// cumulative buckets.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

namespace whfs {

class LatencyHistogram {
 public:
  // Upper bounds in seconds: 100 us to 60 s, roughly x2.5 apart (a cache hit is sub-ms, a
  // cold 100 MB wheel on a slow link tens of seconds).
  static constexpr std::array<double, 14> kBounds = {
      0.0001, 0.00025, 0.001, 0.0025, 0.01, 0.025, 0.1, 0.25, 1, 2.5, 5, 10, 30, 60};

  void observe(std::chrono::nanoseconds d) {
    const double s = std::chrono::duration<double>(d).count();
    std::size_t i = 0;
    while (i < kBounds.size() && s > kBounds[i]) ++i;
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(static_cast<std::uint64_t>(d.count() < 0 ? 0 : d.count()),
                      std::memory_order_relaxed);
  }

  struct Snapshot {
    std::vector<std::uint64_t> counts;  // per bucket, the last one above every bound
    double sum_seconds = 0;
    std::uint64_t count = 0;
  };
  Snapshot snapshot() const {
    Snapshot s;
    s.counts.reserve(counts_.size());
    for (const auto& c : counts_) {
      s.counts.push_back(c.load(std::memory_order_relaxed));
      s.count += s.counts.back();
    }
    s.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
    return s;
  }

 private:
  std::array<std::atomic<std::uint64_t>, kBounds.size() + 1> counts_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

}  // namespace whfs
