#pragma once
// "This machine" as the wheelhouse sees it: four axes (GPU arch, torch major.minor, torch's
// CUDA, Python tag), each with its value and where it came from, or why it is missing, plus
// the wheel tags the target Python accepts. Detected at mount and on refresh, never per read.

#include <chrono>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fs/common/expected.h"
#include "fs/target/gpu_probe.h"
#include "fs/target/overrides.h"
#include "fs/target/python_probe.h"
#include "fs/target/tags.h"
#include "fs/target/torch_probe.h"

namespace whfs::target {

struct Axis {
  std::string value;    // sm89, 2.9, 12.8, cp312; empty when missing
  std::string source;   // where the value came from, in words
  std::string missing;  // why there is no value, in words

  bool has_value() const { return !value.empty(); }
};

struct Target {
  Axis arch;
  Axis torch;
  Axis cuda;
  Axis python_tag;
  SupportedTags tags;  // the tags the target Python installs; empty when python_tag is missing
  std::vector<std::string> platforms;  // the platform part of `tags`, best first

  // What the probes found, for the report. Absent when the probe did not run (its axes were
  // all overridden) or, for torch, when torch was not found.
  std::optional<PythonInfo> python;
  std::string python_error;
  std::optional<TorchInfo> torch_install;
  std::optional<GpuReport> gpu;
  std::vector<std::string> notes;  // heterogeneous GPUs, overrides that differ from the machine
};

struct DetectOptions {
  GpuProbeOptions gpu;  // library lists and deadline; cudart and site_dirs are filled in
  std::chrono::milliseconds python_timeout{10000};
};

// DetectOptions for the daemon: the library lists of GpuProbeOptions and CUDA_VISIBLE_DEVICES
// from `getenv`.
DetectOptions default_detect_options(const GetEnv& getenv);

// Override syntax, each normalised: arch "sm89" / "sm_89" / "8.9" -> "sm89"; torch "2.9" /
// "2.9.1" -> "2.9"; cuda "12.8" / "cu128" -> "12.8"; python_tag "cp312" / "3.12" -> "cp312".
// The error is one sentence naming the option.
Expected<std::string, std::string> normalize_arch(std::string_view text);
Expected<std::string, std::string> normalize_torch(std::string_view text);
Expected<std::string, std::string> normalize_cuda(std::string_view text);
Expected<std::string, std::string> normalize_python_tag(std::string_view text);

// All overrides at once, for the option parser: the first bad one, or success.
Expected<void, std::string> validate_overrides(const TargetOverrides& overrides);

// Probes what the overrides leave open: the Python interpreter (unless torch, cuda and
// python_tag are all overridden and arch is too), torch/version.py, the GPUs (unless arch is
// overridden). A bad override leaves its axis missing with the reason; it is not replaced by
// detection, so a typo never turns into a guess.
Target detect_target(const TargetOverrides& overrides, const DetectOptions& options);

// The target for current/.target and the command line.
nlohmann::json to_json(const Target& target);

}  // namespace whfs::target
