#pragma once
// The one copy of a wheel that `publish` checks and uploads: the file stays open from the
// check to the upload, so the bytes sent are the bytes checked. A rename over its path changes
// nothing (the open file is the one checked); a write into it changes its size or mtime (which
// only the file's owner can set back), and is refused before each upload and before the
// commit.

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "fs/common/expected.h"

namespace whfs::check {

class CheckedFile {
 public:
  // A regular file, opened for reading; the error says why not.
  static Expected<std::shared_ptr<const CheckedFile>, std::string> open(
      const std::filesystem::path& path);
  ~CheckedFile();
  CheckedFile(const CheckedFile&) = delete;
  CheckedFile& operator=(const CheckedFile&) = delete;

  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // "" while the file is as it was opened; else one line saying that it changed.
  std::string changed() const;

 private:
  CheckedFile(int fd, std::filesystem::path path, std::uint64_t size, std::int64_t mtime_ns)
      : fd_(fd), path_(std::move(path)), size_(size), mtime_ns_(mtime_ns) {}

  int fd_;
  std::filesystem::path path_;
  std::uint64_t size_;
  std::int64_t mtime_ns_;
};

}  // namespace whfs::check
