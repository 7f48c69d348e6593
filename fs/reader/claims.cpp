#include "fs/reader/claims.h"

#include <spdlog/spdlog.h>

#include <thread>

namespace whfs::reader {

std::optional<Claims::Outcome> Claims::take(const FileContent& c) {
  auto claim = cache_.claim(c.id);
  if (!claim) return Outcome{};      // nothing to coordinate with: download
  if (!*claim) return std::nullopt;  // another process holds it
  std::shared_ptr<cache::BlockStore::DownloadClaim> shared(std::move(*claim));
  std::lock_guard lock(mu_);
  held_[c.id] = shared;
  return Outcome{std::move(shared), std::nullopt};
}

Expected<Claims::Outcome, ReadError> Claims::claim_or_wait(const FileContent& c,
                                                           const WaitPolicy& wait) {
  {
    std::lock_guard lock(mu_);
    if (auto it = held_.find(c.id); it != held_.end()) {
      if (auto held = it->second.lock()) return Outcome{std::move(held), std::nullopt};
      held_.erase(it);
    }
  }
  if (auto mine = take(c)) return *mine;
  stats_.shared_waits.add();
  // Wait for the other process's blocks; take over when it dies (its claim goes) or makes no
  // progress for the takeover time.
  std::uint32_t last_present = 0;
  Deadline last_progress = Clock::now();
  auto pause = std::chrono::milliseconds(5);
  while (true) {
    const Deadline until = Clock::now() + pause;
    if (wait.cancel != nullptr) {
      wait.cancel->wait_until(sleep_mu_, sleep_cv_, until, [] { return false; });
      if (wait.cancel->cancelled()) {
        return unexpected(cancelled_error(c.path + ": the reader went away while waiting"));
      }
    } else {
      std::this_thread::sleep_until(until);
    }
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
    auto st = cache_.state(c.id);
    if (!st) return Outcome{};
    if (*st && (*st)->complete()) return Outcome{nullptr, **st};
    const std::uint32_t present = *st ? (*st)->present : 0;
    if (present != last_present) {
      last_present = present;
      last_progress = Clock::now();
    }
    if (auto mine = take(c)) return *mine;
    if (Clock::now() - last_progress >= takeover_) {
      spdlog::warn(
          "{}: the process downloading it for the cache made no progress for {} s; "
          "downloading the rest here",
          c.path, takeover_.count());
      stats_.takeovers.add();
      return Outcome{};
    }
  }
}

}  // namespace whfs::reader
