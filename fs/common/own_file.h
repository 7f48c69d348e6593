#pragma once
// The files the daemon creates or appends to, often as root (its log, the metrics textfile):
// never reached through a link another user could have planted, never another user's file.
//
// A folder is opened one component at a time from /, each symbolic link resolved here, and
// every folder passed through must be one that no other user can change: owned by this user or
// root, and writable by no one else (a group-writable one only by this user's own group), or
// sticky like /tmp (others may add names there, but not remove or rename this user's). The
// folder stays open: the file and its rotations are made in the folder that was checked,
// whatever is renamed on the path afterwards.

#include <sys/types.h>

#include <string>

#include "fs/common/expected.h"

namespace whfs {

class OwnFolder {
 public:
  // `path`: absolute. Missing folders are created (0700) when `create`. The error is one line
  // that starts with `what` ("log_file=/var/log/x/wh.log") and names the folder at fault.
  static Expected<OwnFolder, std::string> open(const std::string& path, bool create,
                                               const std::string& what);
  OwnFolder(OwnFolder&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  OwnFolder& operator=(OwnFolder&& o) noexcept;
  OwnFolder(const OwnFolder&) = delete;
  OwnFolder& operator=(const OwnFolder&) = delete;
  ~OwnFolder();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }  // as resolved

 private:
  OwnFolder(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

// `name` in `folder`, opened for appending: created with exactly `mode` (O_EXCL, so never
// through a link), else the existing entry opened without following a link and checked on the
// descriptor: a regular file of this user with no other hard link. The error is one line that
// starts with `what`. Sets *created when it made the file.
Expected<int, std::string> open_own_file(const OwnFolder& folder, const std::string& name,
                                         mode_t mode, const std::string& what,
                                         bool* created = nullptr);

// Why the open file `fd` is not this user's own (a regular file of this user with no other hard
// link): one clause such as "it is not a regular file"; "" when it is.
std::string not_own_file(int fd);

// Whether an existing entry `name` of `folder` may be replaced by this user's file: absent, or a
// regular file of this user (not a link, a folder, another user's file). Else one line that
// starts with `what`.
Expected<void, std::string> replaceable(const OwnFolder& folder, const std::string& name,
                                        const std::string& what);

}  // namespace whfs
