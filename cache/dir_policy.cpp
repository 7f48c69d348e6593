#include "cache/dir_policy.h"

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

}  // namespace

Result<void> prepare_cache_dir(const fs::path& dir, const DirAccess& access) {
  const mode_t want = access.group ? 02770 : 0700;
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    if (dir.has_parent_path()) fs::create_directories(dir.parent_path(), ec);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return cache_error(CacheError::Kind::kIo,
                         "create " + dir.string() + ": " + std::strerror(errno));
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return cache_error(CacheError::Kind::kIo, "stat " + dir.string() + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) return refuse(dir, "is not a directory");
  const mode_t mode = st.st_mode & 07777;
  if (st.st_uid != ::geteuid()) {
    // Someone else's directory: fine only as a deliberately shared one of the group asked for.
    if (access.group && st.st_gid == *access.group && (mode & 0070) == 0070 && (mode & 0002) == 0) {
      return {};
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
  if (access.group && st.st_gid != *access.group && ::chown(dir.c_str(), -1, *access.group) != 0) {
    return cache_error(CacheError::Kind::kIo,
                       "chgrp " + dir.string() + ": " + std::strerror(errno));
  }
  if (mode != want) {
    if (::chmod(dir.c_str(), want) != 0) {
      return cache_error(CacheError::Kind::kIo,
                         "chmod " + dir.string() + ": " + std::strerror(errno));
    }
    if ((mode & 0077) != 0 && !access.group) {
      spdlog::info("cache directory {} was mode {}; made it private ({})", dir.string(),
                   octal(mode), octal(want));
    }
  }
  return {};
}

void restrict_cache_file(const fs::path& file, const DirAccess& access) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0 || st.st_uid != ::geteuid()) return;
  if (access.group && st.st_gid != *access.group) (void)::chown(file.c_str(), -1, *access.group);
  const mode_t want = file_mode(access);
  if ((st.st_mode & 07777) != want) (void)::chmod(file.c_str(), want);
}

bool on_read_only_filesystem(const fs::path& dir) {
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) == 0 && (v.f_flag & ST_RDONLY) != 0) return true;
  return ::access(dir.c_str(), W_OK) != 0 && errno == EROFS;
}

}  // namespace whfs::cache
