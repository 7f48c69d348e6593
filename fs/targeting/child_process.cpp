#include "fs/targeting/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>
#include <utility>

#include "fs/common/clock.h"

extern char** environ;

namespace whfs::target {
namespace {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    reset();
    fd_ = std::exchange(o.fd_, -1);
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

bool make_pipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  read_end = Fd(fds[0]);
  write_end = Fd(fds[1]);
  return true;
}

// strerrordesc_np and sigdescr_np (glibc 2.32) are the thread-safe forms of strerror and
// strsignal: detection may run while other threads work.
std::string errno_text(int err) {
  const char* d = ::strerrordesc_np(err);
  return d != nullptr ? d : "error " + std::to_string(err);
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1 << 30));
}

// Reads the pipes until both are closed or the deadline passes. Returns false on timeout.
bool drain(Fd& out_fd, Fd& err_fd, std::string& out, std::string& err, Clock::time_point deadline) {
  char buf[16384];
  while (out_fd.get() >= 0 || err_fd.get() >= 0) {
    pollfd fds[2] = {{out_fd.get(), POLLIN, 0}, {err_fd.get(), POLLIN, 0}};
    const int left = remaining_ms(deadline);
    if (left == 0) return false;
    const int n = ::poll(fds, 2, left);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return false;  // the deadline passed
    if (n < 0) return true;    // poll itself failed: stop reading, reap() still bounds the wait
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      std::string& dst = i == 0 ? out : err;
      if (got <= 0) {
        (i == 0 ? out_fd : err_fd).reset();
      } else if (dst.size() < kMaxOutput) {
        dst.append(buf,
                   std::min<std::size_t>(static_cast<std::size_t>(got), kMaxOutput - dst.size()));
      }
    }
  }
  return true;
}

// Waits for the child until the deadline; kills it past the deadline. Always reaps it.
void reap(pid_t pid, bool timed_out, Clock::time_point deadline, ChildResult& r) {
  int status = 0;
  for (;;) {
    const pid_t got = timed_out ? 0 : ::waitpid(pid, &status, WNOHANG);
    if (got == pid) break;
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {  // ECHILD: someone else reaped it (SIGCHLD ignored); nothing to report
      r.end = ChildResult::End::kExited;
      r.code = 0;
      return;
    }
    if (timed_out || Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      r.end = ChildResult::End::kTimedOut;
      return;
    }
    // The pipes are closed but the child has not exited yet: poll briefly.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFSIGNALED(status)) {
    r.end = ChildResult::End::kSignaled;
    r.code = WTERMSIG(status);
  } else {
    r.end = ChildResult::End::kExited;
    r.code = WEXITSTATUS(status);
  }
}

}  // namespace

std::string seconds_text(std::chrono::milliseconds d) {
  const auto ms = d.count();
  std::string s = std::to_string(ms / 1000);
  if (ms % 1000 != 0) {
    std::string frac = std::to_string(1000 + ms % 1000).substr(1);  // "050" for 50 ms
    while (frac.back() == '0') frac.pop_back();
    s += "." + frac;
  }
  return s + " s";
}

std::string ChildResult::describe() const {
  switch (end) {
    case End::kExited:
      return "exited with status " + std::to_string(code);
    case End::kSignaled: {
      const char* name = ::sigdescr_np(code);
      return "was killed by signal " + std::to_string(code) + " (" +
             (name != nullptr ? name : "unknown") + ")";
    }
    case End::kTimedOut:
      return "did not finish within " + seconds_text(timeout) + " and was killed";
    case End::kStartFailed:
      return "could not start: " + start_error;
  }
  return "ended in an unknown way";
}

ChildResult run_program(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  ChildResult r;
  r.timeout = timeout;
  if (argv.empty() || argv[0].empty()) {
    r.start_error = "no program given";
    return r;
  }
  Fd out_r, out_w, err_r, err_w;
  if (!make_pipe(out_r, out_w) || !make_pipe(err_r, err_w)) {
    r.start_error = "pipe: " + errno_text(errno);
    return r;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_w.get(), 2);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  // posix_spawnp reports a failed exec (ENOENT, EACCES, ENOEXEC) as its own result in glibc.
  const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    r.start_error = argv[0] + ": " + errno_text(rc);
    return r;
  }
  out_w.reset();
  err_w.reset();
  const auto deadline = Clock::now() + timeout;
  const bool finished = drain(out_r, err_r, r.out, r.err, deadline);
  reap(pid, !finished, deadline, r);
  return r;
}

ChildResult run_in_child(const std::function<std::string()>& fn,
                         std::chrono::milliseconds timeout) {
  ChildResult r;
  r.timeout = timeout;
  Fd out_r, out_w, unused_r;
  if (!make_pipe(out_r, out_w)) {
    r.start_error = "pipe: " + errno_text(errno);
    return r;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    r.start_error = "fork: " + errno_text(errno);
    return r;
  }
  if (pid == 0) {
    int status = 0;
    try {
      const std::string result = fn();
      std::size_t done = 0;
      while (done < result.size()) {
        const ssize_t n = ::write(out_w.get(), result.data() + done, result.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
      }
    } catch (...) {
      status = 70;  // EX_SOFTWARE
    }
    ::_exit(status);
  }
  out_w.reset();
  const auto deadline = Clock::now() + timeout;
  const bool finished = drain(out_r, unused_r, r.out, r.err, deadline);
  reap(pid, !finished, deadline, r);
  return r;
}

}  // namespace whfs::target
