// wheelhouse-hint [MOUNTPOINT...]: what the shell hook runs (wheelhouse shell-hook). As a child
// of the shell, with the shell's current environment and working directory, it asks each
// wheelhouse mount (default: every one this process sees) to take them for its parent, so that
// the shell's own globs of current/ are answered for the Python it now runs. Quiet and cheap:
// it links nothing but libc and does one getxattr per mount; `-v` prints where current/ now
// leads the shell, or why no hint was taken.

#include <pthread.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "fs/common/mounts.h"

namespace {

// A mount's own deadline for reading a caller is 2 s (CallerTargetsConfig): one that has not
// answered by 3 s is stopped or hung, and a prompt must not wait on it.
constexpr int kDeadlineSeconds = 3;

struct Ask {
  std::string mount;
  bool verbose = false;
  bool done = false;  // under Shared::mu
  ssize_t n = -1;
  int err = 0;
  char value[4096] = {};
  ssize_t k = -1;
  char key[4096] = {};
};

struct Shared {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv{};
  std::vector<std::unique_ptr<Ask>> asks;
};

Shared g;

void* ask(void* arg) {
  auto* a = static_cast<Ask*>(arg);
  ssize_t n = ::getxattr(a->mount.c_str(), "user.wheelhouse.hint", a->value, sizeof a->value - 1);
  const int err = errno;
  ssize_t k = -1;
  if (n >= 0 && a->verbose && a->value[0] != '!') {
    // Where current/ now leads: the answer for this process, whose environment is the one
    // just handed to the shell.
    k = ::getxattr(a->mount.c_str(), "user.wheelhouse.key", a->key, sizeof a->key - 1);
  }
  pthread_mutex_lock(&g.mu);
  a->n = n;
  a->err = err;
  a->k = k;
  a->done = true;
  pthread_cond_signal(&g.cv);
  pthread_mutex_unlock(&g.mu);
  return nullptr;
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

  // Each mount asked on a thread of its own, all at once; what has not answered by the
  // deadline is reported and left behind (exiting ends those threads: a FUSE request's wait
  // yields to the process's end).
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&g.cv, &attr);
  for (const auto& m : mounts) {
    auto a = std::make_unique<Ask>();
    a->mount = m;
    a->verbose = verbose;
    g.asks.push_back(std::move(a));
  }
  std::size_t started = 0;
  for (auto& a : g.asks) {
    pthread_t t;
    if (pthread_create(&t, nullptr, ask, a.get()) != 0) break;
    pthread_detach(t);
    ++started;
  }
  timespec until{};
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += kDeadlineSeconds;
  pthread_mutex_lock(&g.mu);
  for (std::size_t i = 0; i < started; ++i) {
    while (!g.asks[i]->done) {
      if (pthread_cond_timedwait(&g.cv, &g.mu, &until) == ETIMEDOUT) break;
    }
  }

  int failed = 0;
  for (std::size_t i = 0; i < g.asks.size(); ++i) {
    const Ask& a = *g.asks[i];
    if (i >= started || !a.done) {
      if (verbose) {
        std::fprintf(stderr, "%s: %s\n", a.mount.c_str(),
                     i >= started ? "could not be asked (no thread)"
                                  : "no answer in 3 s (its daemon is stopped or hung)");
      }
      ++failed;
      continue;
    }
    if (a.n < 0) {
      if (verbose) {
        std::fprintf(stderr, "%s: %s\n", a.mount.c_str(),
                     a.err == ENODATA || a.err == ENOTSUP
                         ? "not a wheelhouse mount (or one without current/)"
                         : std::strerror(a.err));
      }
      ++failed;
      continue;
    }
    const std::string value(a.value, static_cast<std::size_t>(a.n));
    if (value[0] == '!') {
      ++failed;
      if (verbose) std::printf("%s: %s\n", a.mount.c_str(), value.c_str());
      continue;
    }
    if (verbose) {
      const std::string key = a.k < 0 ? "?" : std::string(a.key, static_cast<std::size_t>(a.k));
      std::printf("%s: targets/%s\n", a.mount.c_str(), key.c_str());
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // Not a return: the mutex is held and a thread may still be inside a mount; _exit ends
  // the process without waiting for it or running destructors it could be using.
  _exit(failed == 0 ? 0 : 1);
}
