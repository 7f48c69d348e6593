#include "tools/csi/linux_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>
#include <thread>

#include "fs/common/mounts.h"
#include "fs/common/text.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX, not in unistd.h

namespace whfs::csi {
namespace {

std::string errno_text(int e = errno) {
  return std::error_code(e, std::generic_category()).message();
}

Expected<void, std::string> make_private_dir(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return unexpected(path + ": " + ec.message());
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return unexpected(path + " is not a folder");
  }
  if (::chmod(path.c_str(), 0700) != 0) return unexpected(path + ": " + errno_text());
  return {};
}

Expected<void, std::string> write_new_file(const std::string& path, const std::string& text) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return unexpected(path + ": " + errno_text());
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok) return unexpected(path + ": short write");
  return {};
}

// Writes `text` to an existing file (a cgroup's control file).
Expected<void, std::string> write_file(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return unexpected(path + ": " + errno_text());
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int e = errno;
  ::close(fd);
  if (!ok) return unexpected(path + ": " + errno_text(e));
  return {};
}

// The last line of the daemon's start-up output: its one-line reason.
std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::string last;
  while (std::getline(in, line)) {
    if (!trim(line).empty()) last = line;
  }
  return last.empty() ? std::string("(no message)") : last.substr(0, 500);
}

int status_pid(const std::string& mnt) {
  char buf[65536];
  const ssize_t n = ::getxattr(mnt.c_str(), "user.wheelhouse.status", buf, sizeof buf);
  if (n <= 0) return 0;
  try {
    return nlohmann::json::parse(std::string(buf, static_cast<std::size_t>(n)))
        .at("pid")
        .get<int>();
  } catch (const std::exception&) {
    return 0;
  }
}

// A process that has not ended yet (a zombie has).
bool running_process(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

// A /proc file's first 64 KiB.
std::string read_small(const std::string& path) {
  std::string text;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buf[4096];
  ssize_t n = 0;
  while (text.size() < 65536 && (n = ::read(fd, buf, sizeof buf)) > 0) {
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

// A process's argv (empty when it has ended).
std::vector<std::string> process_args(long pid) {
  const std::string text = read_small("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> args;
  for (const auto part : split(text, '\0')) args.emplace_back(part);
  if (!args.empty() && args.back().empty()) args.pop_back();  // the text ends with a NUL
  return args;
}

std::string base_name(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// True while `pid` runs `program` on `mnt` (this plugin's argv always ends with the mount
// point). From /proc alone: nothing here calls into a mount, so a hung daemon cannot stall it.
bool runs_on(int pid, const std::string& program, const std::string& mnt) {
  if (pid <= 0 || !running_process(pid)) return false;
  const auto args = process_args(pid);
  return args.size() >= 3 && base_name(args.front()) == base_name(program) && args.back() == mnt;
}

// The processes of `program` whose command line ends with `mnt`: the starter and the daemon
// of every start on that mount point.
std::vector<int> daemons_on(const std::string& program, const std::string& mnt) {
  std::vector<int> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  const std::string name = base_name(program);
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == ::getpid()) continue;
    const auto args = process_args(pid);
    if (args.size() >= 3 && base_name(args.front()) == name && args.back() == mnt) {
      out.push_back(static_cast<int>(pid));
    }
  }
  ::closedir(proc);
  return out;
}

// Ends every process of a start on `mnt` but `keep` (SIGKILL: it serves no one yet, or no one
// this plugin knows of) and waits up to 5 s for them to go, so that none mounts afterwards.
void end_starts_on(const std::string& program, const std::string& mnt, int keep) {
  auto pids = daemons_on(program, mnt);
  std::erase(pids, keep);
  for (const int pid : pids) {
    spdlog::warn("ending pid {}, a wheelhousefs start on {} that no publish waits for", pid, mnt);
    ::kill(pid, SIGKILL);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::any_of(pids.begin(), pids.end(), running_process) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// One line of /proc/self/mountinfo.
struct MountLine {
  long id = 0;
  long parent = 0;
  std::string dev;  // major:minor: the same for every bind mount of one filesystem
  std::string path;
  std::string type;
};

std::vector<MountLine> mount_lines() {
  std::vector<MountLine> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    const auto left = split(std::string_view(line).substr(0, dash), ' ');
    const auto right = split(std::string_view(line).substr(dash + 3), ' ');
    if (left.size() < 5 || right.empty()) continue;
    MountLine m;
    m.id = std::strtol(std::string(left[0]).c_str(), nullptr, 10);
    m.parent = std::strtol(std::string(left[1]).c_str(), nullptr, 10);
    m.dev = std::string(left[2]);
    m.path = unescape_mount_path(std::string(left[4]).c_str());
    m.type = std::string(right[0]);
    out.push_back(std::move(m));
  }
  return out;
}

// The mount a path on `path` reaches: of the mounts on it, the one no other mount on it sits
// on. From the mount table alone (never a call into the mount: a dead or hung daemon's too).
std::optional<MountLine> top_mount(const std::string& path) {
  std::vector<MountLine> on;
  for (auto& m : mount_lines()) {
    if (m.path == path) on.push_back(std::move(m));
  }
  for (const auto& m : on) {
    if (std::none_of(on.begin(), on.end(), [&](const MountLine& o) { return o.parent == m.id; })) {
      return m;
    }
  }
  return std::nullopt;
}

void unmount_all(const std::string& mnt) {
  for (int i = 0; i < 64 && mounted_on(mnt); ++i) {
    if (::umount2(mnt.c_str(), MNT_DETACH) != 0) {
      spdlog::warn("umount {}: {}", mnt, errno_text());
      break;
    }
  }
}

// Waits up to `seconds` for `pid` to stop running `program` on `mnt`.
bool ends_within(int pid, const std::string& program, const std::string& mnt, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (runs_on(pid, program, mnt)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Writes `parts` and the name of errno `e` to stderr (the daemon's start log) and ends the
// child. A child of a threaded process may only make async-signal-safe calls: no allocation, no
// strerror (strerrorname_np returns a constant string).
[[noreturn]] void child_fail(int code, int e, std::initializer_list<const char*> parts) {
  for (const char* p : parts) (void)!::write(2, p, std::strlen(p));
  const char* name = ::strerrorname_np(e);
  (void)!::write(2, ": ", 2);
  if (name != nullptr) (void)!::write(2, name, std::strlen(name));
  (void)!::write(2, "\n", 1);
  ::_exit(code);
}

bool is_cgroup2(const std::string& path) {
  struct statfs s {};
  return ::statfs(path.c_str(), &s) == 0 && s.f_type == CGROUP2_SUPER_MAGIC;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// The host's own cgroup namespace has a fixed inode number (the kernel's PROC_CGROUP_INIT_INO);
// a container's private one has another.
bool in_initial_cgroup_namespace() {
  constexpr ino_t kInitialCgroupNamespace = 0xEFFFFFFBU;
  struct stat st {};
  return ::stat("/proc/self/ns/cgroup", &st) == 0 && st.st_ino == kInitialCgroupNamespace;
}

// The folders from `top` (exclusive) down to `top`/`rel`: a/b/c gives top/a, top/a/b, ...
std::vector<std::string> chain(const std::string& top, const std::string& rel) {
  std::vector<std::string> out;
  std::string at = top;
  for (const auto part : split(rel, '/')) {
    if (part.empty()) continue;
    at += "/" + std::string(part);
    out.push_back(at);
  }
  return out;
}

}  // namespace

Expected<std::vector<std::string>, std::string> cgroup_hierarchies(const std::string& root) {
  struct statfs s {};
  if (::statfs(root.c_str(), &s) != 0) return unexpected(root + ": " + errno_text());
  if (s.f_type == CGROUP2_SUPER_MAGIC) return std::vector<std::string>{root};
  // cgroup v1 (or a hybrid): each controller's hierarchy, name=systemd's, and a hybrid's unified
  // tree are mounts in the root's folder; a symbolic link (cpu -> cpu,cpuacct) is one of them.
  std::vector<std::string> out;
  DIR* dir = ::opendir(root.c_str());
  if (dir == nullptr) return unexpected(root + ": " + errno_text());
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = root + "/" + name;
    struct stat st {};
    struct statfs fs {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (::statfs(path.c_str(), &fs) != 0) continue;
    if (fs.f_type == CGROUP_SUPER_MAGIC || fs.f_type == CGROUP2_SUPER_MAGIC) out.push_back(path);
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  if (out.empty()) {
    return unexpected(root + " holds no cgroup hierarchy (it should be the host's /sys/fs/cgroup)");
  }
  return out;
}

Expected<std::string, std::string> LinuxSystem::prepare_cgroups() {
  if (config_.cgroup_root.empty()) {
    return std::string(
        "daemons stay in the plugin's cgroup (no cgroup root): they end with its container");
  }
  const std::string or_none = " (or --cgroup-root '' to keep the daemons in the plugin's cgroup)";
  auto hierarchies = cgroup_hierarchies(config_.cgroup_root);
  if (!hierarchies) return unexpected("--cgroup-root: " + hierarchies.error() + or_none);
  std::lock_guard lock(cgroup_mu_);
  for (const auto& h : *hierarchies) {
    if (::access(h.c_str(), W_OK) != 0) {
      return unexpected("--cgroup-root: cgroup hierarchy " + h + ": " + errno_text() +
                        " (the plugin needs the host's cgroup root, writable)" + or_none);
    }
    // The empty cgroups of daemons that ended while no plugin ran (rmdir removes only those).
    const std::string parent = h + "/" + config_.cgroup_parent;
    if (DIR* dir = ::opendir(parent.c_str())) {
      std::vector<std::string> names;
      while (const dirent* e = ::readdir(dir)) {
        if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 &&
            std::strcmp(e->d_name, "..") != 0) {
          names.emplace_back(e->d_name);
        }
      }
      ::closedir(dir);
      for (const auto& n : names) ::rmdir((parent + "/" + n).c_str());
    }
    auto levels = chain(h, config_.cgroup_parent);
    for (std::size_t i = levels.size(); i-- > 0;) ::rmdir(levels[i].c_str());
  }
  const bool v2 = hierarchies->size() == 1 && hierarchies->front() == config_.cgroup_root;
  if (config_.memory_max > 0 &&
      std::none_of(hierarchies->begin(), hierarchies->end(), [](const std::string& h) {
        return exists(h + "/memory.limit_in_bytes") ||
               read_small(h + "/cgroup.subtree_control").find("memory") != std::string::npos;
      })) {
    return unexpected("--daemon-memory-max: no memory controller under " + config_.cgroup_root);
  }
  std::string what =
      std::string(v2 ? "cgroup v2" : "cgroup v1") + ": each daemon in " + config_.cgroup_parent +
      "/<volume key> of " +
      (v2 ? config_.cgroup_root
          : std::to_string(hierarchies->size()) + " hierarchies under " + config_.cgroup_root);
  if (config_.memory_max > 0) {
    what += ", at most " + std::to_string(config_.memory_max >> 20) + " MiB of memory each";
  }
  return what;
}

Expected<std::vector<std::string>, std::string> LinuxSystem::make_cgroup(const std::string& name) {
  auto hierarchies = cgroup_hierarchies(config_.cgroup_root);
  if (!hierarchies) return unexpected(hierarchies.error());
  std::lock_guard lock(cgroup_mu_);
  std::vector<std::string> procs;
  bool limited = false;
  for (const auto& h : *hierarchies) {
    auto levels = chain(h, config_.cgroup_parent + "/" + name);
    std::string above = h;
    for (const auto& level : levels) {
      if (::mkdir(level.c_str(), 0755) != 0 && errno != EEXIST) {
        return unexpected("cgroup " + level + ": " + errno_text());
      }
      // v1's cpuset starts a cgroup with no CPU and no memory node (a process cannot join
      // it): its parent's.
      for (const char* file : {"/cpuset.cpus", "/cpuset.mems"}) {
        if (exists(level + file) && trim(read_small(level + file)).empty()) {
          if (auto ok = write_file(level + file, std::string(trim(read_small(above + file))));
              !ok) {
            return unexpected("cgroup " + ok.error());
          }
        }
      }
      above = level;
    }
    const std::string& dir = levels.back();
    procs.push_back(dir + "/cgroup.procs");
    if (config_.memory_max == 0) continue;
    const std::string bytes = std::to_string(config_.memory_max);
    if (exists(dir + "/memory.limit_in_bytes")) {  // v1's memory controller
      if (auto ok = write_file(dir + "/memory.limit_in_bytes", bytes); !ok) {
        return unexpected("memory limit: " + ok.error());
      }
      limited = true;
    } else if (is_cgroup2(h) &&
               read_small(h + "/cgroup.subtree_control").find("memory") != std::string::npos) {
      // v2: each level above the daemon's hands the memory controller down.
      levels.pop_back();
      for (const auto& level : levels) {
        if (auto ok = write_file(level + "/cgroup.subtree_control", "+memory"); !ok) {
          return unexpected("memory controller: " + ok.error());
        }
      }
      if (auto ok = write_file(dir + "/memory.max", bytes); !ok) {
        return unexpected("memory limit: " + ok.error());
      }
      limited = true;
    }
  }
  if (config_.memory_max > 0 && !limited) {
    return unexpected("no memory controller under " + config_.cgroup_root +
                      " for --daemon-memory-max");
  }
  return procs;
}

void LinuxSystem::remove_cgroup(const std::string& name) {
  if (config_.cgroup_root.empty()) return;
  auto hierarchies = cgroup_hierarchies(config_.cgroup_root);
  if (!hierarchies) return;
  std::lock_guard lock(cgroup_mu_);
  for (const auto& h : *hierarchies) {
    auto levels = chain(h, config_.cgroup_parent + "/" + name);
    // An ended daemon may take a moment to leave its cgroup (its exit is still being reaped).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (::rmdir(levels.back().c_str()) != 0 && errno == EBUSY &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (exists(levels.back())) {
      spdlog::warn("cgroup {} is not removed: {}", levels.back(), errno_text());
      continue;
    }
    levels.pop_back();
    // The parents, once the last daemon's cgroup is gone (rmdir fails while one is left).
    for (std::size_t i = levels.size(); i-- > 0;) {
      if (::rmdir(levels[i].c_str()) != 0) break;
    }
  }
}

std::vector<std::string> LinuxSystem::daemon_argv(const VolumeSpec& spec, const std::string& dir,
                                                  const std::string& mnt, bool token_file) const {
  std::vector<std::string> opts = {
      "endpoint=" + spec.endpoint, "revision=" + spec.revision, "cache_dir=" + config_.cache_dir,
      "allow_other", "log_file=" + dir + "/wheelhousefs.log",
      // The pods' hooked shells, for the daemon after a restart.
      "state_dir=" + dir + "/state", "fsname=wheelhouse-csi:" + spec.repo};
  if (token_file) opts.push_back("token_file=" + dir + "/token");
  // The admin's last: where a key repeats, the daemon takes the last value.
  opts.insert(opts.end(), spec.options.begin(), spec.options.end());
  opts.insert(opts.end(), config_.options.begin(), config_.options.end());
  return {config_.program, "-o", join(opts, ","), spec.repo, mnt};
}

Expected<int, std::string> LinuxSystem::start_daemon(const VolumeSpec& spec, const std::string& dir,
                                                     const std::string& mnt) {
  // What an earlier start left (one abandoned by a plugin that stopped, or timed out, or a
  // daemon that died) would hold the mount point or mount over this one later.
  end_starts_on(config_.program, mnt, 0);
  unmount_all(mnt);
  if (auto ok = make_private_dir(dir); !ok) return unexpected(ok.error());
  std::error_code ec;
  std::filesystem::create_directories(mnt, ec);
  if (ec) return unexpected(mnt + ": " + ec.message());
  const std::string token_path = dir + "/token";
  if (!spec.token.empty()) {
    if (auto ok = write_new_file(token_path, spec.token + "\n"); !ok) return unexpected(ok.error());
  }
  const bool has_token = ::access(token_path.c_str(), F_OK) == 0;
  const auto argv_s = daemon_argv(spec, dir, mnt, has_token);

  // The plugin's own Hub settings are not the volume's: the daemon gets the token of its
  // volume's secret or none at all.
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    if (v.starts_with("HF_") || v.starts_with("HUGGING_FACE_HUB_TOKEN=")) continue;
    env_s.emplace_back(v);
  }
  if (!has_token) env_s.emplace_back("HF_HUB_DISABLE_IMPLICIT_TOKEN=1");
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));  // NOLINT
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(const_cast<char*>(e.c_str()));  // NOLINT
  envp.push_back(nullptr);

  // The daemon's cgroup, and the host's cgroup namespace when this process has one of its own
  // (a process may not leave its cgroup namespace's tree): all made ready before fork.
  const std::string name = base_name(dir);
  std::vector<std::string> procs_s;
  int ns_fd = -1;
  if (!config_.cgroup_root.empty()) {
    auto procs = make_cgroup(name);
    if (!procs) {
      remove_cgroup(name);  // what it made before it failed
      return unexpected("the daemon's cgroup: " + procs.error());
    }
    procs_s = std::move(*procs);
    if (!in_initial_cgroup_namespace()) {
      ns_fd = ::open("/proc/1/ns/cgroup", O_RDONLY | O_CLOEXEC);
      if (ns_fd < 0) {
        remove_cgroup(name);
        return unexpected("/proc/1/ns/cgroup: " + errno_text() +
                          " (the plugin needs the host's PID namespace: hostPID)");
      }
    }
  }
  std::vector<const char*> procs;
  procs.reserve(procs_s.size());
  for (const auto& p : procs_s) procs.push_back(p.c_str());

  const std::string out_path = dir + "/start.log";
  ::unlink(out_path.c_str());
  const int out =
      ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out < 0) {
    if (ns_fd >= 0) ::close(ns_fd);
    return unexpected(out_path + ": " + errno_text());
  }
  const pid_t child = ::fork();
  if (child < 0) {
    const int e = errno;
    ::close(out);
    if (ns_fd >= 0) ::close(ns_fd);
    remove_cgroup(name);
    return unexpected("fork: " + errno_text(e));
  }
  if (child == 0) {
    ::dup2(out, 1);
    ::dup2(out, 2);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    ::setsid();  // not in the plugin's session: it outlives the plugin
    if (ns_fd >= 0 && ::setns(ns_fd, CLONE_NEWCGROUP) != 0) {
      child_fail(126, errno, {"cannot enter the host's cgroup namespace (/proc/1/ns/cgroup)"});
    }
    // Out of the plugin's cgroup (and so out of its container's): "0" is the writer itself.
    for (const char* p : procs) {
      const int fd = ::open(p, O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, "0", 1) != 1) {
        child_fail(126, errno, {"cannot move the daemon into its cgroup ", p});
      }
      ::close(fd);
    }
    ::execve(argv[0], argv.data(), envp.data());
    child_fail(127, errno, {"cannot run ", argv[0]});
  }
  ::close(out);
  if (ns_fd >= 0) ::close(ns_fd);
  // wheelhousefs without -f exits 0 once its mount serves (its detached child goes on).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(config_.start_timeout_s);
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(child, &status, WNOHANG);
    if (r == child) break;
    if (r < 0 && errno != EINTR) return unexpected("waitpid: " + errno_text());
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      end_starts_on(config_.program, mnt, 0);  // its daemon, still starting
      unmount_all(mnt);
      remove_cgroup(name);
      return unexpected("not serving after " + std::to_string(config_.start_timeout_s) +
                        " s: " + last_line(out_path));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    remove_cgroup(name);
    return unexpected(last_line(out_path));
  }
  const int pid = status_pid(mnt);
  if (pid <= 0) return unexpected("started, but " + mnt + " answers no status");
  return pid;
}

bool LinuxSystem::daemon_serves(const std::string& mnt, int pid) {
  if (!runs_on(pid, config_.program, mnt)) return false;
  const auto top = top_mount(mnt);
  return top && top->type == "fuse.wheelhousefs";
}

void LinuxSystem::stop_daemon(const std::string& dir, const std::string& mnt, int pid) {
  end_starts_on(config_.program, mnt, pid);
  unmount_all(mnt);
  // An unmounted daemon ends by itself, unless a copy of its mount is still in use (a process
  // that holds a file open in a lazily detached target): then it is told to (SIGTERM), and
  // killed when that does not end it either. Each step waits a few seconds at most.
  const int grace = config_.stop_grace_s;
  if (!ends_within(pid, config_.program, mnt, grace)) {
    spdlog::warn("daemon pid {} on {} still runs {} s after its unmount: SIGTERM", pid, mnt, grace);
    ::kill(pid, SIGTERM);
    if (!ends_within(pid, config_.program, mnt, grace)) {
      spdlog::warn("daemon pid {} on {} still runs {} s after SIGTERM: SIGKILL", pid, mnt, grace);
      ::kill(pid, SIGKILL);
      (void)ends_within(pid, config_.program, mnt, 2);
    }
  }
  ::unlink((dir + "/token").c_str());
  ::rmdir(mnt.c_str());
  remove_cgroup(base_name(dir));
}

Expected<void, std::string> LinuxSystem::make_target(const std::string& target) {
  // A mount point already (a dead daemon's bind mount): the new bind goes on top of it.
  if (top_mount(target)) return {};
  struct stat st {};
  if (::lstat(target.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) return unexpected(std::string("is a symbolic link: refused"));
    if (!S_ISDIR(st.st_mode)) return unexpected(std::string("exists and is not a folder"));
    return {};
  }
  if (errno != ENOENT) return unexpected(errno_text());
  if (::mkdir(target.c_str(), 0750) != 0) return unexpected("mkdir: " + errno_text());
  return {};
}

Expected<void, std::string> LinuxSystem::bind_read_only(const std::string& mnt,
                                                        const std::string& target) {
  // A clone of the daemon's mount, made read-only before it is attached: the copies that
  // propagation makes (into the pod's mount namespace, when the bind goes on top of a dead
  // one) are read-only too.
  const int tree = ::open_tree(AT_FDCWD, mnt.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (tree >= 0) {
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    std::string failed;
    if (::mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
      failed = "read-only bind mount: " + errno_text();
    } else if (::move_mount(tree, "", AT_FDCWD, target.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
      failed = "bind mount: " + errno_text();
    }
    ::close(tree);
    if (!failed.empty()) return unexpected(failed);
    return {};
  }
  if (errno != ENOSYS) return unexpected("bind mount: " + errno_text());
  // A kernel before 5.12: bind, then make it read-only.
  if (::mount(mnt.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return unexpected("bind mount: " + errno_text());
  }
  const unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV;
  if (::mount(nullptr, target.c_str(), nullptr, flags, nullptr) != 0) {
    const int e = errno;
    ::umount2(target.c_str(), MNT_DETACH);
    return unexpected("read-only remount: " + errno_text(e));
  }
  return {};
}

bool LinuxSystem::bound(const std::string& mnt, const std::string& target) {
  const auto on_target = top_mount(target);
  if (!on_target || on_target->type != "fuse.wheelhousefs") return false;
  const auto daemon = top_mount(mnt);
  return daemon && daemon->dev == on_target->dev;
}

bool LinuxSystem::mounted(const std::string& target) { return top_mount(target).has_value(); }

Expected<void, std::string> LinuxSystem::unbind(const std::string& target) {
  // Every layer: a target whose daemon was started again has the dead mount under the live one.
  for (int i = 0; i < 64 && mounted_on(target); ++i) {
    if (::umount2(target.c_str(), 0) == 0) continue;
    if (errno != EBUSY) return unexpected("umount: " + errno_text());
    spdlog::warn("{} is busy (a file open in it): detached lazily", target);
    if (::umount2(target.c_str(), MNT_DETACH) != 0) return unexpected("umount: " + errno_text());
  }
  if (mounted_on(target)) return unexpected(std::string("still mounted after 64 unmounts"));
  if (::rmdir(target.c_str()) != 0 && errno != ENOENT) {
    return unexpected("rmdir: " + errno_text());
  }
  return {};
}

}  // namespace whfs::csi
