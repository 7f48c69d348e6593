#include "fs/common/own_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>

namespace whfs {
namespace {

constexpr int kMaxLinks = 40;  // as the kernel (ELOOP)

std::string octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

std::string joined(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

std::string parent_of(const std::string& dir) {
  const auto slash = dir.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
}

void push_parts(std::deque<std::string>& parts, const std::string& path) {
  std::deque<std::string> mine;
  std::size_t start = 0;
  while (start <= path.size()) {
    auto slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    std::string part = path.substr(start, slash - start);
    if (!part.empty() && part != ".") mine.push_back(std::move(part));
    start = slash + 1;
  }
  parts.insert(parts.begin(), mine.begin(), mine.end());
}

// Why another user could change what the folder holds; "" when none can.
std::string others_can_write(const struct stat& st) {
  const uid_t me = ::geteuid();
  const bool trusted_owner = st.st_uid == me || st.st_uid == 0;
  if (!trusted_owner) return "it belongs to uid " + std::to_string(st.st_uid);
  const bool group = (st.st_mode & S_IWGRP) != 0 && st.st_gid != ::getegid();
  const bool world = (st.st_mode & S_IWOTH) != 0;
  if (!group && !world) return "";
  // Sticky: others may add names, never remove or rename this user's.
  if ((st.st_mode & S_ISVTX) != 0) return "";
  return std::string("other users can write in it (mode ") + octal(st.st_mode) +
         (group && !world ? ", group " + std::to_string(st.st_gid) : std::string()) + ")";
}

}  // namespace

OwnFolder& OwnFolder::operator=(OwnFolder&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

OwnFolder::~OwnFolder() {
  if (fd_ >= 0) ::close(fd_);
}

Expected<OwnFolder, std::string> OwnFolder::open(const std::string& path, bool create,
                                                 const std::string& what) {
  if (path.empty() || path[0] != '/') return unexpected(what + ": not an absolute path");
  int cur = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (cur < 0) return unexpected(what + ": cannot open /: " + std::strerror(errno));
  std::string at = "/";
  auto fail = [&](const std::string& why) -> Unexpected<std::string> {
    if (cur >= 0) ::close(cur);
    return unexpected(what + ": " + why);
  };
  auto check = [&](int fd, const std::string& dir) -> std::string {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return "cannot look at folder " + dir + ": " + std::strerror(errno);
    if (auto why = others_can_write(st); !why.empty()) {
      return "folder " + dir + " is not safe for a file of this daemon: " + why +
             "; give a folder that only this user or root can write (or a sticky one, like "
             "/tmp)";
    }
    return "";
  };
  if (auto bad = check(cur, at); !bad.empty()) return fail(bad);
  std::deque<std::string> parts;
  push_parts(parts, path);
  int links = 0;
  while (!parts.empty()) {
    const std::string name = parts.front();
    parts.pop_front();
    const std::string next = name == ".." ? parent_of(at) : joined(at, name);
    int fd = ::openat(cur, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
      if (::mkdirat(cur, name.c_str(), 0700) != 0 && errno != EEXIST) {
        return fail("cannot create folder " + next + ": " + std::strerror(errno));
      }
      fd = ::openat(cur, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) return fail("cannot open folder " + next + ": " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      return fail("cannot look at " + next + ": " + std::strerror(errno));
    }
    if (S_ISLNK(st.st_mode)) {
      // Resolved here, so that each folder it leads through is checked too. (The folder that
      // holds the link was checked: no other user can have planted it.)
      char target[4096];
      const ssize_t n = ::readlinkat(fd, "", target, sizeof target - 1);
      ::close(fd);
      if (n <= 0 || ++links > kMaxLinks) return fail("cannot follow the link " + next);
      const std::string to(target, static_cast<std::size_t>(n));
      push_parts(parts, to);
      if (to[0] == '/') {
        ::close(cur);
        cur = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (cur < 0) return fail(std::string("cannot open /: ") + std::strerror(errno));
        at = "/";
      }
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      ::close(fd);
      return fail(next + " is not a folder");
    }
    ::close(cur);
    cur = fd;
    at = next;
    if (auto bad = check(cur, at); !bad.empty()) return fail(bad);
  }
  return OwnFolder(cur, at);
}

std::string not_own_file(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::string("cannot look at it: ") + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return "it is not a regular file";
  if (st.st_uid != ::geteuid()) {
    return "it belongs to uid " + std::to_string(st.st_uid) + ", not to this daemon's user (uid " +
           std::to_string(::geteuid()) + ")";
  }
  if (st.st_nlink != 1) {
    return "it has " + std::to_string(st.st_nlink) + " hard links (another name could be anything)";
  }
  return "";
}

Expected<int, std::string> open_own_file(const OwnFolder& folder, const std::string& name,
                                         mode_t mode, const std::string& what, bool* created) {
  if (created != nullptr) *created = false;
  constexpr int kFlags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  int fd = ::openat(folder.fd(), name.c_str(), kFlags | O_CREAT | O_EXCL, mode);
  if (fd >= 0) {
    ::fchmod(fd, mode);  // exactly `mode`, whatever the umask
    if (created != nullptr) *created = true;
    return fd;
  }
  if (errno != EEXIST) return unexpected(what + ": cannot create it: " + std::strerror(errno));
  fd = ::openat(folder.fd(), name.c_str(), kFlags);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) return unexpected(what + ": it is a symbolic link (not followed)");
    if (err == ENXIO || err == EISDIR) return unexpected(what + ": it is not a regular file");
    return unexpected(what + ": cannot open it: " + std::strerror(err));
  }
  if (const std::string why = not_own_file(fd); !why.empty()) {
    ::close(fd);
    return unexpected(what + ": " + why);
  }
  return fd;
}

Expected<void, std::string> replaceable(const OwnFolder& folder, const std::string& name,
                                        const std::string& what) {
  struct stat st {};
  if (::fstatat(folder.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return {};
    return unexpected(what + ": cannot look at it: " + std::strerror(errno));
  }
  if (S_ISLNK(st.st_mode)) return unexpected(what + ": it is a symbolic link (not replaced)");
  if (!S_ISREG(st.st_mode)) return unexpected(what + ": it is not a regular file");
  if (st.st_uid != ::geteuid()) {
    return unexpected(what + ": it belongs to uid " + std::to_string(st.st_uid) +
                      ", not to this daemon's user (uid " + std::to_string(::geteuid()) + ")");
  }
  return {};
}

}  // namespace whfs
