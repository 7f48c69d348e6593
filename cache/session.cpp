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

Recorded read_recorded(const fs::path& dir) {
  std::ifstream in(dir / "session");
  std::string magic, boot, state;
  Recorded r;
  if (!(in >> magic >> boot >> state) || magic != kMagic) return r;
  r.boot = boot;
  if (state == "open") r.state = State::kOpen;
  if (state == "clean") r.state = State::kClean;
  if (state == "suspect") r.state = State::kSuspect;
  return r;
}

// Atomic and durable: a power loss leaves the old or the new record, never a torn one.
Result<void> write_recorded(const fs::path& dir, const std::string& boot, State state,
                            const DirAccess& access) {
  const fs::path tmp = dir / "session.tmp";
  const std::string text =
      std::string(kMagic) + " " + (boot.empty() ? "-" : boot) + " " + state_name(state) + "\n";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, file_mode(access));
  if (fd < 0) return io_error("open " + tmp.string(), errno);
  if (access.group) (void)::fchown(fd, -1, *access.group);
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return io_error("write " + tmp.string(), err);
  if (::rename(tmp.c_str(), (dir / "session").c_str()) != 0) {
    return io_error("rename " + tmp.string(), errno);
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
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
  if (auto ok = prepare_cache_dir(config.dir, config.access); !ok) return unexpected(ok.error());
  const fs::path lock_path = config.dir / "session.lock";
  const auto deadline = std::chrono::steady_clock::now() + config.open_timeout;
  std::error_code ec;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const int fd =
        ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, file_mode(config.access));
    if (fd < 0) return io_error("open " + lock_path.string(), errno);
    restrict_cache_file(lock_path, config.access);
    if (int err = gate_lock(fd, deadline); err != 0) {
      ::close(fd);
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
    if (::fstat(fd, &held) == 0 && ::stat(lock_path.c_str(), &now) == 0 &&
        held.st_dev == now.st_dev && held.st_ino == now.st_ino) {
      Session s;
      s.config_ = config;
      s.lock_fd_ = fd;
      s.locks_ = std::make_unique<Locks>(fd);
      s.boot_id_ = read_boot_id(config.boot_id_file);
      const Recorded rec = read_recorded(config.dir);
      const bool has_data = fs::file_size(config.dir / "data.mdb", ec) > 0 && !ec;
      const bool rebooted = rec.boot != s.boot_id_ || s.boot_id_.empty();
      s.needs_check_ = has_data && (rec.state == State::kUnknown || rec.state == State::kSuspect ||
                                    (rec.state == State::kOpen && rebooted));
      return s;
    }
    ::close(fd);
    if (auto ok = prepare_cache_dir(config.dir, config.access); !ok) {
      return unexpected(ok.error());
    }
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

Result<void> Session::remove_files(const fs::path& dir) {
  if (!fs::exists(dir / "session.lock")) {
    std::error_code ec;
    fs::remove(dir / "data.mdb", ec);
    fs::remove(dir / "lock.mdb", ec);
    return {};
  }
  auto s = acquire(
      {dir, "/dev/null", std::chrono::seconds(0), DirAccess{}, std::chrono::milliseconds(10000)});
  if (!s) return Unexpected<CacheError>{s.error()};
  if (ofd_lock(s->lock_fd_, F_WRLCK, kUsersByte, false) != 0) {
    return cache_error(CacheError::Kind::kIo,
                       "cache " + dir.string() + " is in use by another process");
  }
  for (const char* name :
       {"data.mdb", "lock.mdb", "session", "session.tmp", "downloads.lock", "session.lock"}) {
    std::error_code ec;
    fs::remove(dir / name, ec);
    if (ec)
      return cache_error(CacheError::Kind::kIo,
                         "remove " + (dir / name).string() + ": " + ec.message());
  }
  return {};
}

Session::~Session() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Session::Session(Session&& other) noexcept
    : config_(std::move(other.config_)),
      boot_id_(std::move(other.boot_id_)),
      lock_fd_(std::exchange(other.lock_fd_, -1)),
      needs_check_(other.needs_check_),
      locks_(std::move(other.locks_)) {}

Session& Session::operator=(Session&& other) noexcept {
  if (this != &other) {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    config_ = std::move(other.config_);
    boot_id_ = std::move(other.boot_id_);
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
    // A mount point (or a parent we may not write) cannot be renamed: move the files instead.
    const fs::path inside = dir / ("corrupt-" + ts);
    fs::create_directories(inside, ec);
    for (const char* name : {"data.mdb", "lock.mdb", "session"}) {
      std::error_code ignored;
      fs::rename(dir / name, inside / name, ignored);
    }
    if (ec || fs::exists(dir / "data.mdb")) {
      return cache_error(CacheError::Kind::kIo,
                         "cannot move the damaged cache " + dir.string() + " aside");
    }
    spdlog::warn("cache: {} was damaged ({}); moved its files to {} and started an empty cache",
                 dir.string(), why, inside.string());
  }
  ::close(std::exchange(lock_fd_, -1));
  return {};
}

Result<void> Session::mark_open() {
  if (lock_fd_ < 0) return {};  // read-only
  if (auto r = write_recorded(config_.dir, boot_id_, State::kOpen, config_.access); !r) return r;
  if (int err = ofd_lock(lock_fd_, F_RDLCK, kUsersByte, true); err != 0) {
    return io_error("lock session users", err);
  }
  ofd_lock(lock_fd_, F_UNLCK, kGateByte, false);
  return {};
}

void Session::mark_suspect() {
  if (lock_fd_ < 0 || ofd_lock(lock_fd_, F_WRLCK, kGateByte, true) != 0) return;
  (void)write_recorded(config_.dir, boot_id_, State::kSuspect, config_.access);
  ofd_lock(lock_fd_, F_UNLCK, kGateByte, false);
}

void Session::close_clean() {
  if (lock_fd_ < 0) return;
  if (ofd_lock(lock_fd_, F_WRLCK, kGateByte, true) == 0 &&
      ofd_lock(lock_fd_, F_WRLCK, kUsersByte, false) == 0 &&
      read_recorded(config_.dir).state != State::kSuspect) {
    // Only this process uses the store and its writes are synced.
    (void)write_recorded(config_.dir, boot_id_, State::kClean, config_.access);
  }
  ::close(std::exchange(lock_fd_, -1));
}

}  // namespace whfs::cache
