#include "fs/reader/request_size.h"

#include <algorithm>

namespace whfs::reader {

RequestSizer::RequestSizer(Config config) : config_(config) {}

void RequestSizer::observe(std::uint64_t bytes, Clock::duration took) {
  if (bytes < kMinSample) return;
  const double seconds = std::max(1e-4, std::chrono::duration<double>(took).count());
  const double sample = static_cast<double>(bytes) / seconds;
  // A moving average that follows a change of the link within a few GETs.
  double old = rate_.load(std::memory_order_relaxed);
  double next = 0;
  do {
    next = old == 0 ? sample : 0.7 * old + 0.3 * sample;
  } while (!rate_.compare_exchange_weak(old, next, std::memory_order_relaxed));
}

std::uint64_t RequestSizer::size_for(std::uint64_t total, unsigned connections) const {
  const double r = rate();
  const double wanted = r > 0 ? r * std::chrono::duration<double>(config_.target).count()
                              : static_cast<double>(config_.initial);
  std::uint64_t size = std::clamp(static_cast<std::uint64_t>(wanted), config_.min, config_.max);
  // Every connection gets a part of the download.
  const std::uint64_t share = (total + std::max(1u, connections) - 1) / std::max(1u, connections);
  return std::max(config_.min, std::min(size, share));
}

}  // namespace whfs::reader
