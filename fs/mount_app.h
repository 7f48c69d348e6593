#pragma once
// The mount as a program: builds the object graph from the options, resolves the revision
// (falling back to the last known commit in the cache when the Hub is unreachable), mounts,
// serves until SIGTERM/SIGINT or an external unmount, refreshes on SIGHUP and every
// refresh= period.

#include <functional>
#include <string>

#include "fs/options.h"

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
