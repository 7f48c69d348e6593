#pragma once
// The target of whoever asks: for the process behind a FUSE request, the key of its
// targets/<key> folder (current/ points there), and in words why.
//
//   process      /proc/PID: what it runs and how it was started, its root, its credentials,
//                the few environment variables that matter (caller.h)
//   interpreter  the Python it would use and that Python's files (python_layout.h), read as
//                the process's own user (ActAs): what it could not read, neither could we
//   GPUs         the machine's, probed once by the mount with the libraries its owner chose,
//                narrowed to the process's share (NVIDIA_VISIBLE_DEVICES in a container,
//                CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER)
//
// Nothing a process controls is run or loaded. Answers are cached per process (pid and start
// time; at most `recheck` old) and per interpreter (its path, root, user and environment),
// whose files' stamps are checked again at most every `recheck`: an installed or downgraded
// torch, a recreated venv show up within that time, and a thousand reads from one venv cost one
// reading of its files.
//
// A FUSE request never waits on a process's files for long: the files are read on a thread of
// their own, and the request takes the answer if it comes within `deadline`, else "unresolved"
// with the reason (the reading goes on and its answer is kept for the next request). A path that
// leads into the mount itself is never followed (refuse_device). Each user has a bound on its
// readings in flight and on its share of the caches: no user can spend them for all.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fs/common/clock.h"
#include "fs/common/own_file.h"
#include "fs/targeting/caller.h"
#include "fs/targeting/gpu_probe.h"
#include "fs/targeting/hint_book.h"
#include "fs/targeting/key.h"
#include "fs/targeting/overrides.h"
#include "fs/targeting/python_layout.h"
#include "fs/targeting/root_fs.h"
#include "fs/targeting/target.h"

namespace whfs::target {

// What an interpreter's files say, with the stamps of every file and folder read.
struct PythonFacts {
  std::optional<PythonInfo> python;
  std::string python_error;
  std::optional<TorchInfo> torch;
  std::string torch_error;
  std::vector<Input> inputs;
};

// Reads the interpreter at `interpreter` in `root` and its torch (through the calling thread's
// credentials: use ActAs). `process` gives PYTHONPATH, HOME and the like (null: none).
PythonFacts read_python_facts(const RootFs& root, const std::string& interpreter,
                              const CallerProcess* process);

// Whether every input still has its stamp.
bool inputs_unchanged(const RootFs& root, const std::vector<Input>& inputs);

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

// (clang-tidy 14 takes its implicit, noexcept move constructor for one that may throw.)
struct Resolution {  // NOLINT(bugprone-exception-escape)
  std::string key;   // the canonical key, or kUnresolved
  std::string why_unresolved;
  Target target;
  nlohmann::json caller;  // the process, its interpreter and GPUs, and why (for its .target)
};

struct CallerTargetsStats {
  std::uint64_t resolves = 0;
  std::uint64_t process_hits = 0;       // answered from the per-process cache
  std::uint64_t interpreter_reads = 0;  // an interpreter's files read (a detection)
  std::uint64_t interpreter_hits = 0;   // an interpreter's cached facts reused
  std::uint64_t unresolved = 0;
  std::uint64_t timed_out = 0;       // answered "unresolved" at the deadline, the reading went on
  std::uint64_t refused = 0;         // not started: the user had too many readings in flight
  std::uint64_t hints = 0;           // environments handed over by a shell hook
  std::uint64_t hints_restored = 0;  // hints of running shells taken from the book's file
  std::size_t hints_held = 0;        // shells with a hint now
  std::size_t in_flight = 0;
  std::size_t processes = 0;
  std::size_t interpreters = 0;
};

class CallerTargets {
 public:
  static constexpr const char* kUnresolved = "unresolved";

  CallerTargets(CallerTargetsConfig config, GpuReport gpus, HostPlatform host);

  // The answer for the process `pid` (in the mount's PID namespace; 0 when the kernel could not
  // name it), asked by user `uid` (the FUSE request's; its bounds apply). Without `wait`: the
  // answer only if it is known now, else null (and its reading is started).
  std::shared_ptr<const Resolution> resolve(pid_t pid, std::optional<uid_t> uid = std::nullopt,
                                            bool wait = true);

  // The shell hook's channel (issue 22): process `pid` (user `uid`) hands its own environment
  // and working directory to its parent, which then counts as having them (a shell after
  // `source activate` keeps its start-up environment in /proc, but its children get the new
  // one). Only a parent of the same user, in the same root; the hint lives as long as that
  // process (pid and start time) or until the next one, and outlives this daemon when the
  // hints are kept in a file (keep_hints_in). The parent's answer with the hint if
  // known at once (else its key is "(being read)": the reading has started), or why no hint
  // was taken.
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
