#pragma once
// The target Python interpreter, asked about itself in a child process (no shell, a deadline):
// its version and ABI flags, libc, platform and the folders it imports from. Nothing is
// imported but the standard library.

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "fs/common/expected.h"

namespace whfs::target {

struct PythonInfo {
  std::string implementation;  // sys.implementation.name: cpython, pypy, ...
  int major = 0;
  int minor = 0;
  std::string abiflags;    // sys.abiflags
  std::string executable;  // sys.executable
  std::string glibc;       // "2.36"; empty when the libc is not glibc (musl)
  std::string platform;    // sysconfig.get_platform(): linux-x86_64
  int pointer_bits = 64;   // a 32-bit interpreter on a 64-bit kernel takes i686 wheels
  // Existing folders in import order (sys.path), then site.getsitepackages() and the user
  // site (when enabled) if sys.path lacks them. The first torch found here is the one
  // `import torch` would load.
  std::vector<std::string> site_dirs;

  bool is_cpython() const { return implementation == "cpython"; }
  std::string python_tag() const;  // cp311 (CPython), else e.g. pypy310
  std::string version() const;     // 3.11
};

// The interpreter: a path, or a name looked up on PATH ("python3" when empty).
inline constexpr std::string_view kDefaultPython = "python3";

// Runs `interpreter -c <probe>` and parses its answer. A missing interpreter, a crash, a
// timeout, a non-zero exit or output that is not the probe's JSON give one sentence, e.g.
// "python interpreter 'python3.99' not found on PATH (set python=/path/to/python)".
Expected<PythonInfo, std::string> probe_python(
    const std::string& interpreter,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

// Parses the probe's output (the last non-empty line must be its JSON object). Pure.
Expected<PythonInfo, std::string> parse_python_probe(std::string_view output);

// glibc "2.36" -> {2, 36}; {0, 0} when empty or not a version.
std::pair<int, int> parse_glibc_version(std::string_view text);

// The Linux architecture name wheel tags use for this interpreter: x86_64, aarch64, i686 (a
// 32-bit interpreter on x86_64). Empty when the platform is not linux-*.
std::string linux_wheel_arch(const PythonInfo& python);

}  // namespace whfs::target
