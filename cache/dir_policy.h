#pragma once
// Who may read and write a cache directory. A cache holds the bytes of private and gated
// repositories, and any process that can write it can plant blocks for every other one: it is
// private to its owner (0700, files 0600) unless deliberately shared with a group (02770,
// files 0660 of that group), and a directory that someone else could have prepared is refused.
// A cache on a read-only filesystem (an image layer, a `:ro` bind mount) is only read; whoever
// owns it, every daemon verifies what it serves from it.

#include <sys/types.h>

#include <filesystem>
#include <optional>

#include "cache/cache_error.h"

namespace whfs::cache {

struct DirAccess {
  std::optional<gid_t> group;  // shared with this group (the mount option cache_group=)
};

// The mode of the files the cache creates.
inline mode_t file_mode(const DirAccess& a) { return a.group ? 0660 : 0600; }

// Creates the directory (and its missing parents) private or group-shared; gives an existing
// one of ours that mode again; refuses one owned by another user (unless it is shared with the
// group asked for) or writable by others than its owner (and that group). One sentence each.
Result<void> prepare_cache_dir(const std::filesystem::path& dir, const DirAccess& access);

// Gives an existing file of the cache the mode (and group) of the policy when this process
// owns it (a file created by an older version, or under another umask).
void restrict_cache_file(const std::filesystem::path& file, const DirAccess& access);

// True when `dir` is on a read-only filesystem: such a cache is opened read-only.
bool on_read_only_filesystem(const std::filesystem::path& dir);

}  // namespace whfs::cache
