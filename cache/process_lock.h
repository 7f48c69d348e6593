#pragma once
// A lock shared by the threads of this process and by every process that opens the same file:
// an open file description (OFD) lock on one byte, behind an in-process mutex (an OFD lock
// does not exclude other threads using the same description). The kernel drops an OFD lock
// when its holder dies, whatever PID namespace it was in, and nothing about it depends on a
// process or thread id: unlike LMDB's robust mutexes, whose owner is a thread id, it cannot
// mistake a live holder in another container for a dead waiter of the same id.
//
// Waiting is bounded: a holder that is stopped (SIGSTOP, a paused container) must not hold up
// every other process sharing the cache.

#include <fcntl.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <thread>

#include "fs/common/clock.h"

namespace whfs::cache {

class ProcessLock {
 public:
  // `fd` must stay open while the lock is used; -1 makes every call succeed at once (a
  // read-only cache, which no one writes).
  ProcessLock(int fd, off_t byte) : fd_(fd), byte_(byte) {}
  ProcessLock(const ProcessLock&) = delete;
  ProcessLock& operator=(const ProcessLock&) = delete;

  // False when another process held the lock past the deadline. The threads of this process
  // queue without a deadline (they all make progress), but once one of them found another
  // process holding the lock too long, the others give up at once for a second instead of
  // each waiting out a deadline of its own.
  bool lock_until(Deadline deadline) {
    mu_.lock();
    if (fd_ < 0) return true;
    if (Clock::now() < busy_until_) {
      mu_.unlock();
      return false;
    }
    // Polls with a growing sleep: F_OFD_SETLKW cannot be given a deadline.
    auto pause = std::chrono::microseconds(50);
    while (true) {
      const int rc = set(F_WRLCK, F_OFD_SETLK);
      if (rc == 0) return true;
      if (rc != EAGAIN && rc != EACCES && rc != EINTR) break;  // a real error: do not spin
      if (Clock::now() + pause >= deadline) break;
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
    }
    busy_until_ = Clock::now() + std::chrono::seconds(1);
    mu_.unlock();
    return false;
  }

  void unlock() {
    if (fd_ >= 0) set(F_UNLCK, F_OFD_SETLK);
    mu_.unlock();
  }

 private:
  int set(short type, int cmd) {
    struct flock fl {};
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = byte_;
    fl.l_len = 1;
    return ::fcntl(fd_, cmd, &fl) == 0 ? 0 : errno;
  }

  const int fd_;
  const off_t byte_;
  std::mutex mu_;          // the threads of this process; held while the OFD lock is held
  Deadline busy_until_{};  // guarded by mu_
};

// Holds a ProcessLock for a scope; check `owns()`.
class ProcessLockGuard {
 public:
  ProcessLockGuard(ProcessLock& lock, Deadline deadline)
      : lock_(lock), owns_(lock.lock_until(deadline)) {}
  ~ProcessLockGuard() {
    if (owns_) lock_.unlock();
  }
  ProcessLockGuard(const ProcessLockGuard&) = delete;
  ProcessLockGuard& operator=(const ProcessLockGuard&) = delete;
  bool owns() const { return owns_; }

 private:
  ProcessLock& lock_;
  bool owns_;
};

}  // namespace whfs::cache
