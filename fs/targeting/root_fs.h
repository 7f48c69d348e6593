#pragma once
// Files of another process's world, read from the daemon: paths are resolved inside a root
// directory (a caller's /proc/PID/root, a container's) the way that process would resolve
// them, never escaping it: symlinks resolve in the root, ".." stops at it, magic links are not
// followed. The kernel does it in one call (openat2 RESOLVE_IN_ROOT); where openat2 is refused
// (ENOSYS before Linux 5.6 or under a seccomp filter such as systemd's RestrictSUIDSGID=,
// EPERM under others) the path is walked one component at a time with the same guarantees.
// Only reading: nothing found here is ever executed or loaded. Every file is opened without
// blocking (a FIFO planted where a version file should be cannot stall the daemon), must be a
// regular file, and is read up to a bound.
//
// A root can refuse one filesystem (the mount's own, by device): a path that leads into it, by
// a folder, a symlink or a bind mount, is not followed, and the kernel is never asked to look
// up a name inside it. The daemon answers its own FUSE requests: a request thread that walked
// into its own mount would wait for the very entry it is answering.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fs/common/expected.h"

namespace whfs::target {

// What identifies a file's contents for a cache: if none of these changed, neither did it.
struct FileStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  std::uint64_t size = 0;
  bool operator==(const FileStamp&) const = default;
};

class RootFs {
 public:
  // `root` is a directory the daemon can open: "/", "/proc/1234/root", a test's folder.
  // `refused`: a filesystem (st_dev) that no path is followed into; the root itself may not be
  // on it.
  static Expected<RootFs, std::string> open(const std::string& root,
                                            std::optional<dev_t> refused = std::nullopt);

  RootFs() = default;
  ~RootFs();
  RootFs(RootFs&& other) noexcept;
  RootFs& operator=(RootFs&& other) noexcept;
  RootFs(const RootFs&) = delete;
  RootFs& operator=(const RootFs&) = delete;

  // The regular file at `path` (absolute, in the root), at most `max` bytes; nullopt when it is
  // missing, not a regular file, larger than `max` or unreadable.
  std::optional<std::string> read_file(const std::string& path, std::size_t max) const;
  // The first `n` bytes (or fewer) of the regular file at `path`, whatever its size.
  std::optional<std::string> read_head(const std::string& path, std::size_t n) const;
  // Its stamp (following symlinks in the root); nullopt when missing.
  std::optional<FileStamp> stamp(const std::string& path) const;
  bool is_dir(const std::string& path) const;
  bool is_executable_file(const std::string& path) const;
  // The canonical path (every symlink resolved, in the root), or nullopt when a component is
  // missing or the links loop.
  std::optional<std::string> resolve(const std::string& path) const;
  // Names in a directory (no "." or ".."), unsorted; empty when unreadable.
  std::vector<std::string> list(const std::string& dir) const;
  // The stamp of the root directory itself: two processes with the same root see one world.
  FileStamp root_stamp() const;
  // Whether some path was not followed because it led into the refused filesystem.
  bool met_refused() const { return met_refused_; }

 private:
  RootFs(int fd, std::optional<dev_t> refused) : fd_(fd), refused_(refused) {}
  // An fd of `path` inside the root (O_PATH unless flags say otherwise), or -1.
  int open_in(const std::string& path, int flags, bool follow_last) const;
  // The same, one component at a time, checking the filesystem of each: for paths that cross
  // a mount point, and where openat2 is refused.
  int walk_in(const std::string& path, int flags, bool follow_last) const;
  bool refused(int fd) const;

  int fd_ = -1;
  std::optional<dev_t> refused_;
  mutable bool met_refused_ = false;
};

// The openat2(2) call RootFs makes, replaceable for tests (null: the system call). One that
// fails with ENOSYS or EPERM stands for a kernel or a seccomp filter that refuses openat2.
using Openat2Fn = long (*)(int dirfd, const char* path, void* how, std::size_t size);
void set_openat2_for_testing(Openat2Fn fn);

// "/a/b/../c" style clean-up of an absolute path (no filesystem access): "." and ".."
// segments folded, repeated slashes removed; ".." above "/" stays at "/".
std::string normalize_path(const std::string& path);

// The directory part of an absolute path ("/usr/bin/python3" -> "/usr/bin").
std::string parent_of(const std::string& path);

}  // namespace whfs::target
