#include "cache/dir_policy.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

namespace whfs::cache {

namespace fs = std::filesystem;

namespace {

Unexpected<CacheError> refuse(const fs::path& dir, const std::string& why) {
  return cache_error(CacheError::Kind::kAccess, "cache directory " + dir.string() + " " + why);
}

std::string octal(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// What is wrong with a name of the cache directory, or nullopt for a regular file with one
// link (a hard link shares its inode with a file elsewhere, whose mode this process would
// change and whose bytes LMDB would overwrite).
std::optional<std::string> shape_problem(const struct stat& st) {
  if (S_ISREG(st.st_mode)) {
    if (st.st_nlink == 1) return std::nullopt;
    return "a file with " + std::to_string(st.st_nlink) + " hard links";
  }
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device";
  return "not a regular file";
}

Unexpected<CacheError> planted(const fs::path& dir, const char* name, const std::string& what) {
  return refuse(dir, "holds " + std::string(name) + ", which is " + what +
                         ", not a file of the cache: refused (whoever can write the directory "
                         "may have put it there to make this process change another file); "
                         "remove it");
}

// The policy's group and mode, through the fd of a file this process owns.
void restrict_fd(int fd, const struct stat& st, const DirAccess& access) {
  if (st.st_uid != ::geteuid()) return;
  if (access.group && st.st_gid != *access.group) (void)::fchown(fd, -1, *access.group);
  const mode_t want = file_mode(access);
  if ((st.st_mode & 07777) != want) (void)::fchmod(fd, want);
}

}  // namespace

Result<UniqueFd> prepare_cache_dir(const fs::path& dir, const DirAccess& access) {
  const mode_t want = dir_mode(access);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno == ENOENT && dir.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(dir.parent_path(), ec);
    (void)::mkdir(dir.c_str(), 0700);
  }
  // The directory itself may be a link its owner made (cache_dir is theirs to choose): the
  // names inside it are what others can write.
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOTDIR) return refuse(dir, "is not a directory");
    return cache_error(CacheError::Kind::kIo, "open " + dir.string() + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return cache_error(CacheError::Kind::kIo, "stat " + dir.string() + ": " + std::strerror(errno));
  }
  const mode_t mode = st.st_mode & 07777;
  if (st.st_uid != ::geteuid()) {
    // Someone else's directory: fine only as a deliberately shared one of the group asked for.
    if (access.group && st.st_gid == *access.group && (mode & 0070) == 0070 && (mode & 0002) == 0) {
      if ((mode & S_ISVTX) == 0) {
        spdlog::warn(
            "cache directory {} is shared with its group without the sticky bit (mode {}): "
            "members can replace each other's files; its owner's next open makes it {}",
            dir.string(), octal(mode), octal(want));
      }
      return fd;
    }
    return refuse(dir, "belongs to user " + std::to_string(st.st_uid) +
                           ": use a directory of your own (cache_dir=), or share one "
                           "deliberately with a group (cache_group=)");
  }
  const bool others_write = (mode & 0002) != 0;
  const bool group_write = (mode & 0020) != 0;
  if (others_write || (group_write && !access.group)) {
    return refuse(dir, "can be written by " +
                           std::string(others_write ? "every user" : "its group") + " (mode " +
                           octal(mode) + "), who could have put blocks in it: " +
                           "chmod 700 it, or share it deliberately with cache_group=");
  }
  if (access.group && st.st_gid != *access.group && ::fchown(fd.get(), -1, *access.group) != 0) {
    return cache_error(CacheError::Kind::kIo,
                       "chgrp " + dir.string() + ": " + std::strerror(errno));
  }
  if (mode != want) {
    if (::fchmod(fd.get(), want) != 0) {
      return cache_error(CacheError::Kind::kIo,
                         "chmod " + dir.string() + ": " + std::strerror(errno));
    }
    if ((mode & 0077) != 0 && !access.group) {
      spdlog::info("cache directory {} was mode {}; made it private ({})", dir.string(),
                   octal(mode), octal(want));
    } else if (access.group && mode == 02770) {
      spdlog::info(
          "cache directory {} was mode {}; made it {} (sticky: members of the group cannot "
          "replace each other's files)",
          dir.string(), octal(mode), octal(want));
    }
  }
  return fd;
}

Result<UniqueFd> open_cache_file(int dir_fd, const fs::path& dir, const char* name, int flags,
                                 const DirAccess& access) {
  const bool create = (flags & O_CREAT) != 0;
  // O_NONBLOCK: a FIFO opens (or fails) at once instead of waiting for a writer.
  const int base =
      (flags & ~(O_CREAT | O_EXCL | O_TRUNC)) | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  int raw = ::openat(dir_fd, name, base);
  if (raw < 0 && errno == ENOENT && create) {
    raw = ::openat(dir_fd, name, base | O_CREAT | O_EXCL, file_mode(access));
    if (raw < 0 && errno == EEXIST) raw = ::openat(dir_fd, name, base);  // another opener's
  }
  if (raw < 0) {
    const int err = errno;
    if (err == ENOENT && !create) return UniqueFd();
    if (err == ELOOP) return planted(dir, name, "a symbolic link");
    if (err == EISDIR) return planted(dir, name, "a directory");
    if (err == ENXIO) return planted(dir, name, "a FIFO or a socket");
    return cache_error(CacheError::Kind::kIo,
                       "open " + (dir / name).string() + ": " + std::strerror(err));
  }
  UniqueFd fd(raw);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return cache_error(CacheError::Kind::kIo,
                       "stat " + (dir / name).string() + ": " + std::strerror(errno));
  }
  if (auto bad = shape_problem(st)) return planted(dir, name, *bad);
  const int fl = ::fcntl(fd.get(), F_GETFL);
  if (fl == -1 || ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK) != 0) {
    return cache_error(CacheError::Kind::kIo,
                       "fcntl " + (dir / name).string() + ": " + std::strerror(errno));
  }
  restrict_fd(fd.get(), st, access);
  return fd;
}

Result<void> restrict_cache_entry(int dir_fd, const fs::path& dir, const char* name,
                                  const DirAccess& access) {
  // O_PATH with O_NOFOLLOW opens a symbolic link itself, and a FIFO without waiting.
  UniqueFd fd(::openat(dir_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return {};
    return cache_error(CacheError::Kind::kIo,
                       "open " + (dir / name).string() + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return cache_error(CacheError::Kind::kIo,
                       "stat " + (dir / name).string() + ": " + std::strerror(errno));
  }
  if (auto bad = shape_problem(st)) return planted(dir, name, *bad);
  if (st.st_uid != ::geteuid()) return {};
  if (access.group && st.st_gid != *access.group) {
    (void)::fchownat(fd.get(), "", -1, *access.group, AT_EMPTY_PATH);
  }
  const mode_t want = file_mode(access);
  if ((st.st_mode & 07777) != want) {
    // fchmod() takes no O_PATH descriptor; its /proc link is the inode opened, not a name.
    const std::string self = "/proc/self/fd/" + std::to_string(fd.get());
    (void)::chmod(self.c_str(), want);
  }
  return {};
}

Result<bool> check_cache_entry(int dir_fd, const fs::path& dir, const char* name, struct stat* st) {
  struct stat s {};
  if (::fstatat(dir_fd, name, &s, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return false;
    return cache_error(CacheError::Kind::kIo,
                       "stat " + (dir / name).string() + ": " + std::strerror(errno));
  }
  if (auto bad = shape_problem(s)) return planted(dir, name, *bad);
  if (st != nullptr) *st = s;
  return true;
}

Result<void> check_read_only_store(const fs::path& dir, const DirAccess& access) {
  auto refuse_store = [&](const std::string& why) {
    return cache_error(CacheError::Kind::kAccess, "read-only cache " + dir.string() +
                                                      ": its data.mdb " + why +
                                                      ": refused before LMDB reads it");
  };
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d) return {};  // LMDB says what is wrong with the directory
  struct stat st {};
  if (::fstatat(d.get(), "data.mdb", &st, AT_SYMLINK_NOFOLLOW) != 0) return {};
  if (auto bad = shape_problem(st)) return refuse_store("is " + *bad + ", not a plain file");
  if (::geteuid() != 0) return {};
  // A root daemon parses it: a file that anyone could have written is not parsed.
  const bool owner_ok = st.st_uid == 0 || (access.group && st.st_gid == *access.group);
  if (!owner_ok) {
    return refuse_store("belongs to user " + std::to_string(st.st_uid) + " and group " +
                        std::to_string(st.st_gid) +
                        ", neither root nor the cache's group (cache_group=)");
  }
  if ((st.st_mode & 0002) != 0) {
    return refuse_store("can be written by every user (mode " + octal(st.st_mode) + ")");
  }
  return {};
}

bool on_read_only_filesystem(const fs::path& dir) {
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) == 0 && (v.f_flag & ST_RDONLY) != 0) return true;
  return ::access(dir.c_str(), W_OK) != 0 && errno == EROFS;
}

}  // namespace whfs::cache
