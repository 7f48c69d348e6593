#pragma once
// The mount's background work, on two threads of its own: the signals (SIGHUP refreshes,
// SIGTERM and SIGINT unmount), the refresh (on SIGHUP and every refresh=: the GPUs again,
// then the revision; a new commit switches the tree and invalidates what the kernel kept of
// the old one), the cache's upkeep every 60 s (leases of open files, a flush), and dropping
// the kernel's pages of a content that failed its hash.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/block_cache.h"
#include "fs/config/options.h"
#include "fs/daemon/commit_at_mount.h"
#include "fs/fuse/fuse_mount.h"
#include "fs/hub/hub_client.h"
#include "fs/namespace/namespace.h"
#include "fs/targeting/caller_targets.h"
#include "fs/vfs/filesystem.h"

namespace whfs {

struct RefreshFacts {
  std::uint64_t commit_changes = 0;
  std::int64_t last_at = 0;  // the last refresh (Unix seconds), 0: none yet
  std::int64_t last_ok = 0;  // the last one that reached the Hub
  std::string last_result;   // "still at ...", "moved from ... to ...", "failed: ..."
};

class Refresher {
 public:
  struct Parts {
    hub::HubClient& hub;
    cache::BlockCache& cache;
    cache::AccessScope& scope;
    ns::Namespace& names;
    target::CallerTargets& callers;
    Filesystem& fs;
  };
  Refresher(const MountOptions& o, RevisionKey key, Parts parts)
      : o_(o), key_(std::move(key)), p_(parts) {}
  ~Refresher() { stop(); }
  Refresher(const Refresher&) = delete;
  Refresher& operator=(const Refresher&) = delete;

  // The mount to invalidate and to end on SIGTERM, once mounted; before start().
  void attach(fuse::FuseMount& fuse) { fuse_ = &fuse; }
  void start();
  // Ends both threads (the mount's serving loop has returned).
  void stop();
  // A content failed its hash: its kernel pages go, from the refresh thread (never from the
  // thread that found it, which may be a FUSE request the kernel waits on holding them).
  void drop_pages_of(const cache::ContentId& id);

  RefreshFacts facts() const;
  // SIGTERM or SIGINT when one ended the mount, else 0 (an unmount from outside).
  int stop_signal() const { return stop_signal_.load(); }

 private:
  void wait_for_signals();
  void loop();
  void refresh();
  void note(std::string result, bool reached_hub);

  const MountOptions& o_;
  const RevisionKey key_;
  const Parts p_;
  fuse::FuseMount* fuse_ = nullptr;  // set before the threads start, then read only
  std::atomic<int> stop_signal_{0};

  mutable std::mutex facts_mu_;  // guards facts_ (a leaf)
  RefreshFacts facts_;

  std::mutex mu_;  // guards stopping_, refresh_requested_ and corrupt_
  std::condition_variable cv_;
  bool stopping_ = false;
  bool refresh_requested_ = false;
  std::vector<cache::ContentId> corrupt_;  // contents whose kernel pages must go
  std::thread signals_;
  std::thread loop_;
};

}  // namespace whfs
