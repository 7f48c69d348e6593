// wheelhouse mounts: every wheelhouse mount with its daemon and whether it answers; refresh and
// stop: one mount's daemon, found from the mount's own status and checked to be it (never a
// process found by its name alone).

#include <poll.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "tools/cli/cli_commands.h"
#include "tools/cli/mount_select.h"

extern char** environ;

namespace whfs::cli {
namespace {

using Clock = std::chrono::steady_clock;

// A process, held by a pidfd where the kernel has them (5.3): a signal or a wait then reaches
// that process even if its pid is reused meanwhile.
class Process {
 public:
  explicit Process(pid_t pid) : pid_(pid) {
#ifdef SYS_pidfd_open
    fd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#endif
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process() {
    if (fd_ >= 0) ::close(fd_);
  }
  // 0, or errno.
  int signal(int sig) const {
#ifdef SYS_pidfd_send_signal
    if (fd_ >= 0) {
      return ::syscall(SYS_pidfd_send_signal, fd_, sig, nullptr, 0) == 0 ? 0 : errno;
    }
#endif
    return ::kill(pid_, sig) == 0 ? 0 : errno;
  }
  // Whether it ended within `timeout`.
  bool wait_exit(std::chrono::milliseconds timeout) const {
    const auto until = Clock::now() + timeout;
    if (fd_ >= 0) {
      pollfd p{fd_, POLLIN, 0};
      for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
        const int r = ::poll(&p, 1, static_cast<int>(std::max<long long>(0, left)));
        if (r > 0) return true;
        if (r == 0) return false;
        if (errno != EINTR) break;
      }
    }
    // No pidfd: the process is gone or a zombie (a parent not this one reaps it).
    for (;;) {
      const bool gone = ::kill(pid_, 0) != 0 && errno == ESRCH;
      if (gone || zombie()) return true;
      if (Clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

 private:
  bool zombie() const {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid_));
    FILE* f = std::fopen(path, "re");
    if (f == nullptr) return true;
    char state = '?';
    const int n = std::fscanf(f, "%*d (%*[^)]) %c", &state);
    std::fclose(f);
    return n == 1 && (state == 'Z' || state == 'X');
  }
  pid_t pid_;
  int fd_ = -1;
};

std::string systemd_unit_of(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/cgroup", static_cast<int>(pid));
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return "";
  char line[4096];
  std::string unit;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    const std::string l = line;
    const auto at = l.find("/wheelhousefs@");
    if (at == std::string::npos) continue;
    const auto end = l.find_first_of("/\n", at + 1);
    unit = l.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
    break;
  }
  std::fclose(f);
  return unit.ends_with(".service") ? unit : "";
}

// fusermount3 with `args`; its exit status (127: it could not be run).
int fusermount(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string prog = "fusermount3";
  argv.push_back(prog.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child = 0;
  if (::posix_spawnp(&child, "fusermount3", nullptr, nullptr, argv.data(), environ) != 0) {
    return 127;
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

// Detaches a mount now; it goes away once nothing uses it (a dead one has nothing left to end).
bool detach(const std::string& path) {
  if (::geteuid() == 0 && ::umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0) return true;
  return fusermount({"-u", "-z", path}) == 0;
}

// Unmounts; false with the reason (as root, errno's; else fusermount3 said it on stderr).
bool unmount(const std::string& path, std::string* why) {
  if (::geteuid() == 0) {
    if (::umount2(path.c_str(), UMOUNT_NOFOLLOW) == 0) return true;
    const int err = errno;
    *why = err == EBUSY ? "busy: a process has a file open or its working folder in it "
                          "(`fuser -vm " +
                              path + "` lists them)"
                        : std::string(std::strerror(err));
    return false;
  }
  if (fusermount({"-u", path}) == 0) return true;
  *why = "fusermount3 -u failed (above)";
  return false;
}

std::string pad(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

}  // namespace

int run_mounts(bool json) {
  const auto probes = probe_mounts(wheelhouse_mount_table());
  if (json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& p : probes) {
      nlohmann::json j;
      j["mountpoint"] = p.mount.path;
      j["also_at"] = p.mount.also_at;
      j["state"] = to_string(p.state);
      j["repo"] =
          p.state == MountState::kLive ? p.status.value("repo", p.mount.source) : p.mount.source;
      j["revision"] = p.state == MountState::kLive ? nlohmann::json(p.status.value("revision", ""))
                                                   : nlohmann::json(nullptr);
      j["commit"] = p.state == MountState::kLive ? nlohmann::json(p.status.value("commit", ""))
                                                 : nlohmann::json(nullptr);
      j["pid"] = p.pid > 0 ? nlohmann::json(p.pid) : nlohmann::json(nullptr);
      j["uid"] = p.mount.user_id >= 0 ? nlohmann::json(p.mount.user_id) : nlohmann::json(nullptr);
      j["user"] = user_name(p.mount.user_id);
      if (!p.error.empty()) j["error"] = p.error;
      arr.push_back(std::move(j));
    }
    std::printf("%s\n", arr.dump(2).c_str());
    return kOk;
  }
  if (probes.empty()) {
    std::printf(
        "no wheelhouse mount here (wheelhousefs DoctorPopi/python_wheelhouse /mnt/wheelhouse "
        "mounts one)\n");
    return kOk;
  }
  struct Row {
    std::string folder, repo, pid, user, state;
  };
  std::vector<Row> rows{{"FOLDER", "REPOSITORY@REVISION", "PID", "USER", "STATE"}};
  for (const auto& p : probes) {
    Row r;
    r.folder = p.mount.path;
    for (const auto& a : p.mount.also_at) r.folder += " (also " + a + ")";
    r.repo = repo_text(p);
    r.pid = p.pid > 0 ? std::to_string(p.pid) : "-";
    r.user = user_name(p.mount.user_id);
    r.state = state_text(p);
    rows.push_back(std::move(r));
  }
  std::size_t w[4] = {0, 0, 0, 0};
  for (const auto& r : rows) {
    w[0] = std::max(w[0], r.folder.size());
    w[1] = std::max(w[1], r.repo.size());
    w[2] = std::max(w[2], r.pid.size());
    w[3] = std::max(w[3], r.user.size());
  }
  for (const auto& r : rows) {
    std::printf("%s  %s  %s  %s  %s\n", pad(r.folder, w[0]).c_str(), pad(r.repo, w[1]).c_str(),
                pad(r.pid, w[2]).c_str(), pad(r.user, w[3]).c_str(), r.state.c_str());
  }
  return kOk;
}

int run_refresh(const std::string& given, int timeout_s) {
  auto m = choose_mount(given, "wheelhouse refresh DIR");
  if (!m) {
    std::fprintf(stderr, "wheelhouse: %s\n", m.error().message.c_str());
    return m.error().code;
  }
  auto st = read_status_within(m->path);
  if (!st) {
    std::fprintf(stderr, "wheelhouse: %s\n", st.error().second.c_str());
    return st.error().first;
  }
  // The pidfd first, then the checks: a signal then reaches the process that was checked.
  const auto claimed = static_cast<pid_t>(st->value("pid", 0));
  const Process daemon(claimed);
  auto pid = verified_daemon(*m, *st);
  if (!pid) {
    std::fprintf(stderr, "wheelhouse: %s: not refreshed: %s\n", m->path.c_str(),
                 pid.error().c_str());
    return kFailed;
  }
  const nlohmann::json before = st->value("last_refresh", nlohmann::json(nullptr));
  const std::time_t asked = std::time(nullptr);
  if (const int err = daemon.signal(SIGHUP); err != 0) {
    std::fprintf(stderr, "wheelhouse: %s: cannot signal its daemon (pid %d, user %s): %s\n",
                 m->path.c_str(), static_cast<int>(*pid), user_name(m->user_id).c_str(),
                 std::strerror(err));
    return kFailed;
  }
  std::printf("%s: asked its daemon (pid %d) to look for a new commit\n", m->path.c_str(),
              static_cast<int>(*pid));
  std::fflush(stdout);
  if (timeout_s == 0) return kOk;
  const auto until = Clock::now() + std::chrono::seconds(timeout_s);
  while (Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto now = read_status_within(m->path);
    if (!now) continue;
    const nlohmann::json last = now->value("last_refresh", nlohmann::json(nullptr));
    if (!last.is_object() || last == before || last.value("at", std::int64_t{0}) < asked) continue;
    const std::string result = last.value("result", "");
    std::printf("%s: %s\n", m->path.c_str(), result.c_str());
    return result.starts_with("failed") ? kFailed : kOk;
  }
  std::fprintf(stderr, "wheelhouse: %s: no result after %d s (wheelhouse status %s shows it)\n",
               m->path.c_str(), timeout_s, m->path.c_str());
  return kFailed;
}

int run_stop(const std::string& given, int timeout_s) {
  auto m = choose_mount(given, "wheelhouse stop DIR");
  if (!m) {
    std::fprintf(stderr, "wheelhouse: %s\n", m.error().message.c_str());
    return m.error().code;
  }
  const auto probe = probe_mounts({*m}).front();
  if (probe.state == MountState::kDead) {
    if (!detach(m->path)) {
      std::fprintf(stderr, "wheelhouse: %s: dead, and could not be detached\n", m->path.c_str());
      return kFailed;
    }
    std::printf("%s: dead (its daemon was gone): detached\n", m->path.c_str());
    return kOk;
  }
  if (probe.state == MountState::kStopped) {
    std::fprintf(stderr,
                 "wheelhouse: %s: its daemon does not answer (stopped or hung): not stopped; "
                 "kill -CONT %s and run this again, or fusermount3 -u -z %s detaches it as it "
                 "is\n",
                 m->path.c_str(), probe.pid > 0 ? std::to_string(probe.pid).c_str() : "PID",
                 m->path.c_str());
    return kFailed;
  }
  if (probe.state != MountState::kLive) {
    std::fprintf(stderr, "wheelhouse: %s\n", probe.error.c_str());
    return kFailed;
  }
  const Process daemon(probe.pid);
  auto pid = verified_daemon(*m, probe.status);
  const std::string unit = pid ? systemd_unit_of(*pid) : "";
  std::string why;
  if (!unmount(m->path, &why)) {
    std::fprintf(stderr, "wheelhouse: %s: not unmounted: %s\n", m->path.c_str(), why.c_str());
    return kFailed;
  }
  if (!pid) {
    std::printf("%s: unmounted; its daemon was not waited for (%s)\n", m->path.c_str(),
                pid.error().c_str());
    return kOk;
  }
  if (!daemon.wait_exit(std::chrono::seconds(timeout_s))) {
    std::fprintf(stderr,
                 "wheelhouse: %s: unmounted, but its daemon (pid %d) still runs after %d s\n",
                 m->path.c_str(), static_cast<int>(*pid), timeout_s);
    return kFailed;
  }
  std::printf(
      "%s: unmounted; its daemon (pid %d) ended%s\n", m->path.c_str(), static_cast<int>(*pid),
      unit.empty() ? "" : (" (unit " + unit + ": systemctl start mounts it again)").c_str());
  return kOk;
}

}  // namespace whfs::cli
