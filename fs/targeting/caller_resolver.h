#pragma once
// A process's target from what was read of it: its interpreter's facts, the machine's GPUs and
// the process's share of them, the mount's overrides. Pure: the reading is CallerTargets'
// (caller_targets.h), so every rule here is tested without processes.

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "fs/targeting/caller.h"
#include "fs/targeting/gpu_probe.h"
#include "fs/targeting/hint_book.h"
#include "fs/targeting/overrides.h"
#include "fs/targeting/python_facts.h"
#include "fs/targeting/target.h"

namespace whfs::target {

// The key of a process whose target is not known.
inline constexpr const char* kUnresolvedKey = "unresolved";

// What was read of a process, as far as the reading got.
struct CallerFacts {
  pid_t pid = 0;                           // 0: the kernel did not name it
  const CallerProcess* process = nullptr;  // null: not read (the rest is empty)
  // The environment its shell hook handed over (already in `process`), and the time now.
  const Hint* hint = nullptr;
  std::chrono::system_clock::time_point now;
  std::string interpreter;              // "" when none was chosen
  std::string interpreter_why;          // why that one
  const PythonFacts* python = nullptr;  // null: not read, and `python_error` says why
  std::string python_error;
  const GpuReport* gpus = nullptr;  // the machine's (null: not probed)
};

// (clang-tidy 14 takes its implicit, noexcept move constructor for one that may throw.)
struct Resolution {  // NOLINT(bugprone-exception-escape)
  std::string key;   // the canonical key, or kUnresolvedKey
  std::string why_unresolved;
  Target target;
  nlohmann::json caller;  // the process, its interpreter and GPUs, and why (for its .target)
};

// The GPU variables of a process. NVIDIA_VISIBLE_DEVICES, a container runtime's, counts only in
// a root of its own: on the host it means nothing.
GpuEnv gpu_env_of(const CallerProcess& process);

// The target and key of the process `facts` describes, under `overrides`, on `host`.
Resolution resolve_caller(const TargetOverrides& overrides, const HostPlatform& host,
                          const CallerFacts& facts);

// No target, and `why`: the reading stopped there.
std::shared_ptr<const Resolution> unresolved(const std::string& why, const CallerFacts& facts);

}  // namespace whfs::target
