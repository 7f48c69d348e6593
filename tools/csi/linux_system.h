#pragma once
// The Node service's system calls on Linux: wheelhousefs started detached (it outlives this
// plugin, which adopts it after a restart), read-only bind mounts, and the mount table.
//
// A daemon outlives the plugin's container too: right after fork, before it runs wheelhousefs,
// the child moves itself into a cgroup of the node's own, <root>/<parent>/<key> in every v1
// hierarchy under the cgroup root (or in the v2 tree), entering the host's cgroup namespace
// first (/proc/1/ns/cgroup: the plugin runs with hostPID) when the plugin has one of its own. A
// container runtime that kills the plugin container's cgroup then leaves the daemons serving.

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tools/csi/node.h"

namespace whfs::csi {

struct DaemonConfig {
  std::string program;               // wheelhousefs
  std::string cache_dir;             // one cache for every daemon of the node
  std::vector<std::string> options;  // the node admin's -o options, for every daemon
  int start_timeout_s = 120;
  // The node's cgroup root (the host's /sys/fs/cgroup, mounted into the plugin's container);
  // empty: the daemons stay in the plugin's cgroup (and die with its container).
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string cgroup_parent = "wheelhouse-fs";  // relative to each hierarchy's root
  std::uint64_t memory_max = 0;                 // bytes, each daemon's cgroup; 0: no limit
  int stop_grace_s = 3;  // a daemon's time to end after its unmount, then after SIGTERM
};

// One line per cgroup hierarchy that daemons go in, or why there is none.
Expected<std::vector<std::string>, std::string> cgroup_hierarchies(const std::string& root);

class LinuxSystem : public System {
 public:
  explicit LinuxSystem(DaemonConfig config) : config_(std::move(config)) {}

  Expected<int, std::string> start_daemon(const VolumeSpec& spec, const std::string& dir,
                                          const std::string& mnt) override;
  bool daemon_serves(const std::string& mnt, int pid) override;
  void stop_daemon(const std::string& dir, const std::string& mnt, int pid) override;
  Expected<void, std::string> make_target(const std::string& target) override;
  Expected<void, std::string> bind_read_only(const std::string& mnt,
                                             const std::string& target) override;
  bool bound(const std::string& mnt, const std::string& target) override;
  bool mounted(const std::string& target) override;
  Expected<void, std::string> unbind(const std::string& target) override;

  // The daemon's command line (without the token, which goes in a file): for tests and logs.
  std::vector<std::string> daemon_argv(const VolumeSpec& spec, const std::string& dir,
                                       const std::string& mnt, bool token_file) const;

  // At start-up: checks that the cgroup root holds hierarchies this process can write (unless
  // cgroup_root is empty), and removes the empty per-key cgroups a daemon that ended while no
  // plugin ran left. Returns what the daemons' cgroups are, for the log.
  Expected<std::string, std::string> prepare_cgroups();

 private:
  // Makes the daemon `name`'s cgroup in every hierarchy (and sets its memory limit); returns
  // the cgroup.procs files the child writes itself into.
  Expected<std::vector<std::string>, std::string> make_cgroup(const std::string& name);
  void remove_cgroup(const std::string& name);

  DaemonConfig config_;
  std::mutex cgroup_mu_;  // a cgroup's folders are made and removed one daemon at a time
};

}  // namespace whfs::csi
