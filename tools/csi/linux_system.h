#pragma once
// The Node service's system calls on Linux: wheelhousefs started detached (it outlives this
// plugin, which adopts it after a restart), read-only bind mounts, and the mount table.

#include <string>
#include <vector>

#include "tools/csi/node.h"

namespace whfs::csi {

struct DaemonConfig {
  std::string program;               // wheelhousefs
  std::string cache_dir;             // one cache for every daemon of the node
  std::vector<std::string> options;  // the node admin's -o options, for every daemon
  int start_timeout_s = 120;
};

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

 private:
  DaemonConfig config_;
};

}  // namespace whfs::csi
