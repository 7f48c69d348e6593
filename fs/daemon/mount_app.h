#pragma once
// The mount as a program: builds the parts from the options (mount_config.h), takes the
// commit to serve (commit_at_mount.h: the Hub's, or the cache's when the Hub is unreachable),
// mounts, and serves until SIGTERM/SIGINT or an external unmount while the refresher
// (refresher.h) handles signals, refreshes and the cache's upkeep; status.h reports.

#include <functional>
#include <string>

#include "fs/config/options.h"

namespace whfs {

struct StartupHooks {
  // The mount is ready (the command may return / systemd may be told).
  std::function<void()> ready;
  // Startup failed: one line for the user.
  std::function<void(const std::string&)> failed;
};

// Returns the process exit status.
int run_mount(const MountOptions& options, const StartupHooks& hooks);

}  // namespace whfs
