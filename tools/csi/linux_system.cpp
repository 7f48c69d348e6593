#include "tools/csi/linux_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
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

bool alive(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

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

// The processes of `program` whose command line ends with `mnt`: the starter and the daemon
// of every start on that mount point (this plugin's argv always ends with it).
std::vector<int> daemons_on(const std::string& program, const std::string& mnt) {
  std::vector<int> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == ::getpid()) continue;
    const std::string text = read_small(std::string("/proc/") + e->d_name + "/cmdline");
    const auto args = split(text, '\0');  // the text ends with a NUL: the last part is empty
    if (args.size() >= 3 && args.front() == program && args[args.size() - 2] == mnt) {
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

void unmount_all(const std::string& mnt) {
  for (int i = 0; i < 4 && mounted_on(mnt); ++i) {
    if (::umount2(mnt.c_str(), MNT_DETACH) != 0) {
      spdlog::warn("umount {}: {}", mnt, errno_text());
      break;
    }
  }
}

}  // namespace

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
  // What an earlier start left (one abandoned by a plugin that stopped, or timed out) would
  // hold the mount point or mount over this one later.
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

  const std::string out_path = dir + "/start.log";
  ::unlink(out_path.c_str());
  const int out =
      ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out < 0) return unexpected(out_path + ": " + errno_text());
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(out);
    return unexpected("fork: " + errno_text());
  }
  if (child == 0) {
    ::dup2(out, 1);
    ::dup2(out, 2);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    ::setsid();  // not in the plugin's session: it outlives the plugin
    ::execve(argv[0], argv.data(), envp.data());
    ::dprintf(2, "cannot run %s: %s\n", argv[0], errno_text().c_str());
    ::_exit(127);
  }
  ::close(out);
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
      return unexpected("not serving after " + std::to_string(config_.start_timeout_s) +
                        " s: " + last_line(out_path));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return unexpected(last_line(out_path));
  }
  const int pid = status_pid(mnt);
  if (pid <= 0) return unexpected("started, but " + mnt + " answers no status");
  return pid;
}

bool LinuxSystem::daemon_serves(const std::string& mnt, int pid) {
  if (!alive(pid)) return false;
  MountEntry m;
  if (!mounted_on(mnt, &m) || m.type != "fuse.wheelhousefs") return false;
  return status_pid(mnt) == pid;
}

void LinuxSystem::stop_daemon(const std::string& dir, const std::string& mnt, int pid) {
  end_starts_on(config_.program, mnt, pid);
  unmount_all(mnt);
  // An unmounted daemon ends by itself; one that does not within 10 s is told to.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (alive(pid) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (alive(pid)) {
    std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name == "wheelhousefs") ::kill(pid, SIGTERM);
  }
  ::unlink((dir + "/token").c_str());
  ::rmdir(mnt.c_str());
}

Expected<void, std::string> LinuxSystem::make_target(const std::string& target) {
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
  MountEntry m;
  if (!mounted_on(target, &m) || m.type != "fuse.wheelhousefs") return false;
  struct stat a {};
  struct stat b {};
  return ::stat(target.c_str(), &a) == 0 && ::stat(mnt.c_str(), &b) == 0 && a.st_dev == b.st_dev;
}

bool LinuxSystem::mounted(const std::string& target) { return mounted_on(target); }

Expected<void, std::string> LinuxSystem::unbind(const std::string& target) {
  for (int i = 0; i < 8 && mounted_on(target); ++i) {
    if (::umount2(target.c_str(), MNT_DETACH) != 0) return unexpected("umount: " + errno_text());
  }
  if (::rmdir(target.c_str()) != 0 && errno != ENOENT) {
    return unexpected("rmdir: " + errno_text());
  }
  return {};
}

}  // namespace whfs::csi
