#include "fs/reader/transfers.h"

#include <algorithm>

namespace whfs::reader {

Transfers::Entry& Transfers::entry_locked(const cache::ContentId& id, const std::string& path,
                                          std::uint64_t size, Clock::time_point now) {
  auto [it, fresh] = entries_.try_emplace(id);
  Entry& e = it->second;
  if (fresh || (e.connections == 0 && e.readers == 0 && now - e.idle_since > kLinger)) {
    e = Entry{};
    e.began = now;
    e.samples.emplace_back(now, 0);
  }
  e.path = path;
  e.size = size;
  return e;
}

void Transfers::open(const cache::ContentId& id, const std::string& path, std::uint64_t size) {
  const auto now = Clock::now();
  std::lock_guard lock(mu_);
  drop_idle_locked(now);
  entry_locked(id, path, size, now).connections++;
}

void Transfers::received(const cache::ContentId& id, std::uint64_t bytes) {
  const auto now = Clock::now();
  std::lock_guard lock(mu_);
  received_total_ += bytes;
  const auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  e.received += bytes;
  // One sample per 100 ms is plenty for a rate over seconds.
  if (e.samples.empty() || now - e.samples.back().first >= std::chrono::milliseconds(100)) {
    e.samples.emplace_back(now, e.received);
  } else {
    e.samples.back().second = e.received;
  }
  while (e.samples.size() > 2 && now - e.samples[1].first > kRateWindow) e.samples.pop_front();
}

void Transfers::close(const cache::ContentId& id) {
  std::lock_guard lock(mu_);
  const auto it = entries_.find(id);
  if (it == entries_.end() || it->second.connections == 0) return;
  if (--it->second.connections == 0 && it->second.readers == 0)
    it->second.idle_since = Clock::now();
}

void Transfers::wait(const cache::ContentId& id, const std::string& path, std::uint64_t size) {
  const auto now = Clock::now();
  std::lock_guard lock(mu_);
  drop_idle_locked(now);
  entry_locked(id, path, size, now).readers++;
}

void Transfers::unwait(const cache::ContentId& id) {
  std::lock_guard lock(mu_);
  const auto it = entries_.find(id);
  if (it == entries_.end() || it->second.readers == 0) return;
  if (--it->second.readers == 0 && it->second.connections == 0)
    it->second.idle_since = Clock::now();
}

void Transfers::drop_idle_locked(Clock::time_point now) {
  std::erase_if(entries_, [&](const auto& kv) {
    const Entry& e = kv.second;
    return e.connections == 0 && e.readers == 0 && now - e.idle_since > kLinger;
  });
}

std::vector<Transfer> Transfers::snapshot() {
  const auto now = Clock::now();
  std::lock_guard lock(mu_);
  drop_idle_locked(now);
  std::vector<Transfer> out;
  out.reserve(entries_.size());
  for (const auto& [id, e] : entries_) {
    Transfer t;
    t.path = e.path;
    t.size = e.size;
    t.received = e.received;
    t.connections = e.connections;
    t.readers = e.readers;
    t.seconds = std::chrono::duration<double>(now - e.began).count();
    // The rate from the oldest sample in the window to now (an idle transfer's falls to 0).
    const auto& [t0, b0] = e.samples.front();
    const double span = std::chrono::duration<double>(now - t0).count();
    if (span > 0.05) t.rate = static_cast<double>(e.received - b0) / span;
    out.push_back(std::move(t));
  }
  std::sort(out.begin(), out.end(), [](const Transfer& a, const Transfer& b) {
    const auto left = [](const Transfer& t) {
      return t.size > t.received ? t.size - t.received : 0;
    };
    return left(a) != left(b) ? left(a) > left(b) : a.path < b.path;
  });
  return out;
}

std::uint64_t Transfers::received_total() const {
  std::lock_guard lock(mu_);
  return received_total_;
}

std::uint64_t Transfers::received_of(const cache::ContentId& id) const {
  std::lock_guard lock(mu_);
  const auto it = entries_.find(id);
  return it == entries_.end() ? 0 : it->second.received;
}

}  // namespace whfs::reader
