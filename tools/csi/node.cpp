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

Node::Node(System& system, std::string state_dir, ParseLimits limits)
    : system_(system), state_dir_(std::move(state_dir)), limits_(std::move(limits)) {
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
      daemons_.emplace(key, std::move(daemon));
    } catch (const std::exception& e) {
      adoption_.push_back("state: daemon " + key + " is unreadable (" + e.what() + "): dropped");
    }
  }
  // Adopt: a daemon that still serves is kept as it is; one that died is started again and its
  // targets bound again to the new mount (the dead bind mounts are detached first).
  for (auto it = daemons_.begin(); it != daemons_.end();) {
    Daemon& d = it->second;
    if (system_.daemon_serves(d.mnt, d.pid)) {
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
      for (auto t = d.targets.begin(); t != d.targets.end();) {
        if (system_.mounted(t->first)) (void)system_.unbind(t->first);
        auto made = system_.make_target(t->first);
        auto bound = made ? system_.bind_read_only(d.mnt, t->first) : made;
        if (bound) {
          ++t;
        } else {
          adoption_.push_back("target " + t->first + " could not be bound again (" + bound.error() +
                              ")");
          t = d.targets.erase(t);
        }
      }
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

Expected<Node::Daemon*, std::string> Node::running(const VolumeSpec& spec) {
  const std::string key = spec.key();
  auto it = daemons_.find(key);
  if (it != daemons_.end()) {
    if (system_.daemon_serves(it->second.mnt, it->second.pid)) return &it->second;
    spdlog::warn("daemon {} (pid {}) no longer serves: starting it again", key, it->second.pid);
  } else {
    Daemon d;
    d.spec = spec;
    d.dir = state_dir_ + "/daemons/" + key;
    d.mnt = d.dir + "/mnt";
    it = daemons_.emplace(key, std::move(d)).first;
  }
  it->second.spec.token = spec.token;  // a restart after adoption learns it again
  auto pid = system_.start_daemon(spec, it->second.dir, it->second.mnt);
  if (!pid) {
    if (it->second.targets.empty()) daemons_.erase(it);
    return unexpected(pid.error());
  }
  it->second.pid = *pid;
  spdlog::info("daemon {} serves {} on {} (pid {})", key, spec.describe(), it->second.mnt, *pid);
  return &it->second;
}

std::map<std::string, Node::Daemon>::iterator Node::owner_of(const std::string& target) {
  for (auto it = daemons_.begin(); it != daemons_.end(); ++it) {
    if (it->second.targets.contains(target)) return it;
  }
  return daemons_.end();
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
  const std::string key = spec->key();

  std::lock_guard lock(mu_);
  if (auto owner = owner_of(r.target_path); owner != daemons_.end()) {
    const std::string& published_as = owner->second.targets.at(r.target_path);
    if (published_as != r.volume_id || owner->first != key) {
      return error(Code::kAlreadyExists, "target_path " + r.target_path +
                                             " is published already as volume " + published_as +
                                             " (" + owner->second.spec.describe() + ")");
    }
    if (system_.daemon_serves(owner->second.mnt, owner->second.pid) &&
        system_.bound(owner->second.mnt, r.target_path)) {
      return {};  // the same publish again: nothing to do
    }
    // Recorded, but its mount or its daemon is gone: publish it again below.
    if (system_.mounted(r.target_path)) (void)system_.unbind(r.target_path);
    owner->second.targets.erase(r.target_path);
  } else if (system_.mounted(r.target_path)) {
    return error(Code::kAlreadyExists,
                 "target_path " + r.target_path + " has a mount this plugin did not make");
  }
  auto daemon = running(*spec);
  if (!daemon) {
    save();
    return error(Code::kInternal, "the wheelhouse daemon for " + spec->describe() +
                                      " did not start: " + daemon.error());
  }
  Daemon& d = **daemon;
  auto made = system_.make_target(r.target_path);
  auto bound = made ? system_.bind_read_only(d.mnt, r.target_path) : made;
  if (!bound) {
    if (d.targets.empty()) {
      system_.stop_daemon(d.dir, d.mnt, d.pid);
      daemons_.erase(key);
    }
    save();
    return error(Code::kInternal, "target_path " + r.target_path + ": " + bound.error());
  }
  d.targets[r.target_path] = r.volume_id;
  save();
  spdlog::info("published volume {} ({}) on {}", r.volume_id, d.spec.describe(), r.target_path);
  return {};
}

void Node::forget_target(const std::string& key, const std::string& target) {
  auto it = daemons_.find(key);
  if (it == daemons_.end()) return;
  it->second.targets.erase(target);
  if (it->second.targets.empty()) {
    spdlog::info("daemon {} ({}) has no target left: stopping it", key, it->second.spec.describe());
    system_.stop_daemon(it->second.dir, it->second.mnt, it->second.pid);
    daemons_.erase(it);
  }
}

Status Node::unpublish(const std::string& volume_id, const std::string& target_path) {
  if (volume_id.empty()) return error(Code::kInvalidArgument, "volume_id is required");
  if (!valid_target_path(target_path)) {
    return error(Code::kInvalidArgument,
                 "target_path must be an absolute path without . or .. "
                 "parts (got \"" +
                     target_path.substr(0, 200) + "\")");
  }
  std::lock_guard lock(mu_);
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
  forget_target(owner->first, target_path);
  save();
  spdlog::info("unpublished volume {} from {}", volume_id, target_path);
  return {};
}

std::vector<Node::DaemonView> Node::daemons() const {
  std::lock_guard lock(mu_);
  std::vector<DaemonView> out;
  for (const auto& [key, d] : daemons_) {
    out.push_back({key, d.spec.describe(), d.mnt, d.pid, d.targets});
  }
  return out;
}

}  // namespace whfs::csi
