#include "fs/targeting/python_info.h"

namespace whfs::target {

std::string PythonInfo::python_tag() const {
  const std::string nodot = std::to_string(major) + std::to_string(minor);
  if (implementation == "cpython") return "cp" + nodot;
  if (implementation == "pypy") return "pp" + nodot;
  return implementation + nodot;
}

std::string PythonInfo::version() const {
  return std::to_string(major) + "." + std::to_string(minor);
}

std::pair<int, int> parse_glibc_version(std::string_view text) {
  int major = 0;
  int minor = 0;
  std::size_t i = 0;
  auto number = [&](int& out) {
    const std::size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i - start < 6) {
      out = out * 10 + (text[i] - '0');
      ++i;
    }
    return i > start;
  };
  // glibc forks append junk after major.minor ("2.20-2014.11"); only the first two count.
  if (!number(major) || i >= text.size() || text[i] != '.') return {0, 0};
  ++i;
  if (!number(minor)) return {0, 0};
  return {major, minor};
}

std::string linux_wheel_arch(const PythonInfo& python) {
  constexpr std::string_view kPrefix = "linux-";
  if (!python.platform.starts_with(kPrefix)) return "";
  std::string arch = python.platform.substr(kPrefix.size());
  for (char& c : arch) {
    if (c == '-' || c == '.' || c == ' ') c = '_';
  }
  if (python.pointer_bits == 32 && arch == "x86_64") return "i686";
  if (python.pointer_bits == 32 && arch == "aarch64") return "armv8l";
  return arch;
}

}  // namespace whfs::target
