#include "fs/targeting/caller.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace whfs::target {
namespace {

constexpr std::size_t kMaxProcFile = 1 << 20;

std::optional<std::string> read_proc(const std::string& path, int* err) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return std::nullopt;
  }
  std::string out;
  char buf[16384];
  while (out.size() < kMaxProcFile) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *err = errno;
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

std::string readlink_of(const std::string& path) {
  char buf[4096];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// Field 22 of /proc/PID/stat (after the parenthesised name, which may hold spaces).
std::uint64_t start_time_of(const std::string& stat) {
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::size_t pos = close + 2;
  for (int field = 3; field < 22 && pos < stat.size(); ++field) {
    pos = stat.find(' ', pos);
    if (pos == std::string::npos) return 0;
    ++pos;
  }
  return std::strtoull(stat.c_str() + pos, nullptr, 10);
}

// "Uid:\t1000\t1000\t1000\t1000" -> the numbers of that line.
std::vector<std::uint64_t> status_numbers(const std::string& status, const std::string& key) {
  std::vector<std::uint64_t> out;
  const auto at = status.find("\n" + key + ":");
  if (at == std::string::npos) return out;
  const auto end = status.find('\n', at + 1);
  const std::string line = status.substr(at + key.size() + 2, end - at - key.size() - 2);
  const char* p = line.c_str();
  while (*p != '\0') {
    char* next = nullptr;
    const auto v = std::strtoull(p, &next, 10);
    if (next == p) {
      ++p;
      continue;
    }
    out.push_back(v);
    p = next;
  }
  return out;
}

// The raw system calls: glibc's setgroups() changes every thread of the process, the raw
// call only this one.
long thread_setgroups(const std::vector<gid_t>& groups) {
  return ::syscall(SYS_setgroups, groups.size(), groups.data());
}

}  // namespace

std::optional<ProcessIdentity> read_identity(pid_t pid, const std::string& proc) {
  const std::string dir = proc + "/" + std::to_string(pid);
  int err = 0;
  const auto stat = read_proc(dir + "/stat", &err);
  if (!stat) return std::nullopt;
  return ProcessIdentity{start_time_of(*stat), readlink_of(dir + "/exe")};
}

std::optional<pid_t> read_parent(pid_t pid, const std::string& proc) {
  int err = 0;
  const auto status = read_proc(proc + "/" + std::to_string(pid) + "/status", &err);
  if (!status) return std::nullopt;
  const auto ppid = status_numbers(*status, "PPid");
  if (ppid.empty() || ppid[0] == 0) return std::nullopt;
  return static_cast<pid_t>(ppid[0]);
}

ActAs::ActAs(const Credentials& who) {
  if (::geteuid() != 0 || who.uid == 0) return;
  old_uid_ = static_cast<uid_t>(::syscall(SYS_setfsuid, -1));
  old_gid_ = static_cast<gid_t>(::syscall(SYS_setfsgid, -1));
  const int n = ::getgroups(0, nullptr);
  old_groups_.resize(static_cast<std::size_t>(std::max(n, 0)));
  if (n > 0 && ::getgroups(n, old_groups_.data()) != n) old_groups_.clear();
  switched_ = true;
  ok_ = thread_setgroups(who.groups) == 0;
  ::syscall(SYS_setfsgid, who.gid);
  ::syscall(SYS_setfsuid, who.uid);
  // setfsuid and setfsgid report no errors: read the values back.
  ok_ = ok_ && static_cast<uid_t>(::syscall(SYS_setfsuid, -1)) == who.uid &&
        static_cast<gid_t>(::syscall(SYS_setfsgid, -1)) == who.gid;
}

ActAs::~ActAs() {
  if (!switched_) return;
  ::syscall(SYS_setfsuid, old_uid_);
  ::syscall(SYS_setfsgid, old_gid_);
  thread_setgroups(old_groups_);
}

std::vector<std::string> split_nul(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto nul = text.find('\0', start);
    if (nul == std::string::npos) nul = text.size();
    out.push_back(text.substr(start, nul - start));
    start = nul + 1;
  }
  return out;
}

Expected<CallerProcess, std::string> read_caller(pid_t pid, const std::string& proc) {
  const std::string dir = proc + "/" + std::to_string(pid);
  CallerProcess c;
  c.pid = pid;
  int err = 0;
  const auto stat = read_proc(dir + "/stat", &err);
  if (!stat) return unexpected("process " + std::to_string(pid) + " is gone");
  c.start_time = start_time_of(*stat);
  const auto environ = read_proc(dir + "/environ", &err);
  if (!environ) {
    return unexpected("cannot read the environment of process " + std::to_string(pid) + " (" +
                      std::strerror(err) +
                      "): the daemon needs to run as root (or as that process's user)");
  }
  for (const auto& item : split_nul(*environ)) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = item.substr(0, eq);
    for (const char* wanted : kCallerEnv) {
      if (name == wanted) c.env[name] = item.substr(eq + 1);
    }
  }
  if (const auto cmdline = read_proc(dir + "/cmdline", &err)) c.argv = split_nul(*cmdline);
  const auto status = read_proc(dir + "/status", &err);
  if (!status) return unexpected("process " + std::to_string(pid) + " is gone");
  const auto uids = status_numbers(*status, "Uid");
  const auto gids = status_numbers(*status, "Gid");
  if (uids.size() < 4 || gids.size() < 4) {
    return unexpected("cannot read the user of process " + std::to_string(pid));
  }
  c.credentials.uid = static_cast<uid_t>(uids[3]);  // the filesystem ids
  c.credentials.gid = static_cast<gid_t>(gids[3]);
  for (const auto g : status_numbers(*status, "Groups")) {
    c.credentials.groups.push_back(static_cast<gid_t>(g));
  }
  const std::string exe = readlink_of(dir + "/exe");
  const auto slash = exe.rfind('/');
  c.exe_name = slash == std::string::npos ? exe : exe.substr(slash + 1);
  if (c.exe_name.ends_with(" (deleted)")) c.exe_name.resize(c.exe_name.size() - 10);
  // What the kernel already knows of both roots (AT_STATX_DONT_SYNC): a root on a FUSE
  // filesystem, this mount's included, is not asked for fresh attributes.
  struct statx theirs {
  }, ours{};
  const std::string root = dir + "/root";
  if (::statx(AT_FDCWD, root.c_str(), AT_STATX_DONT_SYNC, STATX_INO, &theirs) != 0) {
    return unexpected("cannot see the root of process " + std::to_string(pid) + ": " +
                      std::strerror(errno));
  }
  c.own_root = ::statx(AT_FDCWD, "/", AT_STATX_DONT_SYNC, STATX_INO, &ours) == 0 &&
               ours.stx_dev_major == theirs.stx_dev_major &&
               ours.stx_dev_minor == theirs.stx_dev_minor && ours.stx_ino == theirs.stx_ino;
  c.root_dir = c.own_root ? "/" : root;
  if (c.own_root) {
    c.cwd = readlink_of(dir + "/cwd");
    c.exe_path = exe.ends_with(" (deleted)") ? "" : exe;
  }
  return c;
}

}  // namespace whfs::target
