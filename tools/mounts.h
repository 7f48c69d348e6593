#pragma once
// The wheelhouse mounts this process can see, from /proc/self/mountinfo (their filesystem type
// is fuse.wheelhousefs). Header-only and libc-only: the shell hook's helper links nothing else.

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace whfs::cli {

// mountinfo escapes space, tab, newline and backslash as \ooo.
inline std::string unescape_mount_path(const char* s) {
  std::string out;
  for (const char* p = s; *p != '\0'; ++p) {
    if (p[0] == '\\' && p[1] >= '0' && p[1] <= '7' && p[2] >= '0' && p[2] <= '7' && p[3] >= '0' &&
        p[3] <= '7') {
      out.push_back(static_cast<char>((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0')));
      p += 3;
    } else {
      out.push_back(*p);
    }
  }
  return out;
}

inline std::vector<std::string> wheelhouse_mounts(const char* mountinfo = "/proc/self/mountinfo") {
  std::vector<std::string> out;
  FILE* f = std::fopen(mountinfo, "r");
  if (f == nullptr) return out;
  char line[8192];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    // id parent major:minor root mountpoint options [optional...] - fstype source super
    char mnt[4096];
    if (std::sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1) continue;
    const char* dash = std::strstr(line, " - ");
    if (dash == nullptr) continue;
    char type[256];
    if (std::sscanf(dash + 3, "%255s", type) != 1) continue;
    if (std::strcmp(type, "fuse.wheelhousefs") == 0) out.push_back(unescape_mount_path(mnt));
  }
  std::fclose(f);
  return out;
}

}  // namespace whfs::cli
