#pragma once
// One target, as the folder choice sees it: four axes (GPU archs, torch major.minor, torch's
// CUDA, Python tag), each with its value and where it came from, or why it is missing; the
// platform (machine and libc) and the wheel tags the target Python accepts.
//
// A process's target is composed from facts read elsewhere (caller_resolver.h: its
// interpreter's files, the GPUs it may use) and the mount's overrides; a key's target comes
// from the key alone (key.h).

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fs/common/expected.h"
#include "fs/targeting/gpu_probe.h"
#include "fs/targeting/key.h"
#include "fs/targeting/overrides.h"
#include "fs/targeting/python_info.h"
#include "fs/targeting/tags.h"
#include "fs/targeting/torch_probe.h"

namespace whfs::target {

struct Axis {
  std::string value;    // sm89, 2.9, 12.8, cp312; empty when missing
  std::string source;   // where the value came from, in words
  std::string missing;  // why there is no value, in words

  bool has_value() const { return !value.empty(); }
};

struct Target {
  Axis arch;            // sm89, or sm80+sm89: the folder must run on every one of them
  Axis torch;           // 2.9
  Axis cuda;            // 12.8
  Axis python_tag;      // cp312, cp313t (free-threaded)
  std::string machine;  // the wheel-tag machine: x86_64, aarch64, i686
  std::string libc;     // glibc "2.36"; "" without glibc
  SupportedTags tags;   // the tags the target Python installs; empty when python_tag is missing
  std::vector<std::string> platforms;  // the platform part of `tags`, best first

  // What was found, for the report. Absent when nothing was read (overridden, or a key).
  std::optional<PythonInfo> python;
  std::string python_error;
  std::optional<TorchInfo> torch_install;
  std::vector<GpuDevice> gpus;     // the GPUs counted for `arch`
  std::vector<std::string> notes;  // uncertain GPU mappings
};

// What a process's target is made of.
struct TargetFacts {
  // The interpreter's files (python_layout.h) and its torch, or why there is none.
  const PythonInfo* python = nullptr;
  std::string python_error;
  const TorchInfo* torch = nullptr;
  std::string torch_error;
  // The machine's GPUs (null: not probed) and the process's share of them.
  const GpuReport* machine_gpus = nullptr;
  const VisibleGpus* visible = nullptr;
  HostPlatform host;
};

// Override syntax, each normalised: arch "sm89" / "sm_89" / "8.9" -> "sm89"; torch "2.9" /
// "2.9.1" -> "2.9"; cuda "12.8" / "cu128" -> "12.8"; python_tag "cp312" / "3.12" -> "cp312",
// "cp313t" / "3.13t" -> "cp313t".
// The error is one sentence naming the option.
Expected<std::string, std::string> normalize_arch(std::string_view text);
Expected<std::string, std::string> normalize_torch(std::string_view text);
Expected<std::string, std::string> normalize_cuda(std::string_view text);
Expected<std::string, std::string> normalize_python_tag(std::string_view text);

// All overrides at once, for the option parser: the first bad one, or success.
Expected<void, std::string> validate_overrides(const TargetOverrides& overrides);

// The target of a process: every axis an override fixes comes from it, the others from the
// facts. A bad override leaves its axis missing with the reason; it is never replaced by
// detection, so a typo never turns into a guess. Pure.
Target compose_target(const TargetOverrides& overrides, const TargetFacts& facts);

// The wheel tags and platforms of `t` from its python_tag, machine and libc (compose_target
// and target_of call it).
void fill_tags(Target& t);

// A one-line summary: "sm89, torch 2.9, CUDA 12.8, cp312".
std::string summary(const Target& t);

// The target for current/.target and the command line.
nlohmann::json to_json(const Target& target);

}  // namespace whfs::target
