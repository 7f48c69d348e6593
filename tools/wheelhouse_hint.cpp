// wheelhouse-hint [MOUNTPOINT...]: what the shell hook runs (wheelhouse shell-hook). As a child
// of the shell, with the shell's current environment and working directory, it asks each
// wheelhouse mount (default: every one this process sees) to take them for its parent, so that
// the shell's own globs of current/ are answered for the Python it now runs. Quiet and cheap:
// one getxattr per mount, all at once, 3 s at most; `-v` prints where current/ now leads the
// shell, or why no hint was taken.

#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "fs/common/mounts.h"

namespace {

// A mount's own deadline for reading a caller is 2 s (CallerTargetsConfig): one that has not
// answered by 3 s is stopped or hung, and a prompt must not wait on it.
constexpr auto kDeadline = std::chrono::seconds(3);

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

}  // namespace

int main(int argc, char** argv) {
  bool verbose = false;
  std::vector<std::string> mounts;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-v") == 0) {
      verbose = true;
    } else if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::printf("usage: wheelhouse-hint [-v] [MOUNTPOINT...]\n");
      return 0;
    } else {
      mounts.emplace_back(argv[i]);
    }
  }
  if (mounts.empty()) mounts = whfs::wheelhouse_mounts();

  // Every mount asked at once, on a thread of its own; what has not answered by the deadline
  // is reported and left behind (the process's end ends a thread waiting on FUSE).
  std::vector<std::unique_ptr<Ask>> asks;
  for (const auto& m : mounts) {
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

  int failed = 0;
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
