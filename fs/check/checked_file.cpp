#include "fs/check/checked_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <system_error>

namespace whfs::check {
namespace {

std::int64_t ns_of(const struct timespec& t) {
  return std::int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

}  // namespace

Expected<std::shared_ptr<const CheckedFile>, std::string> CheckedFile::open(
    const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    return unexpected("cannot open it: " +
                      std::error_code(errno, std::generic_category()).message());
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return unexpected(std::string("not a regular file"));
  }
  return std::shared_ptr<const CheckedFile>(
      new CheckedFile(fd, path, static_cast<std::uint64_t>(st.st_size), ns_of(st.st_mtim)));
}

CheckedFile::~CheckedFile() { ::close(fd_); }

std::string CheckedFile::changed() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return path_.string() + ": cannot look at it any more";
  if (static_cast<std::uint64_t>(st.st_size) != size_ || ns_of(st.st_mtim) != mtime_ns_) {
    return path_.string() + ": it changed after it was checked; not published (check again)";
  }
  return "";
}

}  // namespace whfs::check
