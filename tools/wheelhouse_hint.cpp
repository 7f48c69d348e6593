// wheelhouse-hint [MOUNTPOINT...]: what the shell hook runs (wheelhouse shell-hook). As a child
// of the shell, with the shell's current environment and working directory, it asks each
// wheelhouse mount (default: every one this process sees) to take them for its parent, so that
// the shell's own globs of current/ are answered for the Python it now runs. Quiet and cheap:
// it links nothing but libc and does one getxattr per mount; `-v` prints where current/ now
// leads the shell, or why no hint was taken.

#include <sys/xattr.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fs/common/mounts.h"

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
  int failed = 0;
  for (const auto& m : mounts) {
    char value[4096];
    const ssize_t n = ::getxattr(m.c_str(), "user.wheelhouse.hint", value, sizeof value - 1);
    if (n < 0) {
      if (verbose) {
        std::fprintf(stderr, "%s: %s\n", m.c_str(),
                     errno == ENODATA || errno == ENOTSUP
                         ? "not a wheelhouse mount (or one without current/)"
                         : std::strerror(errno));
      }
      ++failed;
      continue;
    }
    value[n] = '\0';
    if (value[0] == '!') {
      ++failed;
      if (verbose) std::printf("%s: %s\n", m.c_str(), value);
      continue;
    }
    if (verbose) {
      // Where current/ now leads: the answer for this process, whose environment is the one
      // just handed to the shell.
      char key[4096];
      const ssize_t k = ::getxattr(m.c_str(), "user.wheelhouse.key", key, sizeof key - 1);
      key[k < 0 ? 0 : k] = '\0';
      std::printf("%s: targets/%s\n", m.c_str(), k < 0 ? "?" : key);
    }
  }
  return failed == 0 ? 0 : 1;
}
