#pragma once
// The mounts this process can see, from /proc/self/mountinfo: the wheelhouse mounts (their
// filesystem type is fuse.wheelhousefs), and what is mounted on a given folder. Header-only
// and libc-only: the shell hook's helper links nothing else.

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace whfs {

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

struct MountEntry {
  std::string path;
  std::string type;    // e.g. fuse.wheelhousefs, ext4
  std::string source;  // e.g. DoctorPopi/python_wheelhouse, /dev/sda1
};

inline std::vector<MountEntry> all_mounts(const char* mountinfo = "/proc/self/mountinfo") {
  std::vector<MountEntry> out;
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
    char source[4096];
    const int n = std::sscanf(dash + 3, "%255s %4095s", type, source);
    if (n < 1) continue;
    out.push_back({unescape_mount_path(mnt), type, n == 2 ? unescape_mount_path(source) : ""});
  }
  std::fclose(f);
  return out;
}

inline std::vector<std::string> wheelhouse_mounts(const char* mountinfo = "/proc/self/mountinfo") {
  std::vector<std::string> out;
  for (auto& m : all_mounts(mountinfo)) {
    if (m.type == "fuse.wheelhousefs") out.push_back(std::move(m.path));
  }
  return out;
}

// The last mount on `path` (an absolute path without symlinks), if any.
inline bool mounted_on(const std::string& path, MountEntry* found = nullptr) {
  bool any = false;
  for (auto& m : all_mounts()) {
    if (m.path == path) {
      any = true;
      if (found != nullptr) *found = m;
    }
  }
  return any;
}

}  // namespace whfs
