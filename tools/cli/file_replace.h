#pragma once
// Editing a system file in place, as an admin's command does (shell-hook --install,
// pip-config --append): read it, then replace it atomically (a reader sees the old file or the
// new one) with its owner, mode and extended attributes; a symbolic link or a file with hard
// links is refused, and an edit by someone else since it was read is not overwritten.

#include <sys/stat.h>

#include <optional>
#include <string>

namespace whfs::cli {

// A file as read: its bytes and the identity, owner and mode its replacement keeps. The fd
// stays open for its extended attributes (ACLs, SELinux label), copied onto the replacement.
struct EditedFile {
  std::string text;
  struct stat st {};
  int fd = -1;
  EditedFile() = default;
  EditedFile(const EditedFile&) = delete;
  EditedFile& operator=(const EditedFile&) = delete;
  ~EditedFile();
};

// Reads `path` into `f`; the reason it cannot be edited, else nothing.
std::optional<std::string> read_for_edit(const std::string& path, EditedFile& f);
// Replaces `path` (read into `f`) with `text`; the reason it failed, else nothing.
std::optional<std::string> replace_edited(const std::string& path, const EditedFile& f,
                                          const std::string& text);
// Creates `path`, which must not exist, with `text` and `mode` (a temporary file renamed
// into place without replacing anything).
std::optional<std::string> create_new(const std::string& path, const std::string& text,
                                      mode_t mode);

}  // namespace whfs::cli
