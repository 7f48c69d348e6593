#include "cache/session.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "cache/lmdb.h"

namespace whfs::cache {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMagic = "wheelhouse-fs-session/1";
constexpr off_t kGateByte = 0;
constexpr off_t kUsersByte = 1;

enum class State { kUnknown, kOpen, kClean, kSuspect };

struct Recorded {
  State state = State::kUnknown;
  std::string boot;
};

const char* state_name(State s) {
  switch (s) {
    case State::kOpen:
      return "open";
    case State::kClean:
      return "clean";
    case State::kSuspect:
      return "suspect";
    case State::kUnknown:
      break;
  }
  return "unknown";
}

// OFD locks belong to the open file description, so two caches in one process do not share
// them (unlike POSIX record locks) and they vanish when a process dies.
int ofd_lock(int fd, short type, off_t byte, bool wait) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = byte;
  fl.l_len = 1;
  while (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

Unexpected<CacheError> io_error(const std::string& what, int err) {
  return cache_error(CacheError::Kind::kIo, what + ": " + std::strerror(err));
}

// The record of `dir_fd` (absent or unreadable: kUnknown); a name that is not a regular file
// with one link is refused (dir_policy.h), never followed or waited on.
Result<Recorded> read_recorded(int dir_fd, const fs::path& dir, const DirAccess& access) {
  auto fd = open_cache_file(dir_fd, dir, "session", O_RDONLY, access);
  if (!fd) return unexpected(fd.error());
  Recorded r;
  if (!*fd) return r;
  char buf[512];
  const ssize_t n = ::read(fd->get(), buf, sizeof buf);
  if (n <= 0) return r;
  std::istringstream in(std::string(buf, static_cast<std::size_t>(n)));
  std::string magic, boot, state;
  if (!(in >> magic >> boot >> state) || magic != kMagic) return r;
  r.boot = boot;
  if (state == "open") r.state = State::kOpen;
  if (state == "clean") r.state = State::kClean;
  if (state == "suspect") r.state = State::kSuspect;
  return r;
}

// The record padded to one fixed size, for rewriting it in place.
constexpr std::size_t kRecordSize = 128;

// In a sticky shared directory a process may not replace (rename over) a record that another
// user's process wrote: it rewrites that file in place, one write of one small block (which
// a power loss does not tear on any disk we know of), padded so that no truncation is needed.
Result<void> rewrite_in_place(int dir_fd, const fs::path& dir, std::string text,
                              const DirAccess& access) {
  auto fd = open_cache_file(dir_fd, dir, "session", O_WRONLY, access);
  if (!fd) return unexpected(fd.error());
  if (!*fd) return io_error("replace " + (dir / "session").string(), EPERM);
  text.pop_back();  // the newline goes last
  text.resize(kRecordSize - 1, ' ');
  text += '\n';
  if (::pwrite(fd->get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
      ::ftruncate(fd->get(), static_cast<off_t>(text.size())) != 0 || ::fsync(fd->get()) != 0) {
    return io_error("write " + (dir / "session").string(), errno);
  }
  return {};
}

// Atomic and durable: a power loss leaves the old or the new record, never a torn one. The
// temporary file is always a new one (O_EXCL, whatever had its name removed first: never
// truncated or written through a name someone else put there) and is renamed in the directory.
Result<void> write_recorded(int dir_fd, const fs::path& dir, const std::string& boot, State state,
                            const DirAccess& access) {
  constexpr const char* kTmp = "session.tmp";
  const fs::path tmp = dir / kTmp;
  const std::string text =
      std::string(kMagic) + " " + (boot.empty() ? "-" : boot) + " " + state_name(state) + "\n";
  int gone = ::unlinkat(dir_fd, kTmp, 0) == 0 ? 0 : errno;
  if (gone == EISDIR) gone = ::unlinkat(dir_fd, kTmp, AT_REMOVEDIR) == 0 ? 0 : errno;
  if (gone == EPERM || gone == EACCES) {
    return rewrite_in_place(dir_fd, dir, text, access);  // another user's, in a sticky dir
  }
  if (gone == ENOTEMPTY || gone == EEXIST) {
    return cache_error(CacheError::Kind::kAccess,
                       "cache directory " + dir.string() +
                           " holds session.tmp, which is a directory, not a file of the cache: "
                           "refused; remove it");
  }
  if (gone != 0 && gone != ENOENT) return io_error("remove " + tmp.string(), gone);
  const int raw = ::openat(dir_fd, kTmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                           file_mode(access));
  if (raw < 0) return io_error("create " + tmp.string(), errno);
  UniqueFd fd(raw);
  if (access.group) (void)::fchown(fd.get(), -1, *access.group);
  (void)::fchmod(fd.get(), file_mode(access));  // whatever the umask
  const bool ok =
      ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
      ::fsync(fd.get()) == 0;
  const int err = errno;
  fd.reset();
  if (!ok) {
    (void)::unlinkat(dir_fd, kTmp, 0);
    return io_error("write " + tmp.string(), err);
  }
  if (::renameat(dir_fd, kTmp, dir_fd, "session") != 0) {
    const int rerr = errno;
    (void)::unlinkat(dir_fd, kTmp, 0);
    if (rerr == EPERM || rerr == EACCES) return rewrite_in_place(dir_fd, dir, text, access);
    if (rerr == EISDIR || rerr == ENOTEMPTY || rerr == EEXIST) {
      return cache_error(CacheError::Kind::kAccess,
                         "cache directory " + dir.string() +
                             " holds session, which is a directory, not a file of the cache: "
                             "refused; remove it");
    }
    return io_error("rename " + tmp.string(), rerr);
  }
  ::fsync(dir_fd);
  return {};
}

std::string timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// Touches every page LMDB hands out, so a page past the end of a truncated file faults here.
bool touch(lmdb::Bytes b) {
  if (b.empty()) return true;
  volatile std::byte first = b.front();
  volatile std::byte last = b.back();
  (void)first;
  (void)last;
  return true;
}

bool traverse(const lmdb::Txn& txn, lmdb::Dbi dbi) {
  auto cur = lmdb::Cursor::open(txn, dbi);
  if (!cur) return false;
  for (auto e = cur->first();; e = cur->next()) {
    if (!e) return false;
    if (!*e) return true;
    touch((*e)->key);
    touch((*e)->value);
  }
}

// Runs in the forked child: a full cursor traversal of the free list, the main DB and every
// named DB. LMDB reports what it can tell (MDB_CORRUPTED, MDB_PAGE_NOTFOUND, MDB_INVALID...);
// what it cannot tell may crash the child, which the parent also reads as damage.
bool structure_ok(const fs::path& dir) {
  auto env = lmdb::Env::open(
      dir.string(),
      {.map_size = 0, .max_dbs = 64, .max_readers = 126, .flags = MDB_RDONLY | MDB_NOTLS});
  if (!env) return false;
  auto txn = lmdb::Txn::begin(*env, MDB_RDONLY);
  if (!txn) return false;
  auto main_db = txn->open_dbi(nullptr, 0);  // sets up the main DB's key compare
  if (!main_db) return false;
  if (!traverse(*txn, lmdb::Dbi{0}) || !traverse(*txn, *main_db)) return false;  // 0: free list
  auto cur = lmdb::Cursor::open(*txn, *main_db);
  if (!cur) return false;
  for (auto e = cur->first();; e = cur->next()) {
    if (!e) return false;
    if (!*e) return true;
    const std::string name(lmdb::as_chars((*e)->key));
    auto dbi = txn->open_dbi(name.c_str(), 0);
    if (!dbi) {
      if (dbi.error().code == MDB_INCOMPATIBLE) continue;  // a plain key, not a DB
      return false;
    }
    if (!traverse(*txn, *dbi)) return false;
  }
}

}  // namespace

std::string read_boot_id(const fs::path& file) {
  std::ifstream in(file);
  std::string id;
  in >> id;
  return id;
}

// Waits for byte 0 until the deadline (polling: F_OFD_SETLKW takes no deadline).
int gate_lock(int fd, std::chrono::steady_clock::time_point deadline) {
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    const int err = ofd_lock(fd, F_WRLCK, kGateByte, false);
    if (err != EAGAIN && err != EACCES) return err;
    if (std::chrono::steady_clock::now() + pause >= deadline) return EAGAIN;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

Result<Session> Session::acquire(const Config& config) {
  auto dir_fd = prepare_cache_dir(config.dir, config.access);
  if (!dir_fd) return unexpected(dir_fd.error());
  const fs::path lock_path = config.dir / "session.lock";
  const auto deadline = std::chrono::steady_clock::now() + config.open_timeout;
  for (int attempt = 0; attempt < 10; ++attempt) {
    auto lock =
        open_cache_file(dir_fd->get(), config.dir, "session.lock", O_RDWR | O_CREAT, config.access);
    if (!lock) return unexpected(lock.error());
    const int fd = lock->get();
    if (int err = gate_lock(fd, deadline); err != 0) {
      if (err == EAGAIN) {
        return cache_error(CacheError::Kind::kBusy,
                           "cache " + config.dir.string() +
                               ": another process has been opening "
                               "or closing it for more than " +
                               std::to_string(config.open_timeout.count()) +
                               " ms (stopped?); not waiting longer");
      }
      return io_error("lock " + lock_path.string(), err);
    }
    // The directory may have been moved aside while we waited: use the file that is there now.
    struct stat held {
    }, now{};
    if (::fstat(fd, &held) == 0 && ::lstat(lock_path.c_str(), &now) == 0 &&
        held.st_dev == now.st_dev && held.st_ino == now.st_ino) {
      Session s;
      s.config_ = config;
      s.dir_fd_ = std::move(*dir_fd);
      s.lock_fd_ = lock->release();
      s.locks_ = std::make_unique<Locks>(fd);
      s.boot_id_ = read_boot_id(config.boot_id_file);
      auto rec = read_recorded(s.dir_fd(), config.dir, config.access);
      if (!rec) return unexpected(rec.error());
      struct stat data {};
      auto has_data = check_cache_entry(s.dir_fd(), config.dir, "data.mdb", &data);
      if (!has_data) return unexpected(has_data.error());
      const bool rebooted = rec->boot != s.boot_id_ || s.boot_id_.empty();
      s.needs_check_ = *has_data && data.st_size > 0 &&
                       (rec->state == State::kUnknown || rec->state == State::kSuspect ||
                        (rec->state == State::kOpen && rebooted));
      return s;
    }
    lock->reset();
    dir_fd = prepare_cache_dir(config.dir, config.access);
    if (!dir_fd) return unexpected(dir_fd.error());
  }
  return cache_error(CacheError::Kind::kIo, "cannot lock " + lock_path.string());
}

bool Session::in_use_by_others() const {
  if (lock_fd_ < 0) return false;
  // Every user share-locks byte 1; this process does not yet (it joins in mark_open()).
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = kUsersByte;
  fl.l_len = 1;
  return ::fcntl(lock_fd_, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

Session Session::read_only(const fs::path& dir) {
  Session s;
  s.config_.dir = dir;
  s.locks_ = std::make_unique<Locks>(-1);
  return s;
}

Result<void> Session::remove_files(const fs::path& dir, const DirAccess& access) {
  struct stat st {};
  if (::lstat((dir / "session.lock").c_str(), &st) != 0) {
    std::error_code ec;
    fs::remove(dir / "data.mdb", ec);  // (unlink: a link is removed, never followed)
    fs::remove(dir / "lock.mdb", ec);
    return {};
  }
  auto s = acquire(
      {dir, "/dev/null", std::chrono::seconds(0), access, std::chrono::milliseconds(10000)});
  if (!s) return Unexpected<CacheError>{s.error()};
  if (ofd_lock(s->lock_fd_, F_WRLCK, kUsersByte, false) != 0) {
    return cache_error(CacheError::Kind::kIo,
                       "cache " + dir.string() + " is in use by another process");
  }
  for (const char* name :
       {"data.mdb", "lock.mdb", "session", "session.tmp", "downloads.lock", "session.lock"}) {
    if (::unlinkat(s->dir_fd(), name, 0) != 0 && errno != ENOENT) {
      return io_error("remove " + (dir / name).string(), errno);
    }
  }
  return {};
}

Session::~Session() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Session::Session(Session&& other) noexcept
    : config_(std::move(other.config_)),
      boot_id_(std::move(other.boot_id_)),
      dir_fd_(std::move(other.dir_fd_)),
      lock_fd_(std::exchange(other.lock_fd_, -1)),
      needs_check_(other.needs_check_),
      locks_(std::move(other.locks_)) {}

Session& Session::operator=(Session&& other) noexcept {
  if (this != &other) {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    config_ = std::move(other.config_);
    boot_id_ = std::move(other.boot_id_);
    dir_fd_ = std::move(other.dir_fd_);
    lock_fd_ = std::exchange(other.lock_fd_, -1);
    needs_check_ = other.needs_check_;
    locks_ = std::move(other.locks_);
  }
  return *this;
}

bool Session::check_store() const {
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    // A fault on a garbage page is an expected outcome here, not a bug to report (sanitizers
    // install handlers that would).
    ::signal(SIGSEGV, SIG_DFL);
    ::signal(SIGBUS, SIG_DFL);
    ::_exit(structure_ok(config_.dir) ? 0 : 1);
  }
  const auto deadline = std::chrono::steady_clock::now() + config_.check_timeout;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return false;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

Result<void> Session::move_aside(const std::string& why) {
  const fs::path& dir = config_.dir;
  const std::string ts = timestamp() + "-" + std::to_string(::getpid());
  const fs::path target = dir.string() + ".corrupt-" + ts;
  std::error_code ec;
  fs::rename(dir, target, ec);
  if (!ec) {
    spdlog::warn("cache: {} was damaged ({}); moved it to {} and started an empty cache",
                 dir.string(), why, target.string());
  } else {
    // A mount point (or a parent we may not write) cannot be renamed: move the files instead,
    // into a directory made now (never one someone put there under that name, nor a link).
    const std::string sub = "corrupt-" + ts;
    const fs::path inside = dir / sub;
    auto cannot = [&](const std::string& what) {
      return cache_error(CacheError::Kind::kIo,
                         "cannot move the damaged cache " + dir.string() + " aside: " + what);
    };
    if (::mkdirat(dir_fd(), sub.c_str(), 0700) != 0) {
      return cannot("mkdir " + inside.string() + ": " + std::strerror(errno));
    }
    UniqueFd into(::openat(dir_fd(), sub.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!into || ::fstat(into.get(), &st) != 0 || st.st_uid != ::geteuid()) {
      return cannot("open " + inside.string() + ": " + std::strerror(errno));
    }
    for (const char* name : {"data.mdb", "lock.mdb", "session"}) {
      (void)::renameat(dir_fd(), name, into.get(), name);  // moves a link itself, not its target
    }
    if (::fstatat(dir_fd(), "data.mdb", &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) {
      return cannot("data.mdb is still there");
    }
    spdlog::warn("cache: {} was damaged ({}); moved its files to {} and started an empty cache",
                 dir.string(), why, inside.string());
  }
  ::close(std::exchange(lock_fd_, -1));
  return {};
}

Result<void> Session::mark_open() {
  if (lock_fd_ < 0) return {};  // read-only
  if (auto r = write_recorded(dir_fd(), config_.dir, boot_id_, State::kOpen, config_.access); !r) {
    return r;
  }
  if (int err = ofd_lock(lock_fd_, F_RDLCK, kUsersByte, true); err != 0) {
    return io_error("lock session users", err);
  }
  ofd_lock(lock_fd_, F_UNLCK, kGateByte, false);
  return {};
}

bool Session::gate_within_timeout(const char* what) {
  const int err = gate_lock(lock_fd_, std::chrono::steady_clock::now() + config_.open_timeout);
  if (err == 0) return true;
  if (err == EAGAIN) {
    spdlog::warn(
        "cache {}: another process has held its open/close gate for more than {} ms "
        "(stopped?): {} not recorded, the record is left as it is",
        config_.dir.string(), config_.open_timeout.count(), what);
  } else {
    spdlog::warn("cache {}: lock {}: {}: {} not recorded", config_.dir.string(),
                 (config_.dir / "session.lock").string(), std::strerror(err), what);
  }
  return false;
}

void Session::mark_suspect() {
  if (lock_fd_ < 0 || !gate_within_timeout("a possibly damaged store")) return;
  (void)write_recorded(dir_fd(), config_.dir, boot_id_, State::kSuspect, config_.access);
  ofd_lock(lock_fd_, F_UNLCK, kGateByte, false);
}

void Session::close_clean() {
  if (lock_fd_ < 0) return;
  if (gate_within_timeout("a clean close") && ofd_lock(lock_fd_, F_WRLCK, kUsersByte, false) == 0) {
    auto rec = read_recorded(dir_fd(), config_.dir, config_.access);
    if (rec && rec->state != State::kSuspect) {
      // Only this process uses the store and its writes are synced.
      (void)write_recorded(dir_fd(), config_.dir, boot_id_, State::kClean, config_.access);
    }
  }
  ::close(std::exchange(lock_fd_, -1));
}

}  // namespace whfs::cache
