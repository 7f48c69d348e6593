#pragma once
// The filesystem's one error type. Each layer decides the kind where the meaning is known (the
// Hub client for a listing, the read path for a file's bytes, the namespace for a name) and the
// error travels unchanged to the FUSE adapter, which alone turns the kind into an errno
// (fs/fuse/errno_table.cpp). No switch over the kinds has a default arm: -Werror=switch makes a
// new kind a compile error everywhere it must be decided.

#include <array>
#include <string>

namespace whfs {

enum class FsErrorKind {
  kNotFound,     // ENOENT
  kNotDir,       // ENOTDIR
  kIsDir,        // EISDIR
  kReadOnly,     // EROFS
  kIo,           // EIO: the Hub failed, the cache failed
  kCorrupt,      // EIO too: a download did not match its hash (twice), or is quarantined
  kAccess,       // EACCES: the Hub refused us (token, gated repo)
  kTimedOut,     // EIO too (a read must not report ETIMEDOUT to tools that do not expect it)
  kNoAttr,       // ENODATA: no such extended attribute
  kRange,        // ERANGE: the caller's buffer is too small (xattrs)
  kInvalid,      // EINVAL: not a symlink (readlink)
  kInterrupted,  // EINTR: the caller went away while the request waited (or shutting down)
};

// Every kind, for the test that pins each one's errno.
inline constexpr std::array kAllFsErrorKinds = {
    FsErrorKind::kNotFound, FsErrorKind::kNotDir,   FsErrorKind::kIsDir,
    FsErrorKind::kReadOnly, FsErrorKind::kIo,       FsErrorKind::kCorrupt,
    FsErrorKind::kAccess,   FsErrorKind::kTimedOut, FsErrorKind::kNoAttr,
    FsErrorKind::kRange,    FsErrorKind::kInvalid,  FsErrorKind::kInterrupted};

struct FsErr {
  FsErrorKind kind = FsErrorKind::kIo;
  std::string message;  // for the log line: path and cause
  // Its cause has been logged once already (a failed download, a corrupt content): the reads
  // that waited on it need not log it again.
  bool logged = false;
};

}  // namespace whfs
