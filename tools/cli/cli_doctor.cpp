// wheelhouse doctor: is this machine ready to mount and use a wheelhouse? (as cvmfs_config
// chksetup or brew doctor). One line per check, PASS / WARN / FAIL with the fix; the status is
// 1 when any check fails. Nothing is changed, created or mounted.

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fs/common/clock.h"
#include "fs/common/mounts.h"
#include "fs/config/options.h"
#include "fs/hub/hub_client.h"
#include "fs/hub/token.h"
#include "fs/targeting/caller_targets.h"
#include "fs/targeting/gpu_probe.h"
#include "tools/cli/cli_commands.h"
#include "tools/cli/status_reader.h"

namespace whfs::cli {
namespace {

enum class Verdict { kPass, kWarn, kFail };

class Report {
 public:
  void add(Verdict v, const std::string& what, const std::string& detail,
           const std::string& fix = "") {
    const char* tag = v == Verdict::kPass ? "PASS" : v == Verdict::kWarn ? "WARN" : "FAIL";
    std::printf("%s  %-12s %s\n", tag, what.c_str(), detail.c_str());
    if (!fix.empty() && v != Verdict::kPass) std::printf("      %-12s fix: %s\n", "", fix.c_str());
    if (v == Verdict::kFail) failures_++;
    if (v == Verdict::kWarn) warnings_++;
  }
  int failures() const { return failures_; }
  int warnings() const { return warnings_; }

 private:
  int failures_ = 0;
  int warnings_ = 0;
};

std::string mode_text(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

void check_fuse(Report& r) {
  struct stat st {};
  if (::stat("/dev/fuse", &st) != 0) {
    r.add(Verdict::kFail, "/dev/fuse", std::string("missing (") + std::strerror(errno) + ")",
          "apt-get install fuse3 (and modprobe fuse); in a container: --device /dev/fuse "
          "--cap-add SYS_ADMIN");
    return;
  }
  if (!S_ISCHR(st.st_mode) || major(st.st_rdev) != 10 || minor(st.st_rdev) != 229) {
    r.add(Verdict::kFail, "/dev/fuse", "is not the FUSE device (char 10:229)",
          "in a container: --device /dev/fuse");
    return;
  }
  const int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    r.add(Verdict::kFail, "/dev/fuse",
          std::string("cannot be opened (") + std::strerror(errno) + ")",
          "as a user: the device must be 0666 (Debian's default); in a container: --device "
          "/dev/fuse and a device cgroup that allows it");
    return;
  }
  ::close(fd);
  r.add(Verdict::kPass, "/dev/fuse", "opens read-write");
}

std::string on_path(const char* name) {
  const char* path = std::getenv("PATH");
  std::string p = path != nullptr ? path : "/usr/bin:/bin";
  p += ":/usr/sbin:/sbin";
  std::size_t start = 0;
  while (start <= p.size()) {
    const auto colon = p.find(':', start);
    const std::string dir =
        p.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (!dir.empty()) {
      std::string full = dir + "/" + name;
      if (::access(full.c_str(), X_OK) == 0) return full;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return "";
}

void check_fusermount(Report& r) {
  const std::string fm = on_path("fusermount3");
  if (fm.empty()) {
    r.add(Verdict::kFail, "fusermount3", "not found", "apt-get install fuse3");
    return;
  }
  struct stat st {};
  const bool setuid = ::stat(fm.c_str(), &st) == 0 && (st.st_mode & S_ISUID) != 0 && st.st_uid == 0;
  if (::geteuid() != 0 && !setuid) {
    r.add(Verdict::kFail, "fusermount3", fm + " is not setuid root: users cannot mount",
          "chmod u+s " + fm + " (Debian's fuse3 package installs it so)");
    return;
  }
  r.add(Verdict::kPass, "fusermount3", fm + (setuid ? " (setuid root)" : ""));
}

void check_allow_other(Report& r) {
  std::ifstream conf("/etc/fuse.conf");
  std::string line;
  bool allowed = false;
  while (std::getline(conf, line)) {
    if (line.find_first_not_of(" \t") != std::string::npos &&
        line.substr(line.find_first_not_of(" \t")).starts_with("user_allow_other")) {
      allowed = true;
    }
  }
  if (allowed || ::geteuid() == 0) {
    r.add(Verdict::kPass, "allow_other",
          allowed ? "user_allow_other is set in /etc/fuse.conf" : "root may use allow_other");
  } else {
    r.add(Verdict::kWarn, "allow_other",
          "user_allow_other is not in /etc/fuse.conf: a mount by this user with "
          "-o allow_other fails (without it, only this user sees the mount)",
          "echo user_allow_other >> /etc/fuse.conf (as root)");
  }
}

void check_cache(Report& r, const std::string& dir_option) {
  const std::string dir =
      !dir_option.empty()
          ? dir_option
          : default_cache_dir([](const char* n) { return std::getenv(n); }, ::geteuid() == 0);
  if (dir.empty()) {
    r.add(Verdict::kFail, "cache", "no cache directory (HOME is not set)", "give -o cache_dir=");
    return;
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      r.add(Verdict::kPass, "cache",
            dir + " does not exist yet (the first mount creates it, 0700)");
    } else {
      r.add(Verdict::kFail, "cache", dir + ": " + std::strerror(errno));
    }
    return;
  }
  if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
    r.add(Verdict::kFail, "cache", dir + " is not a folder (a symlink or a file)",
          "remove it, or give -o cache_dir= another folder");
    return;
  }
  if (st.st_uid != ::geteuid()) {
    const passwd* pw = ::getpwuid(st.st_uid);
    r.add(Verdict::kWarn, "cache",
          dir + " belongs to " + (pw != nullptr ? pw->pw_name : std::to_string(st.st_uid)) +
              ", not to this user: a mount by this user cannot keep it private",
          "use a cache of your own (-o cache_dir=), or -o cache_group= for a shared one");
    return;
  }
  if ((st.st_mode & 0002) != 0 || ((st.st_mode & 0020) != 0 && (st.st_mode & S_ISGID) == 0)) {
    r.add(Verdict::kFail, "cache",
          dir + " is writable by others (mode " + mode_text(st.st_mode) + ")",
          "chmod 0700 " + dir + " (or 03770 with -o cache_group=)");
    return;
  }
  r.add(Verdict::kPass, "cache", dir + " (mode " + mode_text(st.st_mode) + ", owned by this user)");
}

void check_token(Report& r) {
  hub::TokenSource tokens;
  const auto t = tokens.token();
  const std::string where = tokens.describe();
  if (!t) {
    r.add(Verdict::kPass, "token", "none (" + where + "): public repositories only");
    return;
  }
  // A token file that others can read gives the token away.
  if (const char* p = std::getenv("HF_TOKEN_PATH"); p != nullptr && *p != '\0') {
    struct stat st {};
    if (::stat(p, &st) == 0 && (st.st_mode & 0077) != 0) {
      r.add(Verdict::kWarn, "token",
            std::string(p) + " is readable by others (mode " + mode_text(st.st_mode) + ")",
            std::string("chmod 0600 ") + p);
      return;
    }
  }
  r.add(Verdict::kPass, "token", "found (" + where + ")");
}

void check_hub(Report& r, const std::string& repo_text, const std::string& endpoint_option) {
  auto repo = hub::parse_repo_ref(repo_text);
  if (!repo) {
    r.add(Verdict::kFail, "hub", repo.error());
    return;
  }
  hub::HubClientConfig hc;
  hc.transport.endpoint = hub::resolve_endpoint(endpoint_option);
  hc.transport.retry.max_attempts = 2;
  hc.repo = *repo;
  auto client = hub::make_hub_client(hc);
  const auto t0 = Clock::now();
  auto rev = client->resolve_revision("main", Clock::now() + std::chrono::seconds(15));
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  const char* proxy = std::getenv("HTTPS_PROXY") != nullptr ? std::getenv("HTTPS_PROXY")
                                                            : std::getenv("https_proxy");
  const std::string via = proxy != nullptr && *proxy != '\0' ? " via the proxy in HTTPS_PROXY" : "";
  if (!rev) {
    r.add(Verdict::kFail, "hub", hc.transport.endpoint + via + ": " + rev.error().describe(),
          "check the network or the proxy (-o proxy=, HTTPS_PROXY), HF_ENDPOINT, and the "
          "repository's name");
    return;
  }
  r.add(Verdict::kPass, "hub",
        hc.transport.endpoint + via + ": " + repo->id + "@main is " + rev->commit.substr(0, 12) +
            " (" + std::to_string(ms) + " ms)");
}

void check_gpus(Report& r) {
  target::GpuProbeOptions g;
  if (const char* c = std::getenv("WHEELHOUSE_CUDART"); c != nullptr) g.cudart = c;
  const auto gpus = target::probe_gpus(g);
  if (!gpus.found()) {
    r.add(Verdict::kWarn, "gpu", gpus.error,
          "install the NVIDIA driver (and a CUDA runtime), or give the mount -o arch=smXY");
    return;
  }
  std::string list;
  for (const auto& d : gpus.devices) list += " " + std::to_string(d.index) + ":" + d.arch();
  r.add(Verdict::kPass, "gpu",
        std::to_string(gpus.devices.size()) + " GPU(s):" + list + " (" +
            target::to_string(gpus.api) + " " + gpus.library + ")");
}

void check_python(Report& r) {
  target::CallerTargetsConfig config;
  config.deadline = std::chrono::seconds(30);
  target::GpuReport none;
  none.error = "not probed by doctor's Python check";
  target::CallerTargets targets(config, none, target::host_platform());
  const auto res = targets.resolve(::getppid() > 1 ? ::getppid() : ::getpid());
  const target::Target& t = res->target;
  std::string what;
  if (res->caller.contains("interpreter")) what = res->caller["interpreter"].get<std::string>();
  if (what.empty()) {
    r.add(Verdict::kWarn, "python", "this shell runs no Python that could be found",
          "activate a venv (or give the mount -o python=)");
    return;
  }
  if (!t.torch.has_value()) {
    r.add(Verdict::kWarn, "python",
          what + ": " + t.python_tag.value + ", no torch (" + t.torch.missing + ")",
          "pip install torch in this environment, or give the mount -o torch=,cuda=");
    return;
  }
  r.add(Verdict::kPass, "python",
        what + ": " + t.python_tag.value + ", torch " + t.torch.value +
            (t.cuda.has_value() ? " cu" + t.cuda.value : ""));
}

// One mount, asked on a thread of its own: a hung daemon must not hang the doctor too.
void check_mount(Report& r, const std::string& m) {
  struct Answer {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    bool dead = false;
    Expected<nlohmann::json, std::pair<int, std::string>> status = nlohmann::json();
  };
  auto a = std::make_shared<Answer>();
  std::thread([a, m] {
    struct statfs sfs {};
    const bool dead = ::statfs(m.c_str(), &sfs) != 0 && errno == ENOTCONN;
    auto st = dead ? Expected<nlohmann::json, std::pair<int, std::string>>(nlohmann::json())
                   : read_status(m);
    std::lock_guard lock(a->mu);
    a->dead = dead;
    a->status = std::move(st);
    a->done = true;
    a->cv.notify_all();
  }).detach();
  std::unique_lock lock(a->mu);
  if (!a->cv.wait_for(lock, std::chrono::seconds(5), [&] { return a->done; })) {
    r.add(Verdict::kFail, "mount", m + ": no answer in 5 s (its daemon is hung or stopped)",
          "wheelhouse status " + m + "; kill -CONT or restart its daemon");
    return;
  }
  if (a->dead) {
    r.add(Verdict::kFail, "mount", m + ": dead (its daemon is gone)",
          "fusermount3 -u -z " + m + ", then mount again (wheelhousefs detaches it itself)");
    return;
  }
  const auto& st = a->status;
  if (!st) {
    r.add(Verdict::kWarn, "mount", m + ": " + st.error().second);
    return;
  }
  r.add(Verdict::kPass, "mount",
        m + ": " + st->value("repo", "?") + "@" + st->value("revision", "?") + " at " +
            st->value("commit", "?").substr(0, 12) + ", pid " +
            std::to_string(st->value("pid", 0)) +
            (st->value("offline", false) || st->value("offline_fallback", false)
                 ? " (serving the cache only)"
                 : ""));
}

// A path as /proc/self/mountinfo spells it: absolute, no "." or "..", no trailing slash. Not
// resolved through symlinks: resolving a dead mount's path would fail (ENOTCONN).
std::string mountinfo_spelling(const std::string& path) {
  std::filesystem::path p(path);
  if (p.is_relative()) p = std::filesystem::current_path() / p;
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// Every wheelhouse mount this process can see, or only those named (--mount): a machine with
// another tenant's dead mount is not ready for everyone, but may be for the mount one asks about.
void check_mounts(Report& r, const std::vector<std::string>& named, const std::string& repo) {
  const auto mounts = wheelhouse_mounts();
  if (named.empty()) {
    if (mounts.empty()) {
      r.add(Verdict::kPass, "mounts", "no wheelhouse mount on this machine (yet)");
      return;
    }
    for (const auto& m : mounts) check_mount(r, m);
    return;
  }
  for (const auto& want : named) {
    const std::string m = mountinfo_spelling(want);
    if (std::find(mounts.begin(), mounts.end(), m) == mounts.end()) {
      r.add(Verdict::kFail, "mount", want + ": not a wheelhouse mount",
            "wheelhousefs " + repo + " " + m + " (or name the folder it is mounted on)");
      continue;
    }
    check_mount(r, m);
  }
}

}  // namespace

int run_doctor(const DoctorOptions& o) {
  Report r;
  check_fuse(r);
  check_fusermount(r);
  check_allow_other(r);
  check_cache(r, o.cache_dir);
  check_token(r);
  if (o.offline) {
    r.add(Verdict::kPass, "hub", "not asked (--offline)");
  } else {
    check_hub(r, o.repo, o.endpoint);
  }
  check_gpus(r);
  check_python(r);
  check_mounts(r, o.mounts, o.repo);
  std::printf("%s: %d failed, %d warnings\n", r.failures() > 0 ? "not ready" : "ready",
              r.failures(), r.warnings());
  return r.failures() > 0 ? kFailed : kOk;
}

}  // namespace whfs::cli
