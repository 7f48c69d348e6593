#include "fs/fuse/errno_table.h"

#include <cerrno>

namespace whfs::fuse {

int to_errno(FsErrorKind kind) {
  switch (kind) {
    case FsErrorKind::kNotFound:
      return ENOENT;
    case FsErrorKind::kNotDir:
      return ENOTDIR;
    case FsErrorKind::kIsDir:
      return EISDIR;
    case FsErrorKind::kReadOnly:
      return EROFS;
    case FsErrorKind::kIo:
    case FsErrorKind::kCorrupt:
      return EIO;
    case FsErrorKind::kAccess:
      return EACCES;
    case FsErrorKind::kTimedOut:
      return EIO;
    case FsErrorKind::kNoAttr:
      return ENODATA;
    case FsErrorKind::kRange:
      return ERANGE;
    case FsErrorKind::kInvalid:
      return EINVAL;
    case FsErrorKind::kInterrupted:
      return EINTR;
  }
  return EIO;
}

}  // namespace whfs::fuse
