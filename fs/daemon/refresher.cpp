#include "fs/daemon/refresher.h"

#include <spdlog/spdlog.h>

#include <csignal>

#include "fs/daemon/gpus.h"

namespace whfs {

using namespace std::chrono_literals;

void Refresher::start() {
  signals_ = std::thread([this] { wait_for_signals(); });
  loop_ = std::thread([this] { loop(); });
}

void Refresher::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (loop_.joinable()) loop_.join();
  if (signals_.joinable()) signals_.join();
}

void Refresher::drop_pages_of(const cache::ContentId& id) {
  std::lock_guard lock(mu_);
  corrupt_.push_back(id);
  cv_.notify_all();
}

RefreshFacts Refresher::facts() const {
  std::lock_guard lock(facts_mu_);
  return facts_;
}

void Refresher::note(std::string result, bool reached_hub) {
  std::lock_guard lock(facts_mu_);
  facts_.last_at = std::time(nullptr);
  if (reached_hub) facts_.last_ok = facts_.last_at;
  facts_.last_result = std::move(result);
}

void Refresher::wait_for_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
  const timespec tick{0, 200L * 1000 * 1000};
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGHUP) {
      spdlog::info("SIGHUP: looking for a new commit");
      std::lock_guard lock(mu_);
      refresh_requested_ = true;
      cv_.notify_all();
    } else if (sig == SIGTERM || sig == SIGINT) {
      spdlog::debug("{}: unmounting", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      stop_signal_ = sig;
      p_.hub.cancel();
      fuse_->exit();
      return;
    }
  }
}

void Refresher::loop() {
  auto next_refresh = std::chrono::steady_clock::now() + o_.refresh;
  auto next_maintenance = std::chrono::steady_clock::now() + 60s;
  std::unique_lock lock(mu_);
  while (!stopping_) {
    auto wake = next_maintenance;
    if (o_.refresh.count() > 0) wake = std::min(wake, next_refresh);
    cv_.wait_until(lock, wake,
                   [&] { return stopping_ || refresh_requested_ || !corrupt_.empty(); });
    if (stopping_) return;
    if (!corrupt_.empty()) {
      auto ids = std::exchange(corrupt_, {});
      lock.unlock();
      for (const auto& id : ids) {
        const auto inodes = p_.fs.inodes_with_content(id);
        fuse_->invalidate_data(inodes);
        spdlog::warn("{}: dropped the kernel's cached pages of {} inode(s)", id.to_string(),
                     inodes.size());
      }
      lock.lock();
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    const bool due = o_.refresh.count() > 0 && now >= next_refresh;
    if (refresh_requested_ || due) {
      refresh_requested_ = false;
      next_refresh = now + o_.refresh;
      lock.unlock();
      refresh();
      lock.lock();
    }
    if (now >= next_maintenance) {
      next_maintenance = now + 60s;
      lock.unlock();
      // Keep the leases of open files alive and bound what a power loss could cost.
      if (auto r = p_.cache.refresh_pins(); !r) spdlog::warn("cache leases: {}", r.error().message);
      if (auto r = p_.cache.flush(); !r) spdlog::warn("cache flush: {}", r.error().message);
      lock.lock();
    }
  }
}

// The GPUs again (a driver was installed, a GPU went away), then the revision. A process's own
// target is read again as its files change (see caller_targets.h), with no refresh.
void Refresher::refresh() {
  if (o_.current) {
    target::GpuReport gpus = probe_gpus(o_);
    const auto before = p_.callers.gpus();
    if (!gpus.found() && before.found() && o_.target.arch.empty()) {
      // A probe that fails (a driver being reloaded, a library replaced mid-update) does
      // not take the GPUs away from every caller: the last good probe stays.
      spdlog::warn("refresh: the GPU probe failed ({}); keeping the GPUs found before: {}",
                   gpus.error, gpu_summary(o_, p_.callers));
      gpus = before;
    }
    const bool changed = target::arch_set(gpus.devices) != target::arch_set(before.devices) ||
                         gpus.devices.size() != before.devices.size();
    p_.callers.set_gpus(std::move(gpus));
    if (changed) spdlog::info("refresh: {}", gpu_summary(o_, p_.callers));
  }
  const std::string what = key_.repo + "@" + key_.revision;
  std::string commit = p_.names.commit();
  std::int64_t mtime = p_.names.mtime();
  if (!p_.hub.offline()) {
    auto rev = resolve_and_record(p_.hub, p_.cache, key_, p_.scope, Clock::now() + 30s);
    if (!rev) {
      spdlog::warn("refresh of {} failed: {}", what, rev.error().describe());
      note("failed: " + rev.error().describe(), false);
    } else if (rev->commit != commit) {
      commit = rev->commit;
      mtime = mtime_of(*rev);
    }
  }
  const std::string old = p_.names.commit();
  if (commit == old) {
    spdlog::info("refresh: {} is still at {}", what, old);
    note("still at " + old, !p_.hub.offline());
    return;
  }
  auto inv = p_.names.switch_to(commit, mtime);
  if (!inv) {
    spdlog::warn("refresh to {} failed: {}", commit, inv.error().message);
    note("listing " + commit + " failed: " + inv.error().message, false);
    return;
  }
  fuse_->invalidate(*inv);
  {
    std::lock_guard lock(facts_mu_);
    facts_.commit_changes++;
  }
  note("moved from " + old + " to " + commit, true);
  spdlog::info("refresh: {} moved from {} to {} ({} entries and {} inodes invalidated)", what, old,
               commit, inv->entries.size(), inv->inodes.size());
}

}  // namespace whfs
