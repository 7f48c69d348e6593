#include "tools/csi/node.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>

#include "fs/common/text.h"

namespace whfs::csi {
namespace {

Status error(Code code, std::string message) { return Status{code, std::move(message)}; }

std::string errno_text() { return std::error_code(errno, std::generic_category()).message(); }

}  // namespace

bool valid_target_path(std::string_view path) {
  if (path.empty() || path.front() != '/' || path.size() > 4096) return false;
  if (path.find('\0') != std::string_view::npos || path.find('\n') != std::string_view::npos) {
    return false;
  }
  if (path.size() == 1) return false;  // "/" itself
  for (const auto part : split(path.substr(1), '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

Node::Node(System& system, std::string state_dir, ParseLimits limits, std::size_t max_daemons)
    : system_(system),
      state_dir_(std::move(state_dir)),
      limits_(std::move(limits)),
      max_daemons_(max_daemons) {
  load();
}

void Node::load() {
  const std::string path = state_dir_ + "/state.json";
  std::ifstream in(path);
  if (!in) return;
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    adoption_.push_back("state " + path + " is unreadable (" + e.what() + "): starting empty");
    return;
  }
  if (!j.is_object() || !j.contains("daemons") || !j["daemons"].is_object()) return;
  for (const auto& [key, d] : j["daemons"].items()) {
    try {
      Daemon daemon;
      daemon.spec.endpoint = d.at("endpoint").get<std::string>();
      daemon.spec.repo = d.at("repo").get<std::string>();
      daemon.spec.revision = d.at("revision").get<std::string>();
      daemon.spec.options = d.at("options").get<std::vector<std::string>>();
      daemon.dir = d.at("dir").get<std::string>();
      daemon.mnt = d.at("mnt").get<std::string>();
      daemon.pid = d.at("pid").get<int>();
      daemon.targets = d.at("targets").get<std::map<std::string, std::string>>();
      daemon.starting = d.value("starting", false);
      daemon.start_target = d.value("start_target", std::string());
      daemons_.emplace(key, std::move(daemon));
    } catch (const std::exception& e) {
      adoption_.push_back("state: daemon " + key + " is unreadable (" + e.what() + "): dropped");
    }
  }
  // Adopt: a daemon that still serves is kept as it is; one that died is started again and its
  // targets bound again to the new mount (on top of the dead ones, which pods hold). A start
  // that was running when the plugin stopped is ended (its publish never answered OK, and
  // kubelet asks again): what it left, a daemon still starting or one that serves, is stopped,
  // and its daemon started again only for targets published before.
  for (auto it = daemons_.begin(); it != daemons_.end();) {
    Daemon& d = it->second;
    if (d.starting) {
      d.starting = false;
      if (!d.start_target.empty() && system_.mounted(d.start_target)) {
        (void)system_.unbind(d.start_target);
      }
      d.start_target.clear();
      d.pid = 0;
      adoption_.push_back("daemon " + it->first + " (" + d.spec.describe() +
                          ") was starting when the plugin stopped: that start is ended");
      if (d.targets.empty()) {
        system_.stop_daemon(d.dir, d.mnt, 0);
        it = daemons_.erase(it);
        continue;
      }
    }
    if (d.pid > 0 && system_.daemon_serves(d.mnt, d.pid)) {
      for (auto t = d.targets.begin(); t != d.targets.end();) {
        if (system_.bound(d.mnt, t->first)) {
          ++t;
        } else {
          adoption_.push_back("target " + t->first + " is no longer mounted: forgotten");
          t = d.targets.erase(t);
        }
      }
      adoption_.push_back("adopted daemon " + it->first + " (pid " + std::to_string(d.pid) + ", " +
                          d.spec.describe() + ") with " + std::to_string(d.targets.size()) +
                          " target(s)");
    } else if (!d.targets.empty()) {
      auto pid = system_.start_daemon(d.spec, d.dir, d.mnt);
      if (!pid) {
        adoption_.push_back("daemon " + it->first + " had died and does not start again (" +
                            pid.error() + "): its targets stay unmounted");
        for (const auto& [target, id] : d.targets) (void)system_.unbind(target);
        it = daemons_.erase(it);
        continue;
      }
      d.pid = *pid;
      rebind_targets(it->first, d, &adoption_);
      adoption_.push_back("daemon " + it->first + " had died: started again (pid " +
                          std::to_string(d.pid) + ") for " + std::to_string(d.targets.size()) +
                          " target(s)");
    }
    if (d.targets.empty()) {
      system_.stop_daemon(d.dir, d.mnt, d.pid);
      it = daemons_.erase(it);
    } else {
      ++it;
    }
  }
  save();
}

// Binds the daemon's recorded targets that are not bound to its mount (after it started
// again), on top of the dead mount a target has: a pod holds a copy of that one, and a copy
// that is its slave (HostToContainer) gets the new mount on top too; detached first, it would
// get nothing. One that cannot be bound is unmounted and forgotten, and said in the log and in
// `report`.
void Node::rebind_targets(const std::string& key, Daemon& d, std::vector<std::string>* report) {
  for (auto t = d.targets.begin(); t != d.targets.end();) {
    // Bound already: the bind onto another target of the daemon propagated here (a target in
    // one peer group with it).
    if (system_.bound(d.mnt, t->first)) {
      ++t;
      continue;
    }
    auto made = system_.make_target(t->first);
    auto bound = made ? system_.bind_read_only(d.mnt, t->first) : made;
    if (bound) {
      ++t;
    } else {
      const std::string line = "target " + t->first + " of daemon " + key +
                               " could not be bound again (" + bound.error() + ")";
      spdlog::warn("{}", line);
      if (report != nullptr) report->push_back(line);
      (void)system_.unbind(t->first);
      t = d.targets.erase(t);
    }
  }
}

void Node::save() const {
  nlohmann::json j;
  j["daemons"] = nlohmann::json::object();
  for (const auto& [key, d] : daemons_) {
    j["daemons"][key] = {{"endpoint", d.spec.endpoint},
                         {"repo", d.spec.repo},
                         {"revision", d.spec.revision},
                         {"options", d.spec.options},
                         {"dir", d.dir},
                         {"mnt", d.mnt},
                         {"pid", d.pid},
                         {"targets", d.targets}};
    if (d.starting) {
      j["daemons"][key]["starting"] = true;
      j["daemons"][key]["start_target"] = d.start_target;
    }
  }
  const std::string path = state_dir_ + "/state.json";
  const std::string tmp = path + ".tmp";
  const std::string text = j.dump(2) + "\n";
  // A new file each time (O_EXCL after removing a leftover): never written through a link.
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    spdlog::error("state {}: {}", tmp, errno_text());
    return;
  }
  std::size_t done = 0;
  bool ok = true;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    spdlog::error("state {}: not saved: {}", path, errno_text());
  }
}

Node::Daemons::iterator Node::owner_of(const std::string& target) {
  for (auto it = daemons_.begin(); it != daemons_.end(); ++it) {
    if (it->second.targets.contains(target)) return it;
  }
  return daemons_.end();
}

Status Node::wait_for(Lock& lock, std::shared_ptr<Op> op) {
  op_done_.wait(lock, [&] { return op->done; });
  return op->result;
}

Status Node::publish(const PublishRequest& r) {
  if (r.volume_id.empty()) return error(Code::kInvalidArgument, "volume_id is required");
  if (!valid_target_path(r.target_path)) {
    return error(Code::kInvalidArgument,
                 "target_path must be an absolute path without . or .. "
                 "parts (got \"" +
                     r.target_path.substr(0, 200) + "\")");
  }
  if (r.block) {
    return error(Code::kInvalidArgument,
                 "a wheelhouse is a filesystem: volume_capability must be mount, not block");
  }
  if (!r.has_mount_capability) {
    return error(Code::kInvalidArgument, "volume_capability with mount is required");
  }
  auto spec = parse_volume(r.volume_context, r.secrets, limits_);
  if (!spec) return error(Code::kInvalidArgument, spec.error());

  Lock lock(mu_);
  if (auto busy = publishing_.find(r.target_path); busy != publishing_.end()) {
    return error(Code::kAborted, "target_path " + r.target_path + " is being published (volume " +
                                     busy->second + "); try again when that publish has answered");
  }
  publishing_.emplace(r.target_path, r.volume_id);
  Status s = publish_locked(lock, r, *spec);
  publishing_.erase(r.target_path);
  return s;
}

Status Node::publish_locked(Lock& lock, const PublishRequest& r, const VolumeSpec& spec) {
  const std::string key = spec.key();
  // Every wait below lets other requests change what is recorded: look again after each.
  for (;;) {
    if (auto owner = owner_of(r.target_path); owner != daemons_.end()) {
      Daemon& o = owner->second;
      const std::string& published_as = o.targets.at(r.target_path);
      if (published_as != r.volume_id || owner->first != key) {
        return error(Code::kAlreadyExists, "target_path " + r.target_path +
                                               " is published already as volume " + published_as +
                                               " (" + o.spec.describe() + ")");
      }
      if (o.op) {  // its daemon is starting again
        if (auto s = wait_for(lock, o.op); !s.ok()) return s;
        continue;
      }
      if (system_.daemon_serves(o.mnt, o.pid) && system_.bound(o.mnt, r.target_path)) {
        return {};  // the same publish again: nothing to do
      }
      // Recorded, but its mount or its daemon is gone: bound again below, on top of what is
      // there (the daemon started again first when it is the daemon that is gone).
    } else if (system_.mounted(r.target_path)) {
      return error(Code::kAlreadyExists,
                   "target_path " + r.target_path + " has a mount this plugin did not make");
    }
    auto it = daemons_.find(key);
    if (it != daemons_.end() && it->second.op) {  // one start or stop of a key at a time
      if (auto s = wait_for(lock, it->second.op); !s.ok()) return s;
      continue;
    }
    if (it != daemons_.end() && system_.daemon_serves(it->second.mnt, it->second.pid)) {
      Status s = bind(it->second, r);
      if (!s.ok() && it->second.targets.empty()) stop(lock, it);
      return s;
    }
    if (it == daemons_.end() && daemons_.size() >= max_daemons_) {
      return error(Code::kResourceExhausted,
                   "this node runs " + std::to_string(daemons_.size()) +
                       " wheelhouse daemons already, its most (wheelhouse-csi --max-daemons " +
                       std::to_string(max_daemons_) + "); " + spec.describe() +
                       " needs one more (volumes with the same endpoint, repo, revision, options "
                       "and token share one)");
    }
    return start_and_bind(lock, key, &spec, &r);
  }
}

Status Node::bind(Daemon& d, const PublishRequest& r) {
  if (!system_.bound(d.mnt, r.target_path)) {
    auto made = system_.make_target(r.target_path);
    auto bound = made ? system_.bind_read_only(d.mnt, r.target_path) : made;
    if (!bound) {
      return error(Code::kInternal, "target_path " + r.target_path + ": " + bound.error());
    }
  }
  d.targets[r.target_path] = r.volume_id;
  save();
  spdlog::info("published volume {} ({}) on {}", r.volume_id, d.spec.describe(), r.target_path);
  return {};
}

// Starts the key's daemon (a new one, or again after it died) with mu_ released, then binds
// the target. The entry stays in daemons_ while it starts, marked with its Op, so that it
// counts against max_daemons_, publishes of its key wait, and state.json lists it.
Status Node::start_and_bind(Lock& lock, const std::string& key, const VolumeSpec* spec,
                            const PublishRequest* r) {
  auto [it, fresh] = daemons_.try_emplace(key);
  Daemon& d = it->second;
  if (fresh) {
    d.spec = *spec;
    d.dir = state_dir_ + "/daemons/" + key;
    d.mnt = d.dir + "/mnt";
  } else if (r != nullptr) {
    spdlog::warn("daemon {} (pid {}) no longer serves: starting it again", key, d.pid);
  }
  if (spec != nullptr) d.spec.token = spec->token;  // a restart after adoption learns it again
  d.pid = 0;
  const auto op = std::make_shared<Op>();
  d.op = op;
  d.starting = true;
  d.start_target = r != nullptr ? r->target_path : std::string();
  save();
  const VolumeSpec what = d.spec;
  const std::string dir = d.dir;
  const std::string mnt = d.mnt;

  lock.unlock();
  auto pid = system_.start_daemon(what, dir, mnt);
  lock.lock();

  // Still there: an entry with an Op is removed only by the one who runs the Op.
  it = daemons_.find(key);
  Daemon& started = it->second;
  started.op.reset();
  started.starting = false;
  started.start_target.clear();
  Status result;
  if (!pid) {
    op->result = error(Code::kInternal, "the wheelhouse daemon for " + what.describe() +
                                            " did not start: " + pid.error());
    result = op->result;
    // Targets published before (the daemon died) stay recorded: a publish, the watchdog or a
    // restart of the plugin tries again.
    started.retry_after = std::chrono::steady_clock::now() + kRetryAfter;
    if (started.targets.empty()) daemons_.erase(it);
    save();
  } else {
    started.pid = *pid;
    spdlog::info("daemon {} serves {} on {} (pid {})", key, what.describe(), mnt, *pid);
    rebind_targets(key, started, nullptr);
    if (r != nullptr) result = bind(started, *r);
    if (started.targets.empty()) {  // its publish failed, or every target was unpublished
      op->done = true;
      op_done_.notify_all();
      stop(lock, it);  // publishes that waited for this start now wait for the stop
      return result;
    }
    save();
  }
  op->done = true;
  op_done_.notify_all();
  return result;
}

// Stops the daemon of `it` (no target left) with mu_ released, then forgets it.
void Node::stop(Lock& lock, Daemons::iterator it) {
  const std::string key = it->first;
  Daemon& d = it->second;
  spdlog::info("daemon {} ({}) has no target left: stopping it", key, d.spec.describe());
  const auto op = std::make_shared<Op>();
  d.op = op;
  const std::string dir = d.dir;
  const std::string mnt = d.mnt;
  const int pid = d.pid;
  save();

  lock.unlock();
  system_.stop_daemon(dir, mnt, pid);
  lock.lock();

  daemons_.erase(key);  // no target can have joined: publishes of the key waited for the Op
  save();
  op->done = true;
  op_done_.notify_all();
}

Status Node::unpublish(const std::string& volume_id, const std::string& target_path) {
  if (volume_id.empty()) return error(Code::kInvalidArgument, "volume_id is required");
  if (!valid_target_path(target_path)) {
    return error(Code::kInvalidArgument,
                 "target_path must be an absolute path without . or .. "
                 "parts (got \"" +
                     target_path.substr(0, 200) + "\")");
  }
  Lock lock(mu_);
  if (auto busy = publishing_.find(target_path); busy != publishing_.end()) {
    // Answering OK now would leave the mount that publish is about to make.
    return error(Code::kAborted, "target_path " + target_path + " is being published (volume " +
                                     busy->second + "); try again when that publish has answered");
  }
  auto owner = owner_of(target_path);
  if (owner == daemons_.end()) {
    // Not published here (or unpublished already): idempotent, nothing is touched.
    return {};
  }
  if (owner->second.targets.at(target_path) != volume_id) {
    return error(Code::kNotFound, "target_path " + target_path + " holds volume " +
                                      owner->second.targets.at(target_path) + ", not " + volume_id);
  }
  if (system_.mounted(target_path)) {
    if (auto gone = system_.unbind(target_path); !gone) {
      return error(Code::kInternal, "target_path " + target_path + ": " + gone.error());
    }
  } else {
    (void)system_.unbind(target_path);  // the folder only
  }
  owner->second.targets.erase(target_path);
  spdlog::info("unpublished volume {} from {}", volume_id, target_path);
  // A daemon that is starting again has a publish of its own that binds a target or stops it.
  if (owner->second.targets.empty() && !owner->second.op) {
    stop(lock, owner);
  } else {
    save();
  }
  return {};
}

void Node::watch() {
  struct Seen {
    std::string key;
    std::string mnt;
    int pid;
  };
  std::vector<Seen> seen;
  {
    Lock lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [key, d] : daemons_) {
      // A start or a stop runs (its own); no target (it is being stopped); a failed start that
      // is not due for another try.
      if (d.op || d.targets.empty() || (d.pid <= 0 && now < d.retry_after)) continue;
      seen.push_back({key, d.mnt, d.pid});
    }
  }
  for (const auto& s : seen) {
    if (s.pid > 0 && system_.daemon_serves(s.mnt, s.pid)) continue;
    Lock lock(mu_);
    auto it = daemons_.find(s.key);
    // Changed meanwhile: a publish started it again, or an unpublish stopped it.
    if (it == daemons_.end() || it->second.op || it->second.pid != s.pid ||
        it->second.targets.empty()) {
      continue;
    }
    const std::size_t targets = it->second.targets.size();
    if (s.pid > 0) {
      spdlog::warn("daemon {} (pid {}, {}) is gone: starting it again for its {} target(s)", s.key,
                   s.pid, it->second.spec.describe(), targets);
    } else {
      spdlog::info("daemon {} ({}): starting it again for its {} target(s)", s.key,
                   it->second.spec.describe(), targets);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = start_and_bind(lock, s.key, nullptr, nullptr);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    auto now = daemons_.find(s.key);
    if (!st.ok()) {
      spdlog::warn("{} (tried again in {} s)", st.message, kRetryAfter.count());
    } else if (now != daemons_.end() && !now->second.op) {
      spdlog::info(
          "daemon {} serves again (pid {}), its {} target(s) bound again, {} ms after "
          "it was found gone",
          s.key, now->second.pid, now->second.targets.size(), ms);
    }
  }
}

bool Node::ready() const {
  std::lock_guard lock(mu_);
  return true;
}

std::vector<Node::DaemonView> Node::daemons() const {
  std::lock_guard lock(mu_);
  std::vector<DaemonView> out;
  for (const auto& [key, d] : daemons_) {
    out.push_back({key, d.spec.describe(), d.mnt, d.pid, d.targets, d.starting});
  }
  return out;
}

}  // namespace whfs::csi
