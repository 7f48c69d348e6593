#include "tools/cli/file_replace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <vector>

namespace whfs::cli {
namespace {

std::string describe_errno(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

void copy_xattrs(int from, int to) {
  std::vector<char> names(65536);
  const ssize_t n = ::flistxattr(from, names.data(), names.size());
  if (n <= 0) return;
  std::vector<char> value(65536);
  for (ssize_t i = 0; i < n; i += static_cast<ssize_t>(std::strlen(names.data() + i)) + 1) {
    const char* name = names.data() + i;
    const ssize_t v = ::fgetxattr(from, name, value.data(), value.size());
    if (v >= 0) ::fsetxattr(to, name, value.data(), static_cast<std::size_t>(v), 0);
  }
}

// Writes `text` to a temporary file beside `path`, lets `prepare` set its owner, mode and
// attributes, syncs it, then has `place` move it to `path` (0, or errno); the reason it failed,
// else nothing. The folder is synced after.
std::optional<std::string> write_beside(
    const std::string& path, const std::string& text,
    const std::function<std::optional<std::string>(int)>& prepare,
    const std::function<int(const std::string&)>& place) {
  const std::filesystem::path p(path);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  std::string tmp = dir + "/." + p.filename().string() + ".wheelhouse-XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return describe_errno(path + ": a file beside it", errno);
  // what: the step that failed (with errno's text), or the whole message (errno 0).
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return err == 0 ? path + ": " + what : describe_errno(path + ": " + what, err);
  };
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write", errno);
    done += static_cast<std::size_t>(n);
  }
  if (auto bad = prepare(fd)) return fail(*bad, errno);
  if (::fsync(fd) != 0) return fail("fsync", errno);
  if (const int err = place(tmp); err != 0) {
    return err < 0 ? fail("changed while being edited; run again", 0)
                   : fail(err == EEXIST ? "created meanwhile by another; run again" : "rename",
                          err == EEXIST ? 0 : err);
  }
  ::close(fd);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return std::nullopt;
}

}  // namespace

EditedFile::~EditedFile() {
  if (fd >= 0) ::close(fd);
}

// A symbolic link is refused (the file it leads to may be anyone's, and a rename would replace
// the link), as is a file with hard links (a rename would split them).
std::optional<std::string> read_for_edit(const std::string& path, EditedFile& f) {
  struct stat ls {};
  if (::lstat(path.c_str(), &ls) != 0) return describe_errno(path, errno);
  if (S_ISLNK(ls.st_mode)) {
    std::error_code ec;
    const auto to = std::filesystem::read_symlink(path, ec);
    return path + ": a symbolic link (to " + (ec ? std::string("?") : to.string()) +
           "): name the file itself";
  }
  if (!S_ISREG(ls.st_mode)) return path + ": not a regular file";
  if (ls.st_nlink > 1) {
    return path + ": has " + std::to_string(ls.st_nlink) +
           " hard links, which replacing it would split: edit it by hand";
  }
  f.fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (f.fd < 0) return describe_errno(path, errno);
  if (::fstat(f.fd, &f.st) != 0) return describe_errno(path, errno);
  if (f.st.st_dev != ls.st_dev || f.st.st_ino != ls.st_ino) {
    return path + ": replaced while being read; run again";
  }
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return describe_errno(path, errno);
    if (n == 0) break;
    f.text.append(buf, static_cast<std::size_t>(n));
  }
  return std::nullopt;
}

std::optional<std::string> replace_edited(const std::string& path, const EditedFile& f,
                                          const std::string& text) {
  return write_beside(
      path, text,
      [&](int fd) -> std::optional<std::string> {
        if (::fchown(fd, f.st.st_uid, f.st.st_gid) != 0) return "keep its owner";
        copy_xattrs(f.fd, fd);
        if (::fchmod(fd, f.st.st_mode & 07777) != 0) return "keep its mode";
        return std::nullopt;
      },
      [&](const std::string& tmp) {
        // Someone else's edit since it was read is not overwritten.
        struct stat now {};
        if (::lstat(path.c_str(), &now) != 0 || now.st_dev != f.st.st_dev ||
            now.st_ino != f.st.st_ino || now.st_size != f.st.st_size ||
            now.st_mtim.tv_sec != f.st.st_mtim.tv_sec ||
            now.st_mtim.tv_nsec != f.st.st_mtim.tv_nsec) {
          return -1;
        }
        return ::rename(tmp.c_str(), path.c_str()) == 0 ? 0 : errno;
      });
}

std::optional<std::string> create_new(const std::string& path, const std::string& text,
                                      mode_t mode) {
  return write_beside(
      path, text,
      [&](int fd) -> std::optional<std::string> {
        if (::fchmod(fd, mode) != 0) return "set its mode";
        return std::nullopt;
      },
      [&](const std::string& tmp) {
        return ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0
                   ? 0
                   : errno;
      });
}

}  // namespace whfs::cli
