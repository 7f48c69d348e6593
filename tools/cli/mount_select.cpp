#include "tools/cli/mount_select.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "fs/common/mounts.h"
#include "fs/config/options.h"
#include "tools/cli/status_reader.h"

namespace whfs::cli {
namespace {

namespace fsys = std::filesystem;
using Clock = std::chrono::steady_clock;

// A call made on a thread of its own, waited for until a deadline. A call that never returns
// (a stopped daemon) keeps its thread, blocked in the kernel, until the process ends; it holds
// only this shared state.
template <class T>
class Pending {
 public:
  explicit Pending(std::function<T()> call) : s_(std::make_shared<State>()) {
    try {
      std::thread([s = s_, call = std::move(call)] {
        T v = call();
        std::lock_guard lock(s->mu);
        s->value = std::move(v);
        s->cv.notify_all();
      }).detach();
    } catch (const std::system_error& e) {
      s_->no_thread = e.what();
    }
  }
  // The answer, or nothing when it has not come by `until`.
  std::optional<T> wait_until(Clock::time_point until) {
    std::unique_lock lock(s_->mu);
    s_->cv.wait_until(lock, until, [&] { return s_->value.has_value(); });
    return s_->value;
  }
  const std::string& no_thread() const { return s_->no_thread; }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<T> value;
    std::string no_thread;  // set when no thread could be started
  };
  std::shared_ptr<State> s_;
};

std::string strip_slashes(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// Absolute and lexically normal, without a trailing slash; no link is followed.
std::string lexical(const std::string& path) {
  fsys::path p(path);
  if (p.is_relative()) {
    std::error_code ec;
    p = fsys::current_path(ec) / p;
  }
  return strip_slashes(p.lexically_normal().string());
}

bool under(const std::string& path, const std::string& folder) {
  return path == folder ||
         (path.starts_with(folder) && (folder == "/" || path.compare(folder.size(), 1, "/") == 0));
}

std::optional<WheelhouseMount> lexically_in(const std::string& path,
                                            const std::vector<WheelhouseMount>& mounts) {
  const WheelhouseMount* best = nullptr;
  std::size_t best_len = 0;
  for (const auto& m : mounts) {
    std::vector<std::string> folders{m.path};
    folders.insert(folders.end(), m.also_at.begin(), m.also_at.end());
    for (const auto& f : folders) {
      if (under(path, f) && (best == nullptr || f.size() > best_len)) {
        best = &m;
        best_len = f.size();
      }
    }
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

std::string read_small(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > (1U << 20)) break;
  }
  ::close(fd);
  return out;
}

std::string comm_of(pid_t pid) {
  std::string c = read_small("/proc/" + std::to_string(pid) + "/comm");
  while (!c.empty() && c.back() == '\n') c.pop_back();
  return c;
}

// The mount point a wheelhousefs command line names, made lexical when it is absolute; empty
// when it names none or a relative one (the daemon's folder then is not known here).
std::string mountpoint_in_cmdline(pid_t pid) {
  const std::string raw = read_small("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> args;
  std::size_t pos = 0;
  while (pos < raw.size()) {
    const std::size_t end = std::min(raw.find('\0', pos), raw.size());
    args.push_back(raw.substr(pos, end - pos));
    pos = end + 1;
  }
  if (args.size() < 2) return "";
  args.erase(args.begin());
  auto o = parse_mount_args(args, [](const char*) -> const char* { return nullptr; });
  if (!o || !o->mountpoint.starts_with("/")) return "";
  return strip_slashes(fsys::path(o->mountpoint).lexically_normal().string());
}

// The wheelhousefs processes whose command line names one of `m`'s folders.
std::vector<pid_t> daemons_named_for(const WheelhouseMount& m) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid <= 0) continue;
    if (comm_of(static_cast<pid_t>(pid)) != "wheelhousefs") continue;
    const std::string mp = mountpoint_in_cmdline(static_cast<pid_t>(pid));
    if (mp.empty()) continue;
    if (mp == m.path || std::find(m.also_at.begin(), m.also_at.end(), mp) != m.also_at.end()) {
      out.push_back(static_cast<pid_t>(pid));
    }
  }
  ::closedir(d);
  return out;
}

using StatusResult = Expected<nlohmann::json, std::pair<int, std::string>>;

// The status attribute, asked without a deadline (on a thread that may block); errno kept for
// the caller to tell a dead mount.
struct RawStatus {
  StatusResult status = nlohmann::json();
  int err = 0;
};

RawStatus read_status_raw(const std::string& mountpoint) {
  const char* attr = "user.wheelhouse.status";
  // The status grows and shrinks between the two calls: retry on ERANGE.
  for (int tries = 0; tries < 5; ++tries) {
    const ssize_t n = ::getxattr(mountpoint.c_str(), attr, nullptr, 0);
    if (n < 0) {
      const int err = errno;
      if (err == ENOTCONN) {
        return {unexpected(std::pair<int, std::string>(
                    kFailed, mountpoint + ": dead (its daemon is gone; `wheelhouse stop " +
                                 mountpoint + "` detaches it)")),
                err};
      }
      if (err == EACCES || err == EPERM) {
        // FUSE refuses other users a mount made without allow_other.
        return {unexpected(std::pair<int, std::string>(
                    kFailed, mountpoint + ": " + std::strerror(err) +
                                 " (a mount without allow_other serves its own user only)")),
                err};
      }
      return {unexpected(std::pair<int, std::string>(
                  err == ENODATA || err == ENOTSUP || err == ENOENT || err == ENOTDIR ? kNotOurs
                                                                                      : kFailed,
                  mountpoint + " is not a wheelhouse-fs mount (" +
                      (err == ENODATA || err == ENOTSUP ? std::string("no status attribute")
                                                        : std::string(std::strerror(err))) +
                      ")")),
              err};
    }
    std::string buf(static_cast<std::size_t>(n) + 4096, '\0');
    const ssize_t got = ::getxattr(mountpoint.c_str(), attr, buf.data(), buf.size());
    if (got < 0 && errno == ERANGE) continue;
    if (got < 0) {
      const int err = errno;
      return {unexpected(std::pair<int, std::string>(
                  kFailed, "reading the status of " + mountpoint + ": " + std::strerror(err))),
              err};
    }
    buf.resize(static_cast<std::size_t>(got));
    auto j = nlohmann::json::parse(buf, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return {unexpected(std::pair<int, std::string>(kFailed,
                                                     mountpoint + " returned a malformed status")),
              0};
    }
    return {std::move(j), 0};
  }
  return {unexpected(std::pair<int, std::string>(
              kFailed, "reading the status of " + mountpoint + ": it kept changing size")),
          0};
}

std::string no_answer(const std::string& mountpoint, std::chrono::milliseconds deadline) {
  return mountpoint + ": no answer in " + std::to_string((deadline.count() + 999) / 1000) +
         " s (its daemon is stopped or hung; `wheelhouse mounts` shows it)";
}

// The process's start, in seconds since the epoch (0 when it cannot be read).
std::int64_t started_at(pid_t pid) {
  const std::string stat = read_small("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  // After "pid (comm)": state is field 3; starttime is field 22.
  std::size_t pos = paren + 2;
  for (int field = 3; field < 22 && pos < stat.size(); ++field) {
    pos = stat.find(' ', pos);
    if (pos == std::string::npos) return 0;
    ++pos;
  }
  const unsigned long long ticks = std::strtoull(stat.c_str() + pos, nullptr, 10);
  const std::string all = read_small("/proc/stat");
  const auto b = all.find("\nbtime ");
  if (b == std::string::npos) return 0;
  const long long btime = std::strtoll(all.c_str() + b + 7, nullptr, 10);
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (hz <= 0 || btime <= 0) return 0;
  return btime + static_cast<std::int64_t>(ticks / static_cast<unsigned long long>(hz));
}

}  // namespace

std::vector<WheelhouseMount> wheelhouse_mount_table(const char* mountinfo) {
  struct Entry {
    std::string path, type, source, dev;
    long long user_id = -1;
  };
  std::vector<Entry> entries;
  FILE* f = std::fopen(mountinfo, "re");
  if (f == nullptr) return {};
  char* line = nullptr;
  std::size_t cap = 0;
  while (::getline(&line, &cap, f) > 0) {
    // id parent major:minor root mountpoint options [optional...] - fstype source super-options
    std::vector<char> dev(cap);
    std::vector<char> mnt(cap);
    if (std::sscanf(line, "%*s %*s %s %*s %s", dev.data(), mnt.data()) != 2) continue;
    const char* dash = std::strstr(line, " - ");
    if (dash == nullptr) continue;
    std::vector<char> type(cap);
    std::vector<char> source(cap);
    std::vector<char> super(cap);
    if (std::sscanf(dash + 3, "%s %s %s", type.data(), source.data(), super.data()) != 3) continue;
    Entry e{unescape_mount_path(mnt.data()), type.data(), unescape_mount_path(source.data()),
            dev.data()};
    const std::string opts = std::string(",") + super.data() + ",";
    if (const auto at = opts.find(",user_id="); at != std::string::npos) {
      char* end = nullptr;
      const long long uid = std::strtoll(opts.c_str() + at + 9, &end, 10);
      if (end != opts.c_str() + at + 9 && *end == ',') e.user_id = uid;
    }
    entries.push_back(std::move(e));
  }
  std::free(line);
  std::fclose(f);
  // The last mount on a folder is the one seen there.
  std::map<std::string, std::size_t> top;
  for (std::size_t i = 0; i < entries.size(); ++i) top[entries[i].path] = i;
  std::vector<WheelhouseMount> out;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (top[e.path] != i || e.type != "fuse.wheelhousefs") continue;
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const WheelhouseMount& m) { return m.dev == e.dev; });
    if (same != out.end()) {
      same->also_at.push_back(e.path);
      continue;
    }
    out.push_back({e.path, {}, e.source, e.dev, e.user_id});
  }
  return out;
}

const char* to_string(MountState s) {
  switch (s) {
    case MountState::kLive:
      return "live";
    case MountState::kStopped:
      return "stopped";
    case MountState::kDead:
      return "dead";
    case MountState::kFailed:
      break;
  }
  return "failed";
}

std::vector<MountProbe> probe_mounts(const std::vector<WheelhouseMount>& mounts) {
  std::vector<Pending<RawStatus>> asks;
  asks.reserve(mounts.size());
  for (const auto& m : mounts) {
    asks.emplace_back([path = m.path] { return read_status_raw(path); });
  }
  const auto until = Clock::now() + kAnswerDeadline;
  std::vector<MountProbe> out;
  for (std::size_t i = 0; i < mounts.size(); ++i) {
    MountProbe p;
    p.mount = mounts[i];
    const auto answer = asks[i].wait_until(until);
    if (!asks[i].no_thread().empty()) {
      p.error = "not asked: " + asks[i].no_thread();
    } else if (!answer) {
      p.state = MountState::kStopped;
      const auto named = daemons_named_for(p.mount);
      if (named.size() == 1) p.pid = named.front();
    } else if (answer->status) {
      p.state = MountState::kLive;
      p.status = *answer->status;
      p.pid = static_cast<pid_t>(p.status.value("pid", 0));
    } else if (answer->err == ENOTCONN) {
      p.state = MountState::kDead;
    } else {
      p.error = answer->status.error().second;
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::string user_name(long long uid) {
  if (uid < 0) return "?";
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(static_cast<uid_t>(uid), &pw, buf.data(), buf.size(), &found) == 0 &&
      found != nullptr) {
    return found->pw_name;
  }
  return std::to_string(uid);
}

std::string repo_text(const MountProbe& p) {
  if (p.state != MountState::kLive) return p.mount.source + "@?";
  return p.status.value("repo", p.mount.source) + "@" + p.status.value("revision", "?");
}

std::string state_text(const MountProbe& p) {
  switch (p.state) {
    case MountState::kLive:
      return "live";
    case MountState::kStopped:
      return "stopped (no answer in " + std::to_string(kAnswerDeadline.count()) +
             " s: stopped or hung" +
             (p.pid > 0 ? "; kill -CONT " + std::to_string(p.pid) : std::string()) + ")";
    case MountState::kDead:
      return "dead (its daemon is gone; wheelhouse stop " + p.mount.path + " detaches it)";
    case MountState::kFailed:
      break;
  }
  return "failed: " + p.error;
}

std::string describe(const MountProbe& p) {
  return p.mount.path + "  " + repo_text(p) + "  pid " +
         (p.pid > 0 ? std::to_string(p.pid) : std::string("-")) + "  " +
         user_name(p.mount.user_id) + "  " + state_text(p);
}

std::optional<WheelhouseMount> mount_holding(const std::string& path,
                                             const std::vector<WheelhouseMount>& mounts) {
  if (path.empty()) return std::nullopt;
  const std::string lex = lexical(path);
  if (auto m = lexically_in(lex, mounts)) return m;
  // Links in the folders above it (not the last part, which may be a stopped mount itself).
  const fsys::path p(lex);
  if (p.has_parent_path() && p.parent_path() != p) {
    if (char* parent = ::realpath(p.parent_path().c_str(), nullptr); parent != nullptr) {
      const std::string r = parent;
      std::free(parent);
      if (auto m = lexically_in(strip_slashes(r + "/" + p.filename().string()), mounts)) return m;
    }
  }
  // A link inside a mount (current/...): the whole path, through the mount, with the deadline.
  Pending<std::string> real([lex] {
    char* r = ::realpath(lex.c_str(), nullptr);
    std::string s = r != nullptr ? r : "";
    std::free(r);
    return s;
  });
  const auto r = real.wait_until(Clock::now() + kAnswerDeadline);
  if (r && !r->empty()) return lexically_in(strip_slashes(*r), mounts);
  return std::nullopt;
}

std::optional<WheelhouseMount> mount_of_cwd(const std::vector<WheelhouseMount>& mounts) {
  std::error_code ec;
  const auto cwd = fsys::current_path(ec);
  if (ec) return std::nullopt;
  return lexically_in(strip_slashes(cwd.string()), mounts);
}

Expected<WheelhouseMount, Failure> choose_mount(const std::string& given,
                                                const std::string& how_to_name) {
  const auto mounts = wheelhouse_mount_table();
  if (!given.empty()) {
    if (auto m = mount_holding(given, mounts)) return *m;
    std::string others;
    for (const auto& m : mounts) others += (others.empty() ? "" : ", ") + m.path;
    return unexpected(Failure{
        kNotOurs, given + " is not a wheelhouse-fs mount, nor a folder in one; " +
                      (mounts.empty() ? std::string("there is none here (`wheelhousefs "
                                                    "DoctorPopi/python_wheelhouse DIR` mounts one)")
                                      : "the wheelhouse mounts here: " + others)});
  }
  if (mounts.size() == 1) return mounts.front();
  if (mounts.empty()) {
    return unexpected(
        Failure{kNotOurs,
                "no wheelhouse mount here; mount one: wheelhousefs DoctorPopi/python_wheelhouse "
                "/mnt/wheelhouse (or systemctl enable --now wheelhousefs@$(systemd-escape --path "
                "/mnt/wheelhouse).service)"});
  }
  std::string list;
  for (const auto& p : probe_mounts(mounts)) list += "\n  " + describe(p);
  return unexpected(Failure{kUsage, std::to_string(mounts.size()) +
                                        " wheelhouse mounts here; name one with " + how_to_name +
                                        ":" + list});
}

Expected<nlohmann::json, std::pair<int, std::string>> read_status_within(
    const std::string& mountpoint, std::chrono::milliseconds deadline) {
  Pending<RawStatus> ask([mountpoint] { return read_status_raw(mountpoint); });
  auto answer = ask.wait_until(Clock::now() + deadline);
  if (!ask.no_thread().empty()) {
    return unexpected(
        std::pair<int, std::string>(kFailed, mountpoint + ": not asked: " + ask.no_thread()));
  }
  if (!answer)
    return unexpected(std::pair<int, std::string>(kFailed, no_answer(mountpoint, deadline)));
  return std::move(answer->status);
}

Expected<nlohmann::json, std::pair<int, std::string>> read_status(const std::string& mountpoint) {
  return read_status_within(mountpoint);
}

Expected<std::string, std::string> read_file_within(const std::string& path,
                                                    std::chrono::milliseconds deadline) {
  using Result = Expected<std::string, std::string>;
  Pending<Result> ask([path]() -> Result {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return unexpected(path + ": " + std::strerror(errno));
    std::string out;
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        return unexpected(path + ": " + std::strerror(err));
      }
      if (n == 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return out;
  });
  auto answer = ask.wait_until(Clock::now() + deadline);
  if (!ask.no_thread().empty()) return unexpected(path + ": not read: " + ask.no_thread());
  if (!answer) return unexpected(no_answer(path, deadline));
  return std::move(*answer);
}

Expected<pid_t, std::string> verified_daemon(const WheelhouseMount& m,
                                             const nlohmann::json& status) {
  const auto it = status.find("pid");
  if (it == status.end() || !it->is_number_integer() || it->get<long long>() <= 0) {
    return unexpected(std::string("its status names no daemon pid"));
  }
  const auto pid = static_cast<pid_t>(it->get<long long>());
  const std::string p = "pid " + std::to_string(pid) + " (its status's)";
  const std::string comm = comm_of(pid);
  if (comm.empty()) {
    return unexpected(p + " is no process here: its daemon runs in another pid namespace");
  }
  if (comm != "wheelhousefs") {
    return unexpected(p + " is " + comm +
                      ", not a wheelhousefs daemon: its daemon runs in another pid namespace");
  }
  // It sees this connection mounted where its status says it mounted it.
  const std::string its_folder = status.value("mountpoint", m.path);
  const std::string its_mounts = "/proc/" + std::to_string(pid) + "/mountinfo";
  if (::access(its_mounts.c_str(), R_OK) != 0) {
    return unexpected("cannot read " + its_mounts + " to check that " + p +
                      " is its daemon: " + std::strerror(errno));
  }
  bool sees = false;
  for (const auto& e : wheelhouse_mount_table(its_mounts.c_str())) {
    if (e.dev != m.dev) continue;
    sees = e.path == its_folder ||
           std::find(e.also_at.begin(), e.also_at.end(), its_folder) != e.also_at.end();
    if (sees) break;
  }
  if (!sees) {
    return unexpected(p + " does not have this mount at " + its_folder + ": not its daemon");
  }
  const auto mounted_at = status.value("mounted_at", std::int64_t{0});
  if (const std::int64_t start = started_at(pid);
      start > 0 && mounted_at > 0 && start > mounted_at + 2) {
    return unexpected(p + " started after the mount was made: not its daemon");
  }
  if (const std::string named = mountpoint_in_cmdline(pid);
      !named.empty() && named != its_folder && named != m.path &&
      std::find(m.also_at.begin(), m.also_at.end(), named) == m.also_at.end()) {
    return unexpected(p + " serves " + named + ": not this mount's daemon");
  }
  return pid;
}

}  // namespace whfs::cli
