#pragma once
// Who may read and write a cache directory. A cache holds the bytes of private and gated
// repositories, and any process that can write it can plant blocks for every other one: it is
// private to its owner (0700, files 0600) unless deliberately shared with a group (03770,
// files 0660 of that group), and a directory that someone else could have prepared is refused.
// A cache on a read-only filesystem (an image layer, a `:ro` bind mount) is only read; whoever
// owns it, every daemon verifies what it serves from it.
//
// A member of the group can put any name in a shared directory: a symbolic link or a hard link
// to a file of root's, a FIFO, a directory. Nothing in the directory is therefore opened by
// path: it is opened once, and every file in it with openat() and O_NOFOLLOW | O_NONBLOCK,
// then checked (fstat: a regular file with one link) and given its mode and group through
// its fd. The sticky bit keeps members from renaming or removing files they do not own.

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <utility>

#include "cache/cache_error.h"

namespace whfs::cache {

struct DirAccess {
  std::optional<gid_t> group;  // shared with this group (the mount option cache_group=)
};

// The mode of the files the cache creates, and of the directory.
inline mode_t file_mode(const DirAccess& a) { return a.group ? 0660 : 0600; }
inline mode_t dir_mode(const DirAccess& a) { return a.group ? 03770 : 0700; }

// A file descriptor, closed with its owner.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Creates the directory (and its missing parents) private or group-shared; gives an existing
// one of ours that mode again (an older 02770 one becomes 03770); refuses one owned by another
// user (unless it is shared with the group asked for) or writable by others than its owner
// (and that group). One sentence each. Returns the directory, opened: every file of the cache
// is opened relative to it (open_cache_file).
Result<UniqueFd> prepare_cache_dir(const std::filesystem::path& dir, const DirAccess& access);

// Opens `name` in the cache directory `dir_fd` (`dir` names it in messages) with `flags`
// (O_CREAT creates it with file_mode(access), whatever the umask), never following a symbolic
// link and never waiting on a FIFO; refuses (kAccess, one sentence naming it) anything but a
// regular file with a single link; gives a file this process owns the mode and group of the
// policy through the fd. Without O_CREAT, an absent file is an empty UniqueFd.
Result<UniqueFd> open_cache_file(int dir_fd, const std::filesystem::path& dir, const char* name,
                                 int flags, const DirAccess& access);

// Gives the file `name` of the directory, when this process owns it, the mode and group of the
// policy, through an O_PATH descriptor of it (never by name; and closing an O_PATH descriptor
// does not drop the POSIX locks LMDB holds on lock.mdb, as closing any other descriptor of it
// would). Refuses, as open_cache_file, anything but a regular file with a single link.
Result<void> restrict_cache_entry(int dir_fd, const std::filesystem::path& dir, const char* name,
                                  const DirAccess& access);

// Whether `name` exists in the directory (not following a link; its stat in `st`); refuses,
// as open_cache_file, anything but a regular file with a single link.
Result<bool> check_cache_entry(int dir_fd, const std::filesystem::path& dir, const char* name,
                               struct stat* st = nullptr);

// Before LMDB parses the data file of a read-only cache (a lower tier: an image layer, a
// `:ro` bind mount): a regular file with one link, not a symbolic link; in a root daemon also
// owned by root, by this user or (when the cache is shared) by the group, and not writable by
// every user. One sentence when not.
Result<void> check_read_only_store(const std::filesystem::path& dir, const DirAccess& access);

// True when `dir` is on a read-only filesystem: such a cache is opened read-only.
bool on_read_only_filesystem(const std::filesystem::path& dir);

}  // namespace whfs::cache
