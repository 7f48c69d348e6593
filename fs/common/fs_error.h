#pragma once
// The filesystem's error type: what the namespace and the Filesystem return, and what the
// reader's and the Hub's errors are converted into at the Filesystem boundary. It becomes an
// errno in exactly one place: fs/fuse/errno_table.cpp.

#include <string>

namespace whfs {

enum class FsErrorKind {
  kNotFound,     // ENOENT
  kNotDir,       // ENOTDIR
  kIsDir,        // EISDIR
  kReadOnly,     // EROFS
  kIo,           // EIO: the Hub failed, a download was corrupt, the cache failed
  kAccess,       // EACCES: the Hub refused us (token, gated repo)
  kTimedOut,     // EIO too (a read must not report ETIMEDOUT to tools that do not expect it)
  kNoAttr,       // ENODATA: no such extended attribute
  kRange,        // ERANGE: the caller's buffer is too small (xattrs)
  kInvalid,      // EINVAL: not a symlink (readlink)
  kInterrupted,  // EINTR: the caller went away while the request waited
};

struct FsErr {
  FsErrorKind kind = FsErrorKind::kIo;
  std::string message;  // for the log line: path and cause
};

}  // namespace whfs
