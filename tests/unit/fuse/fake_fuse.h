#pragma once
// A fake of the libfuse calls fuse_ops.cpp makes: a request carries the session data and the
// caller, and records the one reply it got.

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <string>
#include <vector>

#include "fs/fuse/fuse_ops.h"

struct fuse_req {
  const whfs::fuse::FuseMount::SessionData* session = nullptr;
  fuse_ctx ctx{};
  // The reply: "err", "entry", "attr", "buf", "iov", "none", "open", "readlink", "statfs",
  // "xattr" (and how many replies came: exactly one is the rule).
  std::string reply;
  int replies = 0;
  int err = -1;
  fuse_entry_param entry{};
  struct stat attr {};
  double attr_timeout = -1;
  std::string bytes;  // buf, iov, readlink
  std::size_t xattr_size = 0;
  fuse_file_info fi{};
  bool throw_after_reply = false;  // fuse_reply_iov throws once it has replied
};

namespace whfs::fuse::testing {
// The names fuse_add_direntry(_plus) wrote, NUL-separated in the buffer they were given.
std::vector<std::string> names_in(const std::string& buf);
}  // namespace whfs::fuse::testing
