#include "fs/targeting/hint_book.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "fs/common/hash.h"
#include "fs/targeting/caller.h"

namespace whfs::target {
namespace {

constexpr int kVersion = 1;
constexpr std::size_t kMaxFile = 32 << 20;

// `s` as a JSON string; bytes that are not UTF-8 become U+FFFD (never an exception).
std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<std::string> read_small(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || out.size() > (1 << 20)) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

// The filesystem uid of process `pid` (the fourth number of its status' Uid line).
std::optional<uid_t> read_fs_uid(pid_t pid, const std::string& proc) {
  const auto status = read_small(proc + "/" + std::to_string(pid) + "/status");
  if (!status) return std::nullopt;
  const auto at = status->find("\nUid:");
  if (at == std::string::npos) return std::nullopt;
  const char* p = status->c_str() + at + 5;
  unsigned long long v = 0;
  for (int field = 0; field < 4; ++field) {
    char* end = nullptr;
    v = std::strtoull(p, &end, 10);
    if (end == p) return std::nullopt;
    p = end;
  }
  return static_cast<uid_t>(v);
}

std::string joined(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

// The text of the daemon's own file `name` in `folder`: nullopt when there is none, an error
// when it is not a regular file of this user with no other link.
Expected<std::optional<std::string>, std::string> read_own(const OwnFolder& folder,
                                                           const std::string& name) {
  const int fd = ::openat(folder.fd(), name.c_str(),
                          O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return std::optional<std::string>();
    if (err == ELOOP) return unexpected(std::string("it is a symbolic link (not followed)"));
    return unexpected(std::string("cannot open it: ") + std::strerror(err));
  }
  std::string why = not_own_file(fd);
  struct stat st {};
  if (why.empty() && ::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) > kMaxFile) {
    why = "it is larger than " + std::to_string(kMaxFile >> 20) + " MiB";
  }
  std::string text;
  if (why.empty()) {
    char buf[16384];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) why = std::string("cannot read it: ") + std::strerror(errno);
      if (n <= 0) break;
      text.append(buf, static_cast<std::size_t>(n));
      if (text.size() > kMaxFile) {
        why = "it is larger than " + std::to_string(kMaxFile >> 20) + " MiB";
        break;
      }
    }
  }
  ::close(fd);
  if (!why.empty()) return unexpected(why);
  return std::optional<std::string>(std::move(text));
}

// Replaces `name` in `folder` with `text` (a new 0600 file renamed over it).
Expected<void, std::string> write_own(const OwnFolder& folder, const std::string& name,
                                      const std::string& text) {
  const std::string what = joined(folder.path(), name);
  if (auto ok = replaceable(folder, name, what); !ok) return ok;
  const int dfd = folder.fd();
  const std::string tmp = "." + name + ".tmp";
  ::unlinkat(dfd, tmp.c_str(), 0);
  const int fd =
      ::openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return unexpected(what + ": cannot write in its folder: " + std::strerror(errno));
  ::fchmod(fd, 0600);
  std::size_t off = 0;
  int err = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    off += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::renameat(dfd, tmp.c_str(), dfd, name.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlinkat(dfd, tmp.c_str(), 0);
    return unexpected(what + ": " + std::strerror(err));
  }
  return {};
}

Expected<void, std::string> remove_own(const OwnFolder& folder, const std::string& name) {
  const std::string what = joined(folder.path(), name);
  if (auto ok = replaceable(folder, name, what); !ok) return ok;
  if (::unlinkat(folder.fd(), name.c_str(), 0) != 0 && errno != ENOENT) {
    return unexpected(what + ": cannot remove it: " + std::strerror(errno));
  }
  return {};
}

}  // namespace

std::optional<RootId> read_root(pid_t pid, const std::string& proc) {
  struct statx st {};
  const std::string root = proc + "/" + std::to_string(pid) + "/root";
  // What the kernel knows already: a root on a FUSE filesystem (this one) is not asked.
  if (::statx(AT_FDCWD, root.c_str(), AT_STATX_DONT_SYNC, STATX_INO, &st) != 0) {
    return std::nullopt;
  }
  return RootId{static_cast<std::uint64_t>(makedev(st.stx_dev_major, st.stx_dev_minor)),
                st.stx_ino};
}

bool still_running(const Hint& hint, const std::string& proc) {
  if (hint.pid <= 0) return false;
  const auto identity = read_identity(hint.pid, proc);
  if (!identity || identity->start_time != hint.start_time) return false;
  const auto uid = read_fs_uid(hint.pid, proc);
  if (!uid || *uid != hint.uid) return false;
  const auto root = read_root(hint.pid, proc);
  return root && *root == hint.root;
}

Expected<Hint, std::string> hint_for_parent(pid_t pid, uid_t uid, const std::string& proc) {
  if (pid <= 0) return unexpected(std::string("the kernel did not name the process"));
  const auto child = read_caller(pid, proc);
  if (!child) return unexpected(child.error());
  if (child->credentials.uid != uid) {
    return unexpected(std::string("the process's user is not the one that asked"));
  }
  const auto parent_pid = read_parent(pid, proc);
  if (!parent_pid) return unexpected(std::string("no parent process"));
  const auto parent = read_caller(*parent_pid, proc);
  const auto identity = read_identity(*parent_pid, proc);
  if (!parent || !identity) return unexpected(std::string("the parent process is gone"));
  // Only one's own processes, in the same world: a hint never names what another user runs.
  if (parent->credentials.uid != child->credentials.uid) {
    return unexpected("the parent process belongs to user " +
                      std::to_string(parent->credentials.uid) + ", not " +
                      std::to_string(child->credentials.uid));
  }
  if (parent->own_root != child->own_root) {
    return unexpected(std::string("the parent process has another root"));
  }
  const auto root = read_root(*parent_pid, proc);
  if (!root || (!parent->own_root && root != read_root(pid, proc))) {
    return unexpected(std::string("the parent process has another root"));
  }
  return Hint{*parent_pid,
              identity->start_time,
              uid,
              *root,
              child->env,
              child->cwd,
              child->exe_name,
              std::chrono::system_clock::now()};
}

std::string hints_to_text(const std::string& mountpoint, const std::string& boot,
                          const std::vector<Hint>& hints) {
  std::string out = "{\"version\":" + std::to_string(kVersion) +
                    ",\"mountpoint\":" + json_text(mountpoint) + ",\"boot\":" + json_text(boot) +
                    ",\"hints\":[";
  bool first = true;
  for (const auto& h : hints) {
    std::size_t bytes = h.cwd.size();
    for (const auto& [k, v] : h.env) bytes += k.size() + v.size();
    if (bytes > kMaxSavedHint) continue;
    nlohmann::json j = {
        {"pid", h.pid},
        {"start_time", h.start_time},
        {"uid", h.uid},
        {"root_dev", h.root.dev},
        {"root_ino", h.root.ino},
        {"env", h.env},
        {"cwd", h.cwd},
        {"by", h.by},
        {"at", std::chrono::duration_cast<std::chrono::seconds>(h.at.time_since_epoch()).count()}};
    std::string text;
    try {
      text = j.dump();
    } catch (const nlohmann::json::exception&) {
      continue;  // a path that is not UTF-8: kept in memory, not in the file
    }
    out += (first ? "\n" : ",\n") + text;
    first = false;
  }
  return out + "]}\n";
}

Expected<std::vector<Hint>, std::string> hints_from_text(const std::string& text,
                                                         const std::string& mountpoint,
                                                         const std::string& boot) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return unexpected(std::string("it is not JSON"));
  if (!j.contains("version") || j["version"] != kVersion) {
    return unexpected("it is not a hint book of version " + std::to_string(kVersion));
  }
  if (!j.contains("mountpoint") || !j["mountpoint"].is_string()) {
    return unexpected(std::string("it names no mount point"));
  }
  if (json_text(j["mountpoint"]) != json_text(mountpoint)) {
    return unexpected("it is the book of another mount point, " +
                      json_text(j["mountpoint"]).substr(0, 300));
  }
  if (!j.contains("boot") || !j["boot"].is_string() || j["boot"] != boot) {
    return unexpected(std::string("it was written before the machine last started"));
  }
  if (!j.contains("hints") || !j["hints"].is_array()) {
    return unexpected(std::string("it has no list of hints"));
  }
  std::vector<Hint> out;
  std::size_t n = 0;
  for (const auto& e : j["hints"]) {
    ++n;
    const std::string at = "hint " + std::to_string(n) + ": ";
    if (!e.is_object()) return unexpected(at + "not an object");
    for (const char* field : {"pid", "start_time", "uid", "root_dev", "root_ino"}) {
      if (!e.contains(field) || !e[field].is_number_unsigned()) {
        return unexpected(at + field + " is not a number of 0 or more");
      }
    }
    for (const char* field : {"cwd", "by"}) {
      if (!e.contains(field) || !e[field].is_string()) {
        return unexpected(at + field + " is not a string");
      }
    }
    if (!e.contains("at") || !e["at"].is_number_integer()) {
      return unexpected(at + "at is not a number");
    }
    if (!e.contains("env") || !e["env"].is_object()) {
      return unexpected(at + "env is not an object");
    }
    Hint h;
    const auto pid = e["pid"].get<std::uint64_t>();
    const auto uid = e["uid"].get<std::uint64_t>();
    if (pid == 0 || pid > 0x3fffffff || uid > 0xfffffffe) {
      return unexpected(at + "no such pid or uid");
    }
    h.pid = static_cast<pid_t>(pid);
    h.uid = static_cast<uid_t>(uid);
    h.start_time = e["start_time"].get<std::uint64_t>();
    h.root = RootId{e["root_dev"].get<std::uint64_t>(), e["root_ino"].get<std::uint64_t>()};
    h.cwd = e["cwd"].get<std::string>();
    h.by = e["by"].get<std::string>();
    h.at = std::chrono::system_clock::time_point(std::chrono::seconds(e["at"].get<std::int64_t>()));
    for (const auto& item : e["env"].items()) {
      const std::string& name = item.key();
      if (!item.value().is_string()) return unexpected(at + "env " + name + " is not a string");
      // Only the variables a caller's target reads.
      const bool read = std::any_of(std::begin(kCallerEnv), std::end(kCallerEnv),
                                    [&](const char* v) { return name == v; });
      if (read) h.env[name] = item.value().get<std::string>();
    }
    out.push_back(std::move(h));
  }
  return out;
}

std::string read_boot_id(const std::string& proc) {
  auto id = read_small(proc + "/sys/kernel/random/boot_id");
  if (!id) return "";
  while (!id->empty() && (id->back() == '\n' || id->back() == ' ')) id->pop_back();
  return *id;
}

std::string default_state_dir(const GetEnv& getenv, bool is_root) {
  if (is_root) return "/run/wheelhouse-fs";
  if (const char* r = getenv("XDG_RUNTIME_DIR"); r != nullptr && *r == '/') {
    return std::string(r) + "/wheelhouse-fs";
  }
  if (const char* c = getenv("XDG_CACHE_HOME"); c != nullptr && *c == '/') {
    return std::string(c) + "/wheelhouse-fs/state";
  }
  const char* home = getenv("HOME");
  if (home == nullptr || *home != '/') return "";
  return std::string(home) + "/.cache/wheelhouse-fs/state";
}

std::string hint_file_name(const std::string& mountpoint) {
  return "hints-" + sha256_hex(mountpoint).substr(0, 16) + ".json";
}

struct HintBook::File {
  OwnFolder folder;
  std::string name;
  std::string mountpoint;
  std::string boot;
  bool failing = false;  // the last write failed (said once in the log)
};

HintBook::HintBook(std::size_t max_per_uid, std::string proc)
    : max_per_uid_(max_per_uid), proc_(std::move(proc)) {}

HintBook::~HintBook() = default;

Expected<void, std::string> HintBook::put(Hint hint) {
  {
    std::lock_guard lock(mu_);
    const auto mine = [&] {
      return std::count_if(hints_.begin(), hints_.end(), [&](const auto& kv) {
        return kv.second.uid == hint.uid && kv.first != hint.pid;
      });
    };
    if (static_cast<std::size_t>(mine()) >= max_per_uid_) {
      // Those of processes that are gone go first.
      std::erase_if(hints_, [&](const auto& kv) {
        return kv.second.uid == hint.uid && !still_running(kv.second, proc_);
      });
      if (const auto n = static_cast<std::size_t>(mine()); n >= max_per_uid_) {
        return unexpected("user " + std::to_string(hint.uid) + " has " + std::to_string(n) +
                          " shells with a hint already");
      }
    }
    const pid_t pid = hint.pid;
    hints_[pid] = std::move(hint);
  }
  save();
  return {};
}

std::optional<Hint> HintBook::find(pid_t pid, std::uint64_t start_time, uid_t uid) const {
  std::lock_guard lock(mu_);
  const auto it = hints_.find(pid);
  if (it == hints_.end() || it->second.start_time != start_time || it->second.uid != uid) {
    return std::nullopt;
  }
  return it->second;
}

std::optional<Hint> HintBook::find_for(const CallerProcess& p) const {
  if (empty()) return std::nullopt;
  if (auto h = find(p.pid, p.start_time, p.credentials.uid)) return h;
  const CallerProcess* child = &p;
  std::optional<CallerProcess> parent;
  for (int depth = 0; depth < 8; ++depth) {
    const auto ppid = read_parent(child->pid, proc_);
    if (!ppid) return std::nullopt;
    auto up = read_caller(*ppid, proc_);
    if (!up || up->exe_path != child->exe_path || up->env != child->env ||
        up->credentials.uid != child->credentials.uid || up->own_root != child->own_root) {
      return std::nullopt;  // an exec since, another user or world: not that shell's child
    }
    if (auto h = find(*ppid, up->start_time, up->credentials.uid)) return h;
    parent = std::move(*up);
    child = &*parent;
  }
  return std::nullopt;
}

bool HintBook::empty() const {
  std::lock_guard lock(mu_);
  return hints_.empty();
}

std::size_t HintBook::size() const {
  std::lock_guard lock(mu_);
  return hints_.size();
}

std::string HintBook::file() const {
  std::lock_guard lock(mu_);
  return file_ ? joined(file_->folder.path(), file_->name) : "";
}

std::size_t HintBook::keep_in(OwnFolder folder, const std::string& name,
                              const std::string& mountpoint) {
  const std::string path = joined(folder.path(), name);
  const std::string boot = read_boot_id(proc_);
  std::vector<Hint> found;
  bool had_file = false;  // one, good or not: it is written again (or removed) below
  bool parsed = false;
  if (auto text = read_own(folder, name); !text) {
    spdlog::warn("{}: ignored: {}", path, text.error());
  } else if (*text) {
    had_file = true;
    auto hints = hints_from_text(**text, mountpoint, boot);
    if (hints) {
      found = std::move(*hints);
      parsed = true;
    } else {
      spdlog::warn("{}: ignored: {}", path, hints.error());
    }
  }
  const std::size_t listed = found.size();
  std::erase_if(found, [&](const Hint& h) { return !still_running(h, proc_); });
  const std::size_t gone = listed - found.size();
  std::size_t taken = 0;
  {
    std::lock_guard lock(mu_);
    file_ = std::make_unique<File>(File{std::move(folder), name, mountpoint, boot});
    for (auto& h : found) {
      const auto mine = std::count_if(hints_.begin(), hints_.end(),
                                      [&](const auto& kv) { return kv.second.uid == h.uid; });
      // One given since is newer; a user's bound holds.
      if (hints_.count(h.pid) != 0 || static_cast<std::size_t>(mine) >= max_per_uid_) continue;
      const pid_t pid = h.pid;
      hints_[pid] = std::move(h);
      ++taken;
    }
  }
  if (parsed) {
    spdlog::info("{}: {} hint{} of running shells taken again, {} of shells that are gone dropped",
                 path, taken, taken == 1 ? "" : "s", gone);
  }
  if (had_file || taken != 0) save();
  return taken;
}

void HintBook::drop_gone() {
  std::vector<Hint> all;
  {
    std::lock_guard lock(mu_);
    for (const auto& [pid, h] : hints_) all.push_back(h);
  }
  std::erase_if(all, [&](const Hint& h) { return still_running(h, proc_); });
  if (all.empty()) return;
  {
    std::lock_guard lock(mu_);
    for (const auto& gone : all) {
      if (const auto it = hints_.find(gone.pid); it != hints_.end() && it->second == gone) {
        hints_.erase(it);
      }
    }
  }
  save();
}

void HintBook::save() {
  std::unique_lock lock(mu_);
  if (!file_) return;
  ++changes_;
  if (writing_) return;  // the writer at work writes this change too
  writing_ = true;
  File& f = *file_;  // set once, never reset
  for (;;) {
    const std::uint64_t seen = changes_;
    std::vector<Hint> all;
    all.reserve(hints_.size());
    for (const auto& [pid, h] : hints_) all.push_back(h);
    lock.unlock();
    auto w = all.empty() ? remove_own(f.folder, f.name)
                         : write_own(f.folder, f.name, hints_to_text(f.mountpoint, f.boot, all));
    lock.lock();
    if (!w && !f.failing) {
      spdlog::warn("hints not kept for a restart: {}", w.error());
    } else if (w && f.failing) {
      spdlog::info("{}: hints kept again", joined(f.folder.path(), f.name));
    }
    f.failing = !w;
    if (changes_ == seen) break;
  }
  writing_ = false;
}

}  // namespace whfs::target
