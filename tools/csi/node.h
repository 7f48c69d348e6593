#pragma once
// The Node service's logic, apart from gRPC and from the system calls: one wheelhousefs daemon
// per volume key (endpoint, repo, revision, options, token) on this node, bind-mounted
// read-only onto each pod's target path; the daemon ends with its last target. What runs is
// written to a state file after every change, so that a restarted plugin adopts the daemons
// and targets it left (a daemon that died meanwhile is started again and its targets bound
// again). Every call is idempotent, as CSI requires: a publish of a target already published
// with the same volume is OK, an unpublish of a target this plugin does not know is OK.

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "fs/common/expected.h"
#include "tools/csi/volume.h"

namespace whfs::csi {

// gRPC's codes that the Node service answers with (grpc::StatusCode's numbers).
enum class Code {
  kOk = 0,
  kInvalidArgument = 3,
  kNotFound = 5,
  kAlreadyExists = 6,
  kFailedPrecondition = 9,
  kInternal = 13,
  kUnavailable = 14
};

struct Status {
  Code code = Code::kOk;
  std::string message;
  bool ok() const { return code == Code::kOk; }
};

// The system calls, behind an interface so that the logic is tested without root or FUSE.
class System {
 public:
  virtual ~System() = default;
  // Starts a daemon for `spec` with its files in `dir` (created 0700) and its mount on `mnt`;
  // returns its pid once it serves, or its one-line reason.
  virtual Expected<int, std::string> start_daemon(const VolumeSpec& spec, const std::string& dir,
                                                  const std::string& mnt) = 0;
  // True while the daemon `pid` serves on `mnt`.
  virtual bool daemon_serves(const std::string& mnt, int pid) = 0;
  // Unmounts `mnt` and waits for the daemon to end.
  virtual void stop_daemon(const std::string& dir, const std::string& mnt, int pid) = 0;
  // Creates `target` (its parent must exist) unless it is a folder already.
  virtual Expected<void, std::string> make_target(const std::string& target) = 0;
  virtual Expected<void, std::string> bind_read_only(const std::string& mnt,
                                                     const std::string& target) = 0;
  // True when `target` is a mount point of the daemon's filesystem on `mnt`.
  virtual bool bound(const std::string& mnt, const std::string& target) = 0;
  // True when anything is mounted on `target`.
  virtual bool mounted(const std::string& target) = 0;
  // Unmounts `target` (detached: a dead daemon's mount too) and removes the folder.
  virtual Expected<void, std::string> unbind(const std::string& target) = 0;
};

struct PublishRequest {
  std::string volume_id;
  std::string target_path;
  bool has_mount_capability = false;  // volume_capability.mount set
  bool block = false;                 // volume_capability.block set
  std::map<std::string, std::string> volume_context;
  std::map<std::string, std::string> secrets;
};

class Node {
 public:
  // Loads `state_dir`/state.json when there is one and adopts what it lists.
  Node(System& system, std::string state_dir, ParseLimits limits);

  Status publish(const PublishRequest& request);
  Status unpublish(const std::string& volume_id, const std::string& target_path);

  struct DaemonView {
    std::string key;
    std::string what;  // VolumeSpec::describe()
    std::string mnt;
    int pid = 0;
    std::map<std::string, std::string> targets;  // target path -> volume_id
  };
  std::vector<DaemonView> daemons() const;
  // What the constructor found: one line per daemon adopted, restarted or dropped.
  const std::vector<std::string>& adoption_report() const { return adoption_; }

 private:
  struct Daemon {
    VolumeSpec spec;  // the token only in memory and in dir/token, never in state.json
    std::string dir;
    std::string mnt;
    int pid = 0;
    std::map<std::string, std::string> targets;
  };

  void load();
  void save() const;
  Expected<Daemon*, std::string> running(const VolumeSpec& spec);
  void forget_target(const std::string& key, const std::string& target);
  std::map<std::string, Daemon>::iterator owner_of(const std::string& target);

  System& system_;
  std::string state_dir_;
  ParseLimits limits_;
  mutable std::mutex mu_;  // one request at a time: publish and unpublish are short
  std::map<std::string, Daemon> daemons_;
  std::vector<std::string> adoption_;
};

// A target path as CSI requires it: absolute, no "." or ".." parts, no empty parts.
bool valid_target_path(std::string_view path);

}  // namespace whfs::csi
