#include "fs/fuse/fuse_mount.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "fs/fuse/fuse_ops.h"

namespace whfs::fuse {
namespace {

// The device ("major:minor") of the newest mount on `mountpoint`, from mountinfo (a stat of the
// mount point would wait for this very daemon); "" when none.
std::string mount_device(const std::string& mountpoint) {
  FILE* f = std::fopen("/proc/self/mountinfo", "r");
  if (f == nullptr) return "";
  char line[4096];
  std::string dev;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    // id parent major:minor root mountpoint ...
    char devbuf[64], root[1024], mnt[2048];
    if (std::sscanf(line, "%*s %*s %63s %1023s %2047s", devbuf, root, mnt) == 3 &&
        mountpoint == mnt) {
      dev = devbuf;  // the last match is the newest mount
    }
  }
  std::fclose(f);
  return dev;
}

// The kernel caps a FUSE mount's readahead at its backing device's read_ahead_kb (128 KiB by
// default), whatever max_readahead says, so sequential reads reach the daemon as 128 KiB
// requests: raised for this mount's device. Needs root; without it the default stays.
void raise_readahead(const std::string& dev, unsigned kb) {
  if (kb == 0 || dev.empty()) return;
  const std::string path = "/sys/class/bdi/" + dev + "/read_ahead_kb";
  FILE* ra = std::fopen(path.c_str(), "w");
  if (ra == nullptr) {
    spdlog::debug("cannot raise {} (not root?): kernel readahead stays at its default", path);
    return;
  }
  std::fprintf(ra, "%u\n", kb);
  std::fclose(ra);
}

// SIGUSR1 wakes request threads out of read(2) at exit; its handler does nothing.
void wake_handler(int) {}

}  // namespace

FuseMount::FuseMount(FuseConfig config) : config_(std::move(config)) {}

Expected<std::unique_ptr<FuseMount>, std::string> FuseMount::mount(Filesystem& fs,
                                                                   const FuseConfig& config) {
  std::unique_ptr<FuseMount> m(new FuseMount(config));
  m->data_ =
      std::make_unique<SessionData>(SessionData{&fs, config.entry_timeout, config.attr_timeout});
  std::vector<std::string> argv = {"wheelhousefs"};
  std::string opts = "ro";
  for (const auto& o : config.options) opts += "," + o;
  argv.emplace_back("-o");
  argv.push_back(opts);
  if (config.debug) argv.emplace_back("-d");
  std::vector<char*> cargv;
  cargv.reserve(argv.size());
  for (auto& a : argv) cargv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(cargv.size()), cargv.data());
  const fuse_lowlevel_ops ops = make_ops();
  m->se_ = fuse_session_new(&args, &ops, sizeof ops, m->data_.get());
  fuse_opt_free_args(&args);
  if (m->se_ == nullptr)
    return unexpected(std::string("cannot create the FUSE session (bad FUSE option?)"));
  if (fuse_session_mount(m->se_, config.mountpoint.c_str()) != 0) {
    return unexpected("cannot mount on " + config.mountpoint +
                      " (is /dev/fuse usable, fuse3 installed, the folder empty and not mounted?)");
  }
  m->mounted_ = true;
  const std::string dev = mount_device(config.mountpoint);
  unsigned major = 0;
  unsigned minor = 0;
  if (std::sscanf(dev.c_str(), "%u:%u", &major, &minor) == 2) {
    m->device_ = makedev(major, minor);
  } else {
    // Not found by name (a path mountinfo escapes): what the kernel knows of the mount's root,
    // without asking this daemon (AT_STATX_DONT_SYNC).
    struct statx stx {};
    if (::statx(AT_FDCWD, config.mountpoint.c_str(), AT_STATX_DONT_SYNC, STATX_TYPE, &stx) == 0) {
      m->device_ = makedev(stx.stx_dev_major, stx.stx_dev_minor);
    }
  }
  raise_readahead(dev, config.kernel_readahead_kb);
  struct sigaction sa {};
  sa.sa_handler = wake_handler;  // no SA_RESTART: read(2) returns EINTR
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);
  return m;
}

FuseMount::~FuseMount() {
  if (se_ == nullptr) return;
  if (mounted_) fuse_session_unmount(se_);
  fuse_session_destroy(se_);
}

void FuseMount::serve() {
  // This thread must receive SIGUSR1 (the others keep it blocked).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  fuse_buf buf{};
  while (!fuse_session_exited(se_) && !exiting_) {
    {
      std::lock_guard lock(threads_mu_);
      ++idle_;
    }
    const int res = fuse_session_receive_buf(se_, &buf);
    {
      // The last idle thread took a request: start another, so that some thread always reads
      // /dev/fuse. Reads may wait for downloads, and the kernel's INTERRUPT for a reader that
      // was killed (the only way to free the thread it holds) must find a thread to read it.
      std::lock_guard lock(threads_mu_);
      --idle_;
      if (idle_ == 0 && res > 0 && !exiting_ && threads_.size() < config_.max_threads) {
        start_thread_locked();
      }
    }
    if (res == -EINTR) continue;
    if (res <= 0) {
      if (res < 0 && res != -ENODEV) spdlog::error("FUSE receive failed: {}", std::strerror(-res));
      fuse_session_exit(se_);  // ENODEV: unmounted from outside
      break;
    }
    fuse_session_process_buf(se_, &buf);
  }
  std::free(buf.mem);
}

void FuseMount::start_thread_locked() {
  ++live_;
  threads_.emplace_back([this] {
    serve();
    std::lock_guard done(threads_mu_);
    if (--live_ == 0) threads_cv_.notify_all();
  });
}

void FuseMount::run() {
  {
    std::lock_guard lock(threads_mu_);
    for (unsigned i = 0; i < std::max(1u, config_.threads); ++i) start_thread_locked();
  }
  // Join only once every thread has finished, and under the lock that exit() signals them
  // under: a thread is never signalled after it has been joined.
  std::unique_lock lock(threads_mu_);
  threads_cv_.wait(lock, [this] { return live_ == 0; });
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void FuseMount::exit() {
  exiting_ = true;
  fuse_session_exit(se_);
  std::lock_guard lock(threads_mu_);
  for (auto& t : threads_) pthread_kill(t.native_handle(), SIGUSR1);
}

void FuseMount::invalidate(const ns::Invalidations& inv) {
  for (const auto& [parent, name] : inv.entries) {
    fuse_lowlevel_notify_inval_entry(se_, parent, name.c_str(), name.size());
  }
  for (const ns::Ino ino : inv.inodes) fuse_lowlevel_notify_inval_inode(se_, ino, 0, 0);
}

void FuseMount::invalidate_data(const std::vector<ns::Ino>& inodes) {
  // Offset 0, length 0: every cached page of the inode (and its attributes).
  for (const ns::Ino ino : inodes) {
    const int rc = fuse_lowlevel_notify_inval_inode(se_, ino, 0, 0);
    if (rc != 0 && rc != -ENOENT) {
      spdlog::warn("cannot drop the kernel's pages of inode {}: {}", ino, std::strerror(-rc));
    }
  }
}

}  // namespace whfs::fuse
