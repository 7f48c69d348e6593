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
#include "fs/target/caller.h"
#include "fs/target/gpu_probe.h"
#include "fs/target/key.h"
#include "fs/target/overrides.h"
#include "fs/target/python_layout.h"
#include "fs/target/root_fs.h"
#include "fs/target/target.h"

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
  std::size_t processes = 0;
  std::size_t interpreters = 0;
};

class CallerTargets {
 public:
  static constexpr const char* kUnresolved = "unresolved";

  CallerTargets(CallerTargetsConfig config, GpuReport gpus, HostPlatform host);

  // The answer for the process `pid` (in the mount's PID namespace; 0 when the kernel could not
  // name it).
  std::shared_ptr<const Resolution> resolve(pid_t pid);

  // A new probe of the GPUs (a refresh): every cached answer is dropped.
  void set_gpus(GpuReport gpus);

  const HostPlatform& host() const { return host_; }
  GpuReport gpus() const;  // as probed at mount or the last refresh
  CallerTargetsStats stats() const;
  // For the mount's status: the GPUs, the overrides, the mode and the cache counts (never a
  // process's details).
  nlohmann::json status_json() const;

 private:
  // No file descriptor is kept: the stamps are checked through the root of the process that
  // asks (the same world: the root's identity is part of the key).
  struct Interpreter {
    PythonFacts facts;
    Clock::time_point checked;
  };
  struct Process {
    ProcessIdentity identity;
    std::shared_ptr<const Resolution> resolution;
    Clock::time_point resolved;
  };

  std::shared_ptr<const Resolution> resolve_uncached(pid_t pid);
  std::shared_ptr<const Interpreter> interpreter(const std::string& key, const RootFs& root,
                                                 const std::string& path,
                                                 const CallerProcess* process);
  std::shared_ptr<const Resolution> unresolved(const std::string& why, nlohmann::json caller);

  const CallerTargetsConfig config_;
  const HostPlatform host_;

  mutable std::mutex mu_;  // guards everything below
  GpuReport gpus_;
  std::uint64_t generation_ = 0;  // bumped by set_gpus: answers of an older one are not kept
  std::map<pid_t, Process> processes_;
  std::map<std::string, std::shared_ptr<const Interpreter>> interpreters_;
  std::shared_ptr<const Resolution> fixed_;  // per_caller == false
  CallerTargetsStats stats_;
};

}  // namespace whfs::target
