#pragma once
// What the mount says of callers: the caller section of a .target report (the process, its
// interpreter and why, its GPUs, its key or why it has none) and the targets part of the mount's
// status (the GPUs, the overrides, the mode and the counts, never a process's details). Pure.

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "fs/targeting/caller_resolver.h"
#include "fs/targeting/gpu_probe.h"
#include "fs/targeting/overrides.h"
#include "fs/targeting/target.h"

namespace whfs::target {

// The caller section for the process `facts` describes, resolved as `r`; `gpus` says which
// GPUs it may use and why (nullopt: not known).
nlohmann::json caller_section(const CallerFacts& facts, const Resolution& r,
                              const std::optional<std::string>& gpus);

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

// The targets part of the mount's status. `hints_file` is "" when hints are kept in no file.
nlohmann::json status_json(bool per_caller, const TargetOverrides& overrides,
                           const HostPlatform& host, const GpuReport& gpus,
                           const CallerTargetsStats& stats, const std::string& hints_file);

}  // namespace whfs::target
