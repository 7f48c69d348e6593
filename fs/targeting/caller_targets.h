#pragma once
// The target of whoever asks: for the process behind a FUSE request, the key of its
// targets/<key> folder (current/ points there), and in words why. A facade over:
//
//   reading      /proc/PID (caller.h), the process's shell hook hint (hint_book.h) and its
//                interpreter's files (python_facts.h), read as the process's own user (ActAs):
//                what it could not read, neither could we. Nothing a process controls is run or
//                loaded, and a path into the mount itself is never followed (refuse_device).
//   resolving    those facts, the machine's GPUs (probed once by the mount, narrowed to the
//                process's share) and the overrides make the target (caller_resolver.h: pure)
//   reporting    the .target's caller section and the status (caller_report.h)
//   deadlines    the reading runs on a thread of its own; a request waits for it at most
//                `deadline`, then gets "unresolved" with why (deadline_reader.h)
//   caches       answers per process (pid and start time; at most `recheck` old) and per
//                interpreter (its path, root, user and environment; its files' stamps checked
//                again at most every `recheck`), each shared out per user (user_cache.h)
//
// An installed or downgraded torch or a recreated venv shows within `recheck`, and a thousand
// reads from one venv cost one reading of its files. Each user has a bound on its readings in
// flight and on its share of the caches: no user can spend them for all.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "fs/common/expected.h"
#include "fs/common/own_file.h"
#include "fs/targeting/caller_report.h"
#include "fs/targeting/caller_resolver.h"
#include "fs/targeting/gpu_probe.h"
#include "fs/targeting/hint_book.h"
#include "fs/targeting/key.h"
#include "fs/targeting/overrides.h"
#include "fs/targeting/python_facts.h"
#include "fs/targeting/target.h"

namespace whfs::target {

struct CallerTargetsConfig {
  TargetOverrides overrides;
  bool per_caller = true;  // false (current=mount): every process gets the mount's own target
  std::chrono::milliseconds recheck{1000};
  std::string proc = "/proc";
  std::size_t max_processes = 4096;
  std::size_t max_interpreters = 256;
  // How long a request waits for a process's files to be read (then: unresolved, with why).
  std::chrono::milliseconds deadline{2000};
  std::size_t max_in_flight_per_uid = 4;    // readings at once for one user's processes
  std::size_t max_in_flight = 256;          // for everyone (threads stuck on a hung filesystem)
  std::size_t max_processes_per_uid = 512;  // one user's share of the per-process cache
  std::size_t max_interpreters_per_uid = 32;
  std::size_t max_hints_per_uid = 64;  // shells with a hook, per user
};

class CallerTargets {
 public:
  static constexpr const char* kUnresolved = kUnresolvedKey;

  CallerTargets(CallerTargetsConfig config, GpuReport gpus, HostPlatform host);

  // The answer for the process `pid` (in the mount's PID namespace; 0 when the kernel could not
  // name it), asked by user `uid` (the FUSE request's; its bounds apply). Without `wait`: the
  // answer only if it is known now, else null (and its reading is started).
  std::shared_ptr<const Resolution> resolve(pid_t pid, std::optional<uid_t> uid = std::nullopt,
                                            bool wait = true);

  // The shell hook's channel: process `pid` (user `uid`) hands its own environment and working
  // directory to its parent (hint_for_parent in hint_book.h). The hint lives as long as that
  // parent (pid and start time) or until its next one, and outlives this daemon when the hints
  // are kept in a file (keep_hints_in). The parent's answer with the hint if known at once
  // (else its key is "(being read)": the reading has started), or why no hint was taken.
  Expected<std::shared_ptr<const Resolution>, std::string> adopt(pid_t pid, uid_t uid);

  // From now on the hints are kept in `name` in `folder` (the book of `mountpoint`, see
  // hint_book.h): those it holds of shells still running are taken again. Returns how many.
  std::size_t keep_hints_in(OwnFolder folder, const std::string& name,
                            const std::string& mountpoint);
  // Drops the hints of shells that are gone (from the file too).
  void drop_gone_hints();

  // A new probe of the GPUs (a refresh): every cached answer is dropped.
  void set_gpus(GpuReport gpus);
  // The mount's own filesystem: no path a process names is followed into it.
  void refuse_device(dev_t dev);

  // Whether the current/ of some process answered lately leads to targets/<key>.
  bool leads_to(const std::string& key) const;

  const HostPlatform& host() const;
  GpuReport gpus() const;  // as probed at mount or the last refresh
  CallerTargetsStats stats() const;
  // For the mount's status: the GPUs, the overrides, the mode and the cache counts (never a
  // process's details).
  nlohmann::json status_json() const;

 private:
  struct Core;  // shared with the reading threads, which may outlive a call (caller_targets.cpp)
  std::shared_ptr<Core> core_;
};

}  // namespace whfs::target
