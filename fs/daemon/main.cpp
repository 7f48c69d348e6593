// wheelhousefs: parse the options, detach (unless -f), mount, serve.
//
// Without -f the command returns only when the mount is ready (or has failed, with one line
// on stderr and a non-zero status): the parent waits on a pipe for the daemon's verdict. This
// is what mount(8), /etc/fstab and scripts expect.

#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "fs/common/log.h"
#include "fs/common/mounts.h"
#include "fs/common/version.h"
#include "fs/config/options.h"
#include "fs/daemon/mount_app.h"
#include "fs/metrics/metrics.h"

#ifdef WHFS_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace {

// A crash leaves its cause in the log (stderr: the journal under systemd, the file given to
// -f): the signal and a backtrace, then the default action (a core dump where enabled).
void on_fatal_signal(int sig) {
  const char* name = sig == SIGSEGV   ? "SIGSEGV"
                     : sig == SIGBUS  ? "SIGBUS"
                     : sig == SIGFPE  ? "SIGFPE"
                     : sig == SIGILL  ? "SIGILL"
                     : sig == SIGABRT ? "SIGABRT"
                                      : "a fatal signal";
  const char head[] = "wheelhousefs: crashed with ";
  [[maybe_unused]] auto r1 = ::write(STDERR_FILENO, head, sizeof head - 1);
  [[maybe_unused]] auto r2 = ::write(STDERR_FILENO, name, std::strlen(name));
  [[maybe_unused]] auto r3 = ::write(STDERR_FILENO, "; backtrace:\n", 13);
  void* frames[64];
  ::backtrace_symbols_fd(frames, ::backtrace(frames, 64), STDERR_FILENO);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_crash_handlers() {
  void* warm[1];
  ::backtrace(warm, 1);  // the first call loads libgcc (it allocates): not in a handler
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sa.sa_flags = SA_RESETHAND;
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(s, &sa, nullptr);
  std::set_terminate([] {
    try {
      if (auto e = std::current_exception()) std::rethrow_exception(e);
      std::fputs("wheelhousefs: terminate called without an exception\n", stderr);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "wheelhousefs: uncaught exception: %s\n", e.what());
    } catch (...) {
      std::fputs("wheelhousefs: uncaught exception of an unknown type\n", stderr);
    }
    std::abort();
  });
}

void notify_systemd([[maybe_unused]] const char* state) {
#ifdef WHFS_HAVE_SYSTEMD
  sd_notify(0, state);
#endif
}

// The parent's side of daemonizing: wait for "R" (ready) or "E<message>" from the child.
int wait_for_daemon(int fd) {
  std::string msg;
  char buf[512];
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) msg.append(buf, static_cast<std::size_t>(n));
  if (!msg.empty() && msg[0] == 'R') return 0;
  if (!msg.empty() && msg[0] == 'E') {
    std::fprintf(stderr, "wheelhousefs: %s\n", msg.c_str() + 1);
  } else {
    std::fprintf(stderr, "wheelhousefs: the daemon exited during startup\n");
  }
  return 1;
}

// Runs a program (no shell) and returns its exit status.
int run_quietly(std::vector<std::string> argv) {
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Where a detached daemon logs when there is no syslog socket and no log_file option.
std::string fallback_log_file(bool is_root) {
  if (is_root) return "/var/log/wheelhousefs.log";
  if (const char* x = std::getenv("XDG_STATE_HOME"); x != nullptr && *x == '/') {
    return std::string(x) + "/wheelhouse-fs/wheelhousefs.log";
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h == '/') {
    return std::string(h) + "/.local/state/wheelhouse-fs/wheelhousefs.log";
  }
  return "";
}

// A mount point must exist, be a folder, have no mount on it already (a second daemon would
// stack over the first) and be empty unless -o nonempty. Makes opts.mountpoint absolute.
// Returns "" or the one line that says what is wrong.
std::string check_mountpoint(whfs::MountOptions& opts) {
  const std::string& m = opts.mountpoint;
  struct stat st {};
  if (::stat(m.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return "mount point " + m + " does not exist (create it: mkdir -p " + m + ")";
    return "cannot use mount point " + m + ": " + std::strerror(errno);
  }
  if (!S_ISDIR(st.st_mode)) return "mount point " + m + " is not a folder";
  if (char* real = ::realpath(m.c_str(), nullptr); real != nullptr) {
    opts.mountpoint = real;
    std::free(real);
  }
  if (whfs::MountEntry e; whfs::mounted_on(opts.mountpoint, &e)) {
    if (e.type == "fuse.wheelhousefs") {
      return opts.mountpoint + " already has a wheelhouse mount on it (" + e.source +
             "; see wheelhouse status " + opts.mountpoint + "); unmount it first: fusermount3 -u " +
             opts.mountpoint;
    }
    return opts.mountpoint + " already has a mount on it (" + e.type + " " + e.source +
           "); unmount it first, or choose another folder";
  }
  if (!opts.nonempty) {
    DIR* d = ::opendir(opts.mountpoint.c_str());
    if (d == nullptr)
      return "cannot read mount point " + opts.mountpoint + ": " + std::strerror(errno);
    std::string first;
    std::size_t n = 0;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      if (n++ == 0) first = name;
    }
    ::closedir(d);
    if (n > 0) {
      return "mount point " + opts.mountpoint + " is not empty (it holds '" + first + "'" +
             (n > 1 ? " and " + std::to_string(n - 1) + " more" : "") +
             "); use an empty folder, or -o nonempty to mount over it (hiding those files)";
    }
  }
  return "";
}

// Whether this process can mount at all, checked before anything is created (the cache, the
// log's folder): /dev/fuse opens, and for a user (not root) fusermount3 is there to do the
// mount(2) and allow_other is allowed. Returns "" or the one line that says what to do.
std::string check_fuse(const whfs::MountOptions& opts) {
  const bool root = ::geteuid() == 0;
  const int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENODEV || err == ENXIO) {
      return std::string("/dev/fuse: ") + std::strerror(err) +
             ": FUSE is not available here (the fuse module: modprobe fuse; in a container: "
             "--device /dev/fuse --cap-add SYS_ADMIN)";
    }
    if (root) {
      return std::string("/dev/fuse: ") + std::strerror(err) +
             " (a container needs --device /dev/fuse --cap-add SYS_ADMIN; "
             "`wheelhouse doctor` checks every step)";
    }
    struct stat st {};
    std::string how = "ask an admin to make it usable (chmod 0666 /dev/fuse, as Debian ships it)";
    if (::stat("/dev/fuse", &st) == 0 && st.st_gid != 0) {
      const group* g = ::getgrgid(st.st_gid);
      how = "ask an admin to add this user to group " +
            (g != nullptr ? std::string(g->gr_name) : std::to_string(st.st_gid)) +
            " (then log in again)";
    }
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return std::string("/dev/fuse: ") + std::strerror(err) + ": this user may not use FUSE (" +
           mode + "); " + how + ", or mount as root with allow_other; `wheelhouse doctor` " +
           "checks every step";
  }
  ::close(fd);
  if (root) return "";
  bool fusermount = false;
  for (const char* dir : {"/usr/bin", "/bin", "/usr/local/bin"}) {
    struct stat st {};
    if (::stat((std::string(dir) + "/fusermount3").c_str(), &st) == 0 &&
        (st.st_mode & S_ISUID) != 0) {
      fusermount = true;
      break;
    }
  }
  if (!fusermount) {
    return "fusermount3 (setuid root) is not installed: a user's mount needs it (apt-get install "
           "fuse3), or mount as root";
  }
  const bool allow_other = std::find(opts.fuse_options.begin(), opts.fuse_options.end(),
                                     "allow_other") != opts.fuse_options.end();
  if (allow_other) {
    bool allowed = false;
    if (FILE* f = std::fopen("/etc/fuse.conf", "re"); f != nullptr) {
      char line[256];
      while (std::fgets(line, sizeof line, f) != nullptr) {
        std::string_view l(line);
        while (!l.empty() && (l.back() == '\n' || l.back() == ' ' || l.back() == '\t')) {
          l.remove_suffix(1);
        }
        if (l == "user_allow_other") allowed = true;
      }
      std::fclose(f);
    }
    if (!allowed) {
      return "allow_other: a user's mount may offer itself to others only with user_allow_other "
             "in /etc/fuse.conf (an admin's setting); or mount without allow_other, or as root";
    }
  }
  return "";
}

void detach_stdio() {
  const int devnull = ::open("/dev/null", O_RDWR);
  if (devnull < 0) return;
  ::dup2(devnull, STDIN_FILENO);
  ::dup2(devnull, STDOUT_FILENO);
  ::dup2(devnull, STDERR_FILENO);
  if (devnull > STDERR_FILENO) ::close(devnull);
}

}  // namespace

int main(int argc, char** argv) {
  // A long-running daemon with ~40 threads: few malloc arenas, and a fixed mmap threshold so
  // that large buffers go back to the kernel when freed (glibc's sliding threshold would move
  // them into arenas that never shrink).
  mallopt(M_ARENA_MAX, 4);
  mallopt(M_MMAP_THRESHOLD, 512 << 10);
  // Every block put allocates LMDB's dirty pages (32 KiB each) and frees them at the commit;
  // with glibc's default 128 KiB trim threshold the freed top of the heap goes back to the
  // kernel each time and comes back as fresh zeroed pages in the next put (page faults then
  // take a fifth of the daemon's CPU on a cold read). Up to 16 MiB of free heap is kept per
  // arena.
  mallopt(M_TRIM_THRESHOLD, 16 << 20);
  install_crash_handlers();
  std::vector<std::string> args(argv + 1, argv + argc);
  auto parsed = whfs::parse_mount_args(args, [](const char* n) { return std::getenv(n); });
  if (!parsed) {
    std::fprintf(stderr, "wheelhousefs: %s\n", parsed.error().c_str());
    return 2;
  }
  whfs::MountOptions opts = std::move(parsed).value();
  if (opts.show_help) {
    std::fputs(whfs::mount_usage("wheelhousefs").c_str(), stdout);
    return 0;
  }
  if (opts.show_version) {
    std::printf("wheelhousefs %s\n", whfs::kVersion);
    return 0;
  }
  if (opts.cache_dir.empty()) {
    opts.cache_dir =
        whfs::default_cache_dir([](const char* n) { return std::getenv(n); }, ::geteuid() == 0);
    if (opts.cache_dir.empty()) {
      std::fprintf(stderr, "wheelhousefs: no cache directory: HOME is not set; give cache_dir=\n");
      return 2;
    }
  }
  struct statfs sfs {};
  // statfs always reaches the filesystem (stat of a mount's root may come from the kernel's
  // attribute cache), so it tells a dead mount apart.
  if (::statfs(opts.mountpoint.c_str(), &sfs) != 0 && errno == ENOTCONN) {
    // A daemon that crashed left its mount behind ("Transport endpoint is not connected"):
    // detach it so that a restart (e.g. systemd's Restart=on-failure) can mount again.
    std::fprintf(stderr, "wheelhousefs: %s is a dead mount of a crashed daemon; detaching it\n",
                 opts.mountpoint.c_str());
    if (::umount2(opts.mountpoint.c_str(), MNT_DETACH) != 0 &&
        run_quietly({"fusermount3", "-u", "-z", opts.mountpoint}) != 0) {
      std::fprintf(stderr, "wheelhousefs: cannot detach the dead mount on %s\n",
                   opts.mountpoint.c_str());
    }
  }
  if (auto bad = check_mountpoint(opts); !bad.empty()) {
    std::fprintf(stderr, "wheelhousefs: %s\n", bad.c_str());
    return 2;
  }
  if (auto bad = check_fuse(opts); !bad.empty()) {
    std::fprintf(stderr, "wheelhousefs: %s\n", bad.c_str());
    return 1;
  }
  // The files the daemon will write, checked (and the log opened) before it starts: a folder
  // another user can change, a planted link, another user's file is a bad option.
  std::unique_ptr<whfs::LogFile> log_file;
  if (!opts.foreground && !opts.log_file.empty()) {
    auto f = whfs::LogFile::open(opts.log_file, opts.log_size, "log_file=" + opts.log_file);
    if (!f) {
      std::fprintf(stderr, "wheelhousefs: %s\n", f.error().c_str());
      return 2;
    }
    log_file = std::move(*f);
  }
  if (!opts.metrics_textfile.empty()) {
    if (auto t = whfs::metrics::open_textfile_folder(opts.metrics_textfile); !t) {
      std::fprintf(stderr, "wheelhousefs: %s\n", t.error().c_str());
      return 2;
    }
  }
  whfs::setup_logging(opts.log_level);
  // The daemon holds the token in memory: no core dump, and no ptrace or /proc/PID/mem
  // reading by other processes of the same user, unless asked for when debugging.
  if (!opts.dumpable && ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    spdlog::warn("cannot make the daemon non-dumpable: {}", std::strerror(errno));
  }

  int ready_fd = -1;
  if (!opts.foreground) {
    int fds[2];
    if (::pipe(fds) != 0) {
      std::perror("wheelhousefs: pipe");
      return 1;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("wheelhousefs: fork");
      return 1;
    }
    if (pid > 0) {
      ::close(fds[1]);
      return wait_for_daemon(fds[0]);
    }
    ::close(fds[0]);
    ::setsid();
    if (::chdir("/") != 0) return 1;
    ready_fd = fds[1];
  }

  whfs::StartupHooks hooks;
  hooks.ready = [&] {
    notify_systemd("READY=1");
    if (ready_fd >= 0) {
      // From now on the daemon has no terminal: its log goes to log_file=, syslog (the
      // journal) or a file of its own, never nowhere.
      const auto where = whfs::log_detached(std::move(log_file),
                                            fallback_log_file(::geteuid() == 0), opts.log_size);
      if (!where) {
        spdlog::warn("cannot log to a file ({}); only `wheelhouse status` keeps the last errors",
                     where.error());
      } else {
        spdlog::info("wheelhousefs {} on {}: logging to {}", whfs::kVersion, opts.mountpoint,
                     *where);
      }
      (void)!::write(ready_fd, "R", 1);
      ::close(ready_fd);
      ready_fd = -1;
      detach_stdio();
    }
  };
  hooks.failed = [&](const std::string& why) {
    // The cause first, for the user: the parent prints it when detached; in the foreground a
    // terminal gets it plain (no timestamp), a log (the journal) through spdlog.
    if (ready_fd < 0) {
      if (::isatty(STDERR_FILENO) != 0) {
        std::fprintf(stderr, "wheelhousefs: %s\n", why.c_str());
      } else {
        spdlog::error("{}", why);
      }
    }
    notify_systemd(("STATUS=" + why).c_str());
    if (ready_fd >= 0) {
      const std::string msg = "E" + why;
      (void)!::write(ready_fd, msg.data(), msg.size());
      ::close(ready_fd);
      ready_fd = -1;
    }
  };
  return whfs::run_mount(opts, hooks);
}
