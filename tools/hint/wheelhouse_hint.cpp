// wheelhouse-hint [MOUNTPOINT...]: what the shell hook runs (wheelhouse shell-hook). As a child
// of the shell, with the shell's current environment and working directory, it asks each
// wheelhouse mount (default: every one this process sees) to take them for its parent, so that
// the shell's own globs of current/ are answered for the Python it now runs. Quiet and cheap:
// one getxattr per mount, all at once, 3 s at most; `-v` prints where current/ now leads the
// shell, or why no hint was taken.
//
// Only mounts it can trust are asked: those whose daemon runs as root or as this user (the FUSE
// mount's user_id= in /proc/self/mountinfo, which the kernel and fusermount3 set), and those an
// admin lists in /etc/wheelhouse-fs/hint-mounts or the user in $WHEELHOUSE_HINT_MOUNTS. Another
// user's mount (allow_other) is not asked: it would learn the pids of root's and everyone's
// shells, and one that never answers would cost each of their prompts the 3 s deadline.

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
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "fs/common/mounts.h"

namespace {

// A mount's own deadline for reading a caller is 2 s (CallerTargetsConfig): one that has not
// answered by 3 s is stopped or hung, and a prompt must not wait on it.
constexpr auto kDeadline = std::chrono::seconds(3);
constexpr const char* kTrustFile = "/etc/wheelhouse-fs/hint-mounts";

// %TRUST%: kTrustFile.
constexpr std::string_view kUsage =
    "usage: wheelhouse-hint [-v] [MOUNTPOINT...]\n"
    "Tells wheelhouse mounts (default: every one) this shell's environment and folder, for its\n"
    "globs of current/ (run by the hook of `wheelhouse shell-hook`). -v: where current/ now\n"
    "leads, or why a mount was not asked.\n"
    "Asked are the mounts whose daemon runs as root or as this user (the user_id= of the FUSE\n"
    "mount in /proc/self/mountinfo), and the mount folders listed in %TRUST% (one a\n"
    "line, # comments) or in $WHEELHOUSE_HINT_MOUNTS (separated by ':'); another user's\n"
    "mount is skipped: it would learn the pids of your shells, and could hold each prompt 3 s.\n"
    "Exit status: 0 every mount asked took the hint; 1 one did not, or a MOUNTPOINT named is no\n"
    "wheelhouse mount (a mount skipped as untrusted is no failure).\n";

struct Ask {
  std::string mount;
  bool done = false;  // under mu; the fields below are the asking thread's until then
  ssize_t n = -1;
  int err = 0;
  char value[4096] = {};
  ssize_t k = -1;
  char key[4096] = {};
};

std::mutex mu;
std::condition_variable cv;

void ask(Ask* a, bool verbose) {
  const ssize_t n =
      ::getxattr(a->mount.c_str(), "user.wheelhouse.hint", a->value, sizeof a->value - 1);
  const int err = errno;
  ssize_t k = -1;
  if (n >= 0 && verbose && a->value[0] != '!') {
    // Where current/ now leads: the answer for this process, whose environment is the one
    // just handed to the shell.
    k = ::getxattr(a->mount.c_str(), "user.wheelhouse.key", a->key, sizeof a->key - 1);
  }
  std::lock_guard lock(mu);
  a->n = n;
  a->err = err;
  a->k = k;
  a->done = true;
  cv.notify_one();
}

// A mount as /proc/self/mountinfo lists it, with the uid of the daemon's user (FUSE's user_id=
// mount option; -1 where there is none).
struct Mounted {
  std::string path;
  std::string type;
  long long user_id = -1;
};

std::vector<Mounted> read_mountinfo() {
  std::vector<Mounted> out;
  FILE* f = std::fopen("/proc/self/mountinfo", "re");
  if (f == nullptr) return out;
  char* line = nullptr;
  std::size_t cap = 0;
  while (::getline(&line, &cap, f) > 0) {
    // id parent major:minor root mountpoint options [optional...] - fstype source super-options
    std::vector<char> mnt(cap);
    if (std::sscanf(line, "%*s %*s %*s %*s %s", mnt.data()) != 1) continue;
    const char* dash = std::strstr(line, " - ");
    if (dash == nullptr) continue;
    std::vector<char> type(cap);
    std::vector<char> super(cap);
    if (std::sscanf(dash + 3, "%s %*s %s", type.data(), super.data()) != 2) continue;
    Mounted m{whfs::unescape_mount_path(mnt.data()), type.data(), -1};
    const std::string opts = std::string(",") + super.data() + ",";
    if (const auto at = opts.find(",user_id="); at != std::string::npos) {
      char* end = nullptr;
      const long long uid = std::strtoll(opts.c_str() + at + 9, &end, 10);
      if (end != opts.c_str() + at + 9 && *end == ',') m.user_id = uid;
    }
    out.push_back(std::move(m));
  }
  std::free(line);
  std::fclose(f);
  return out;
}

// A folder as mountinfo names it: absolute, without . and .. or a trailing slash. Only the
// parent's symbolic links are resolved: the folder itself may be a mount, whose daemon is not
// to be asked anything before it is trusted.
std::string mount_path(const std::string& given) {
  namespace fs = std::filesystem;
  fs::path p(given);
  if (p.is_relative()) {
    std::error_code ec;
    p = fs::current_path(ec) / p;
  }
  p = p.lexically_normal();
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  const fs::path norm(s);
  if (norm.has_parent_path() && norm.has_filename() && norm.parent_path() != norm) {
    if (char* parent = ::realpath(norm.parent_path().c_str(), nullptr); parent != nullptr) {
      std::string r = parent;
      std::free(parent);
      s = (r == "/" ? "" : r) + "/" + norm.filename().string();
    }
  }
  return s;
}

// The mounts listed as trusted: /etc/wheelhouse-fs/hint-mounts (one folder a line, # comments)
// and $WHEELHOUSE_HINT_MOUNTS (folders separated by ':').
std::vector<std::string> trusted_list() {
  std::vector<std::string> out;
  auto add = [&](std::string s) {
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.pop_back();
    std::size_t b = 0;
    while (b < s.size() && (s[b] == ' ' || s[b] == '\t')) ++b;
    s.erase(0, b);
    if (!s.empty() && s[0] != '#') out.push_back(mount_path(s));
  };
  if (FILE* f = std::fopen(kTrustFile, "re"); f != nullptr) {
    char* line = nullptr;
    std::size_t cap = 0;
    while (::getline(&line, &cap, f) > 0) add(line);
    std::free(line);
    std::fclose(f);
  }
  if (const char* env = std::getenv("WHEELHOUSE_HINT_MOUNTS"); env != nullptr) {
    const std::string list = env;
    std::size_t pos = 0;
    while (pos <= list.size()) {
      const std::size_t colon = std::min(list.find(':', pos), list.size());
      add(list.substr(pos, colon - pos));
      pos = colon + 1;
    }
  }
  return out;
}

// Why `path` is not to be asked; empty when it is. `*failure`: the mount named is not one.
std::string why_not(const std::string& path, const std::vector<Mounted>& mounts,
                    const std::vector<std::string>& trusted, bool* failure) {
  const Mounted* top = nullptr;
  for (const auto& m : mounts) {
    if (m.path == path) top = &m;  // the last one mounted there is the one seen
  }
  if (top == nullptr || top->type != "fuse.wheelhousefs") {
    *failure = true;
    return "not a wheelhouse mount (no fuse.wheelhousefs mount there in /proc/self/mountinfo)";
  }
  if (std::find(trusted.begin(), trusted.end(), path) != trusted.end()) return "";
  if (top->user_id == 0 || top->user_id == static_cast<long long>(::getuid())) return "";
  *failure = false;
  const std::string owner = top->user_id < 0 ? std::string("an unknown user (no user_id=)")
                                             : "user " + std::to_string(top->user_id);
  return "not asked: its daemon runs as " + owner + ", neither root nor you (list it in " +
         kTrustFile + " or $WHEELHOUSE_HINT_MOUNTS to ask it)";
}

}  // namespace

int main(int argc, char** argv) {
  bool verbose = false;
  std::vector<std::string> mounts;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-v") == 0) {
      verbose = true;
    } else if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::string usage(kUsage);
      usage.replace(usage.find("%TRUST%"), 7, kTrustFile);
      std::fputs(usage.c_str(), stdout);
      return 0;
    } else {
      mounts.emplace_back(argv[i]);
    }
  }
  const auto mounted = read_mountinfo();
  if (mounts.empty()) {
    for (const auto& m : mounted) {
      if (m.type == "fuse.wheelhousefs" &&
          std::find(mounts.begin(), mounts.end(), m.path) == mounts.end()) {
        mounts.push_back(m.path);
      }
    }
  } else {
    for (auto& m : mounts) m = mount_path(m);
  }
  const auto trusted = trusted_list();
  int failed = 0;
  std::vector<std::string> asked;
  for (const auto& m : mounts) {
    bool failure = false;
    const std::string why = why_not(m, mounted, trusted, &failure);
    if (why.empty()) {
      asked.push_back(m);
      continue;
    }
    failed += failure ? 1 : 0;
    if (verbose) std::fprintf(failure ? stderr : stdout, "%s: %s\n", m.c_str(), why.c_str());
  }

  // Every mount asked at once, on a thread of its own; what has not answered by the deadline
  // is reported and left behind (the process's end ends a thread waiting on FUSE).
  std::vector<std::unique_ptr<Ask>> asks;
  for (const auto& m : asked) {
    asks.push_back(std::make_unique<Ask>());
    asks.back()->mount = m;
    try {
      std::thread(ask, asks.back().get(), verbose).detach();
    } catch (const std::system_error& e) {  // no thread to be had: this mount is not asked
      asks.back()->err = e.code().value();
      asks.back()->done = true;
    }
  }
  std::unique_lock lock(mu);
  const auto until = std::chrono::steady_clock::now() + kDeadline;
  for (const auto& a : asks) {
    if (!cv.wait_until(lock, until, [&] { return a->done; })) break;
  }

  for (const auto& a : asks) {
    if (!a->done) {
      ++failed;
      if (verbose) {
        std::fprintf(stderr, "%s: no answer in 3 s (its daemon is stopped or hung)\n",
                     a->mount.c_str());
      }
      continue;
    }
    if (a->n < 0) {
      ++failed;
      if (verbose) {
        std::fprintf(stderr, "%s: %s\n", a->mount.c_str(),
                     a->err == ENODATA || a->err == ENOTSUP
                         ? "not a wheelhouse mount (or one without current/)"
                         : std::strerror(a->err));
      }
      continue;
    }
    const std::string value(a->value, static_cast<std::size_t>(a->n));
    if (value.starts_with('!')) {
      ++failed;
      if (verbose) std::printf("%s: %s\n", a->mount.c_str(), value.c_str());
      continue;
    }
    if (verbose) {
      const std::string key = a->k < 0 ? "?" : std::string(a->key, static_cast<std::size_t>(a->k));
      std::printf("%s: targets/%s\n", a->mount.c_str(), key.c_str());
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // Not a return: a thread may still be inside a mount, holding its Ask; _exit ends the
  // process without destroying what it uses.
  _exit(failed == 0 ? 0 : 1);
}
