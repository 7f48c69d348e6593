#pragma once
// The Node service's logic, apart from gRPC and from the system calls: one wheelhousefs daemon
// per volume key (endpoint, repo, revision, options, token) on this node, bind-mounted
// read-only onto each pod's target path; the daemon ends with its last target. What runs is
// written to a state file after every change, so that a restarted plugin adopts the daemons
// and targets it left (a daemon that died meanwhile is started again and its targets bound
// again). Every call is idempotent, as CSI requires: a publish of a target already published
// with the same volume is OK, an unpublish of a target this plugin does not know is OK.
//
// A daemon that dies while the plugin runs is found by the watchdog (watch(), every few
// seconds): it is started again and each of its targets bound again, on top of the dead bind
// mount, never after detaching it. The pods hold copies of that dead mount; a pod whose mount
// is a slave of it (mountPropagation: HostToContainer) gets the new mount on top of its copy.
//
// One pod must not stall another: a daemon starts (and stops) outside the plugin's lock, one
// start or stop at a time per volume key. A publish of that key waits for it; every other
// publish and unpublish goes on at once. A second publish or an unpublish of a target whose
// publish is still running is ABORTED (kubelet tries again). At most `max_daemons` daemons run
// (RESOURCE_EXHAUSTED beyond).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory>
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
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
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
  // returns its pid once it serves, or its one-line reason. Whatever a start before it left on
  // `mnt` (a daemon of an abandoned start, a mount) is ended first. Called outside the Node's
  // lock: it may take as long as the daemon takes to serve.
  virtual Expected<int, std::string> start_daemon(const VolumeSpec& spec, const std::string& dir,
                                                  const std::string& mnt) = 0;
  // True while the daemon `pid` runs and its filesystem is mounted on `mnt`. From /proc and the
  // mount table: it never calls into the mount, so a hung daemon cannot stall the caller.
  virtual bool daemon_serves(const std::string& mnt, int pid) = 0;
  // Unmounts `mnt` and waits for the daemon to end; also ends a daemon still starting on `mnt`
  // (`pid` 0: the pid is not known). Bounded: a daemon that does not end is killed.
  virtual void stop_daemon(const std::string& dir, const std::string& mnt, int pid) = 0;
  // Creates `target` (its parent must exist) unless it is a folder or a mount point already.
  virtual Expected<void, std::string> make_target(const std::string& target) = 0;
  // Binds `mnt` read-only onto `target`, on top of whatever is mounted there.
  virtual Expected<void, std::string> bind_read_only(const std::string& mnt,
                                                     const std::string& target) = 0;
  // True when the top mount on `target` is the daemon's filesystem on `mnt` (mount table only).
  virtual bool bound(const std::string& mnt, const std::string& target) = 0;
  // True when anything is mounted on `target`.
  virtual bool mounted(const std::string& target) = 0;
  // Unmounts every mount on `target` (a busy one lazily, with a log line; a dead daemon's too)
  // and removes the folder.
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

// Daemons a node runs at most unless told otherwise (wheelhouse-csi --max-daemons).
inline constexpr std::size_t kDefaultMaxDaemons = 32;

class Node {
 public:
  // Loads `state_dir`/state.json when there is one and adopts what it lists (all of it, even
  // beyond `max_daemons`: they run already).
  Node(System& system, std::string state_dir, ParseLimits limits,
       std::size_t max_daemons = kDefaultMaxDaemons);

  Status publish(const PublishRequest& request);
  Status unpublish(const std::string& volume_id, const std::string& target_path);

  // One pass of the watchdog: every daemon that no longer serves (and is not being started or
  // stopped) is started again, and its targets bound again on top of their dead mounts. The
  // checks run outside the lock and never call into a mount; a start runs outside the lock as
  // a publish's does. A start that fails is tried again by a pass kRetryAfter later.
  void watch();
  static constexpr std::chrono::seconds kRetryAfter{30};
  // Takes the lock and answers true: a Node whose lock is stuck never answers (CSI Probe).
  bool ready() const;

  struct DaemonView {
    std::string key;
    std::string what;  // VolumeSpec::describe()
    std::string mnt;
    int pid = 0;                                 // 0 while it starts
    std::map<std::string, std::string> targets;  // target path -> volume_id
    bool starting = false;
  };
  std::vector<DaemonView> daemons() const;
  // What the constructor found: one line per daemon adopted, restarted or dropped.
  const std::vector<std::string>& adoption_report() const { return adoption_; }

 private:
  // A start or a stop of one daemon, run outside mu_; publishes of its key wait for its end.
  struct Op {
    bool done = false;
    Status result;  // a start's; a stop's is always OK
  };
  struct Daemon {
    VolumeSpec spec;  // the token only in memory and in dir/token, never in state.json
    std::string dir;
    std::string mnt;
    int pid = 0;
    std::map<std::string, std::string> targets;
    std::shared_ptr<Op> op;    // while a start or a stop runs
    bool starting = false;     // op is a start: state.json says so, for a restart to end it
    std::string start_target;  // the target of the publish that started it
    std::chrono::steady_clock::time_point retry_after{};  // after a start that failed
  };
  using Daemons = std::map<std::string, Daemon>;
  using Lock = std::unique_lock<std::mutex>;

  void load();
  void save() const;
  Status publish_locked(Lock& lock, const PublishRequest& r, const VolumeSpec& spec);
  // Starts the daemon of `key` (new: `spec`) outside the lock, binds its recorded targets
  // again, then `r`'s target when there is a request (the watchdog has none).
  Status start_and_bind(Lock& lock, const std::string& key, const VolumeSpec* spec,
                        const PublishRequest* r);
  Status bind(Daemon& d, const PublishRequest& r);
  void rebind_targets(const std::string& key, Daemon& d, std::vector<std::string>* report);
  Status wait_for(Lock& lock, std::shared_ptr<Op> op);  // a copy: the Daemon drops its own
  void stop(Lock& lock, Daemons::iterator it);
  Daemons::iterator owner_of(const std::string& target);

  System& system_;
  std::string state_dir_;
  ParseLimits limits_;
  std::size_t max_daemons_;
  // Guards what follows. Held for checks, bind mounts and the state file, never while a daemon
  // starts or stops.
  mutable std::mutex mu_;
  std::condition_variable op_done_;
  Daemons daemons_;
  std::map<std::string, std::string> publishing_;  // targets of publishes in progress -> volume
  std::vector<std::string> adoption_;
};

// A target path as CSI requires it: absolute, no "." or ".." parts, no empty parts.
bool valid_target_path(std::string_view path);

}  // namespace whfs::csi
