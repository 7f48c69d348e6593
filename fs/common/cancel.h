#pragma once
// A request's cancellation: raised by another thread (FUSE's INTERRUPT when the caller was
// killed), it wakes the condition variable the request waits on, so that a request thread is
// never held by a reader that is gone.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "fs/common/clock.h"

namespace whfs {

class CancelFlag {
 public:
  CancelFlag() = default;
  CancelFlag(const CancelFlag&) = delete;
  CancelFlag& operator=(const CancelFlag&) = delete;

  // Raises the flag and wakes the wait in progress, if any. Any thread.
  void cancel() {
    cancelled_ = true;
    std::lock_guard lock(mu_);
    if (cv_ != nullptr) {
      std::lock_guard wake(*cv_mu_);
      cv_->notify_all();
    }
  }

  bool cancelled() const { return cancelled_.load(); }

  // A check a waiting thread makes every `every` (e.g. "the calling process is gone"): the
  // kernel sends no INTERRUPT for its own readahead, so a reader killed while the pages it
  // wanted were being read is noticed this way. Set before any wait.
  void set_liveness_check(std::function<bool()> gone,
                          std::chrono::milliseconds every = std::chrono::milliseconds(250)) {
    gone_ = std::move(gone);
    every_ = every;
  }

  // Waits on `cv` (guarded by `m`, which the caller does not hold) until `done()`, the
  // deadline or cancel(). Returns done(). Lock order: mu_ -> m in cancel(); the waiter never
  // holds both, so the two cannot deadlock, and a cancel() between the waiter's check and its
  // sleep still wakes it (cancel() needs `m`, which the waiter holds until it sleeps).
  template <class Done>
  bool wait_until(std::mutex& m, std::condition_variable& cv, Deadline deadline, Done done) {
    {
      std::lock_guard lock(mu_);
      cv_ = &cv;
      cv_mu_ = &m;
    }
    bool ok = false;
    while (true) {
      const Deadline slice = gone_ ? std::min(deadline, Clock::now() + every_) : deadline;
      {
        std::unique_lock lock(m);
        cv.wait_until(lock, slice, [&] { return done() || cancelled_.load(); });
        ok = done();
      }
      if (ok || cancelled_ || Clock::now() >= deadline) break;
      if (gone_ && gone_()) cancelled_ = true;
    }
    std::lock_guard lock(mu_);
    cv_ = nullptr;
    cv_mu_ = nullptr;
    return ok;
  }

 private:
  std::atomic<bool> cancelled_{false};
  std::function<bool()> gone_;
  std::chrono::milliseconds every_{250};
  std::mutex mu_;  // guards cv_ and cv_mu_; taken before *cv_mu_
  std::condition_variable* cv_ = nullptr;
  std::mutex* cv_mu_ = nullptr;
};

}  // namespace whfs
