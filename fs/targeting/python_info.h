#pragma once
// What decides a Python interpreter's wheel tags and imports: its version, ABI flags, platform,
// libc and the folders it imports from. The product reads these from the interpreter's files
// (python_layout.h) and never runs it; the tests compare that reading with the interpreter's
// own answer (tests/unit/targeting/python_oracle.h).

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace whfs::target {

struct PythonInfo {
  std::string implementation;  // cpython
  int major = 0;
  int minor = 0;
  std::string abiflags;    // "" or "t" (free-threaded)
  std::string executable;  // the path it is run by (a venv's bin/python)
  std::string glibc;       // "2.36"; empty when the libc is not glibc (musl)
  std::string platform;    // sysconfig.get_platform(): linux-x86_64
  int pointer_bits = 64;   // a 32-bit interpreter on a 64-bit kernel takes i686 wheels
  // Existing folders in import order (sys.path's). The first torch found here is the one
  // `import torch` would load.
  std::vector<std::string> site_dirs;

  bool is_cpython() const { return implementation == "cpython"; }
  std::string python_tag() const;  // cp311 (CPython), else e.g. pypy310
  std::string version() const;     // 3.11
};

// glibc "2.36" -> {2, 36}; {0, 0} when empty or not a version.
std::pair<int, int> parse_glibc_version(std::string_view text);

// The Linux architecture name wheel tags use for this interpreter: x86_64, aarch64, i686 (a
// 32-bit interpreter on x86_64). Empty when the platform is not linux-*.
std::string linux_wheel_arch(const PythonInfo& python);

}  // namespace whfs::target
