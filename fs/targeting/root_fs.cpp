#include "fs/targeting/root_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "fs/common/text.h"

namespace whfs::target {
namespace {

constexpr int kMaxLinks = 40;

std::vector<std::string> split(const std::string& path) {
  std::vector<std::string> parts;
  for (const auto p : split_nonempty(path, '/')) parts.emplace_back(p);
  return parts;
}

FileStamp stamp_of(const struct stat& st) {
  return FileStamp{st.st_dev, st.st_ino,
                   std::int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec,
                   std::int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec,
                   static_cast<std::uint64_t>(st.st_size)};
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

long system_openat2(int dirfd, const char* path, void* how, std::size_t size) {
  return ::syscall(SYS_openat2, dirfd, path, how, size);
}

std::atomic<Openat2Fn> g_openat2{nullptr};
std::atomic<bool> g_no_openat2{false};  // ENOSYS seen: the kernel or a filter lacks it for good
std::atomic<bool> g_said{false};        // the fallback was logged

// Whether openat2's error `err` means the call itself is refused: then walk instead.
bool refused_call(int err) {
  if (err == ENOSYS) g_no_openat2.store(true, std::memory_order_relaxed);
  if (err != ENOSYS && err != EPERM) return false;
  if (!g_said.exchange(true)) {
    spdlog::info("openat2(2) fails with {} here: a caller's paths are walked one name at a time",
                 err == ENOSYS ? "ENOSYS" : "EPERM");
  }
  return true;
}

}  // namespace

void set_openat2_for_testing(Openat2Fn fn) {
  g_openat2 = fn;
  g_no_openat2 = false;
}

std::string normalize_path(const std::string& path) {
  std::vector<std::string> out;
  for (auto& p : split(path)) {
    if (p == ".") continue;
    if (p == "..") {
      if (!out.empty()) out.pop_back();
      continue;
    }
    out.push_back(std::move(p));
  }
  std::string s;
  for (const auto& p : out) s += "/" + p;
  return s.empty() ? "/" : s;
}

std::string parent_of(const std::string& path) {
  const std::string n = normalize_path(path);
  const auto slash = n.rfind('/');
  return slash == 0 ? "/" : n.substr(0, slash);
}

Expected<RootFs, std::string> RootFs::open(const std::string& root, std::optional<dev_t> refused) {
  const int fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return unexpected("cannot open " + root + ": " + std::strerror(errno));
  RootFs r(fd, refused);
  if (r.refused(fd)) return unexpected("its root directory lies inside this mount (not read)");
  return r;
}

RootFs::~RootFs() {
  if (fd_ >= 0) ::close(fd_);
}

RootFs::RootFs(RootFs&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      refused_(other.refused_),
      met_refused_(other.met_refused_) {}

RootFs& RootFs::operator=(RootFs&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    refused_ = other.refused_;
    met_refused_ = other.met_refused_;
  }
  return *this;
}

// The filesystem of an fd from what the kernel already knows (AT_STATX_DONT_SYNC): asking a
// FUSE filesystem for fresh attributes would be a request to it, the very thing avoided here.
bool RootFs::refused(int fd) const {
  if (!refused_) return false;
  struct statx stx {};
  if (::statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC, STATX_TYPE, &stx) !=
      0) {
    return true;  // what cannot be told apart is not followed
  }
  if (makedev(stx.stx_dev_major, stx.stx_dev_minor) != *refused_) return false;
  met_refused_ = true;
  return true;
}

int RootFs::open_in(const std::string& path, int flags, bool follow_last) const {
  if (fd_ < 0) return -1;
  if (g_no_openat2.load(std::memory_order_relaxed)) return walk_in(path, flags, follow_last);
  std::string rel = normalize_path(path).substr(1);
  if (rel.empty()) rel = ".";
  open_how how{};
  how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC | (follow_last ? 0 : O_NOFOLLOW));
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  // Without a refused filesystem, or on the root's own one (no mount point crossed: the
  // common case, one system call), the kernel resolves the whole path.
  if (refused_) how.resolve |= RESOLVE_NO_XDEV;
  const Openat2Fn call = g_openat2.load();
  const long fd = (call != nullptr ? call : system_openat2)(fd_, rel.c_str(), &how, sizeof how);
  if (fd >= 0) return static_cast<int>(fd);
  if ((refused_ && errno == EXDEV) || refused_call(errno)) return walk_in(path, flags, follow_last);
  return -1;
}

int RootFs::walk_in(const std::string& path, int flags, bool follow_last) const {
  // The folders walked so far, from the root (stack[0], not owned) down.
  std::vector<int> stack{fd_};
  const auto close_all = [&] {
    for (std::size_t i = 1; i < stack.size(); ++i) ::close(stack[i]);
    stack.resize(1);
  };
  std::vector<std::string> todo = split(normalize_path(path));
  std::reverse(todo.begin(), todo.end());  // a stack: the next component at the back
  int links = 0;
  while (!todo.empty()) {
    const std::string name = std::move(todo.back());
    todo.pop_back();
    if (name == "." || name.empty()) continue;
    if (name == "..") {  // in the root: never above it
      if (stack.size() > 1) {
        ::close(stack.back());
        stack.pop_back();
      }
      continue;
    }
    // One name in a folder already checked: crossing into a mount here reaches that mount's
    // root, and asks nothing of its filesystem.
    const int fd = ::openat(stack.back(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || refused(fd)) {
      const int err = fd < 0 ? errno : EXDEV;
      if (fd >= 0) ::close(fd);
      close_all();
      errno = err;
      return -1;
    }
    struct statx stx {};
    const bool is_link = ::statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC,
                                 STATX_TYPE, &stx) == 0 &&
                         S_ISLNK(stx.stx_mode);
    if (is_link && (!todo.empty() || follow_last)) {
      char buf[4096];
      const ssize_t n = ::readlinkat(fd, "", buf, sizeof buf - 1);
      ::close(fd);
      if (n <= 0 || ++links > kMaxLinks) {
        close_all();
        errno = ELOOP;
        return -1;
      }
      const std::string target(buf, static_cast<std::size_t>(n));
      if (target.front() == '/') close_all();
      auto more = split(target);
      todo.insert(todo.end(), more.rbegin(), more.rend());
      continue;
    }
    stack.push_back(fd);
  }
  // The O_PATH fd of what was found (stack[0]: the root itself), or that very file opened
  // again through it, whatever was renamed since.
  const int last = stack.back();
  const std::string self = "/proc/thread-self/fd/" + std::to_string(last);
  const int out = (flags & O_PATH) != 0 ? ::fcntl(last, F_DUPFD_CLOEXEC, 0)
                                        : ::open(self.c_str(), (flags & ~O_NOFOLLOW) | O_CLOEXEC);
  const int err = errno;
  close_all();
  errno = err;
  return out;
}

std::optional<std::string> RootFs::read_file(const std::string& path, std::size_t max) const {
  Fd fd(open_in(path, O_RDONLY | O_NONBLOCK | O_NOCTTY, true));
  if (!fd.ok()) return std::nullopt;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::uint64_t>(st.st_size) > max) {
    return std::nullopt;
  }
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

std::optional<std::string> RootFs::read_head(const std::string& path, std::size_t n) const {
  Fd fd(open_in(path, O_RDONLY | O_NONBLOCK | O_NOCTTY, true));
  struct stat st {};
  if (!fd.ok() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  std::string out(n, '\0');
  const ssize_t got = ::pread(fd.get(), out.data(), n, 0);
  if (got < 0) return std::nullopt;
  out.resize(static_cast<std::size_t>(got));
  return out;
}

std::optional<FileStamp> RootFs::stamp(const std::string& path) const {
  Fd fd(open_in(path, O_PATH, true));
  struct stat st {};
  if (!fd.ok() || ::fstat(fd.get(), &st) != 0) return std::nullopt;
  return stamp_of(st);
}

bool RootFs::is_dir(const std::string& path) const {
  Fd fd(open_in(path, O_PATH, true));
  struct stat st {};
  return fd.ok() && ::fstat(fd.get(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool RootFs::is_executable_file(const std::string& path) const {
  Fd fd(open_in(path, O_PATH, true));
  struct stat st {};
  return fd.ok() && ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111);
}

std::optional<std::string> RootFs::resolve(const std::string& path) const {
  std::vector<std::string> todo = split(normalize_path(path));
  std::string done;  // resolved so far ("" = the root)
  int links = 0;
  for (std::size_t i = 0; i < todo.size(); ++i) {
    const std::string& name = todo[i];
    if (name == ".") continue;
    if (name == "..") {
      const auto slash = done.rfind('/');
      done = slash == std::string::npos ? "" : done.substr(0, slash);
      continue;
    }
    const std::string candidate = done + "/" + name;
    Fd fd(open_in(candidate, O_PATH, false));
    struct stat st {};
    if (!fd.ok() || ::fstat(fd.get(), &st) != 0) return std::nullopt;
    if (!S_ISLNK(st.st_mode)) {
      done = candidate;
      continue;
    }
    if (++links > kMaxLinks) return std::nullopt;
    char buf[4096];
    const ssize_t n = ::readlinkat(fd.get(), "", buf, sizeof buf - 1);
    if (n <= 0) return std::nullopt;
    const std::string target(buf, static_cast<std::size_t>(n));
    std::vector<std::string> rest(todo.begin() + static_cast<std::ptrdiff_t>(i) + 1, todo.end());
    std::vector<std::string> next = split(target);
    if (target.front() == '/') done.clear();
    next.insert(next.end(), rest.begin(), rest.end());
    todo = std::move(next);
    i = static_cast<std::size_t>(-1);  // start over on the new list
  }
  return done.empty() ? "/" : done;
}

std::vector<std::string> RootFs::list(const std::string& dir) const {
  std::vector<std::string> out;
  const int fd = open_in(dir, O_RDONLY | O_DIRECTORY, true);
  if (fd < 0) return out;
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return out;
  }
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  ::closedir(d);
  return out;
}

FileStamp RootFs::root_stamp() const {
  struct stat st {};
  if (fd_ < 0 || ::fstat(fd_, &st) != 0) return {};
  return stamp_of(st);
}

}  // namespace whfs::target
