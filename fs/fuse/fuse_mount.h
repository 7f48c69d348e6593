#pragma once
// The FUSE session: mount, a pool of request threads, kernel cache invalidation, unmount.
// fs/fuse/ is the only code that includes libfuse's headers.

#include <atomic>
#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fs/common/expected.h"
#include "fs/vfs/filesystem.h"

struct fuse_session;

namespace whfs::fuse {

struct FuseConfig {
  std::string mountpoint;
  std::vector<std::string> options;  // allow_other, fsname=..., ... (always mounted read-only)
  bool debug = false;                // libfuse's request trace
  unsigned threads = 16;             // request threads at the start
  // More are started whenever none is left to read /dev/fuse (reads wait for downloads), up to
  // this many; they stay for the next burst.
  unsigned max_threads = 256;
  double entry_timeout = 86400;  // content is immutable per commit; a refresh invalidates
  double attr_timeout = 86400;
  unsigned kernel_readahead_kb = 4096;  // the mount's read_ahead_kb (0: leave the default)
};

class FuseMount {
 public:
  struct SessionData;  // the request handlers' view of the mount (fuse_mount.cpp)

  static Expected<std::unique_ptr<FuseMount>, std::string> mount(Filesystem& fs,
                                                                 const FuseConfig& config);
  ~FuseMount();  // unmounts (if still mounted) and destroys the session
  FuseMount(const FuseMount&) = delete;
  FuseMount& operator=(const FuseMount&) = delete;

  // Serves requests until exit() or an external unmount; returns when every request thread
  // has finished its request.
  void run();
  // Makes run() return (async-signal-safe only in the sense of being callable from the
  // signal-waiting thread, not from a handler).
  void exit();

  // Tells the kernel to forget entries and inodes after a refresh.
  void invalidate(const ns::Invalidations& inv);
  // The mount's device (st_dev of every file in it); nullopt when it could not be told.
  std::optional<dev_t> device() const { return device_; }
  // Tells the kernel to drop the cached pages of these inodes (a corrupt download).
  void invalidate_data(const std::vector<ns::Ino>& inodes);

 private:
  explicit FuseMount(FuseConfig config);
  void serve();
  void start_thread_locked();

  FuseConfig config_;
  std::unique_ptr<SessionData> data_;
  fuse_session* se_ = nullptr;
  bool mounted_ = false;
  std::atomic<bool> exiting_{false};
  std::mutex threads_mu_;  // guards threads_, live_ and idle_
  std::condition_variable threads_cv_;
  std::optional<dev_t> device_;
  std::list<std::thread> threads_;  // a list: exit() signals them while others are added
  unsigned live_ = 0;               // threads still serving
  unsigned idle_ = 0;               // threads waiting for a request
};

}  // namespace whfs::fuse
