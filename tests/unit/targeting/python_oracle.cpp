#include "tests/unit/targeting/python_oracle.h"

#include <nlohmann/json.hpp>

#include "fs/targeting/child_process.h"

namespace whfs::target::testing {
namespace {

using nlohmann::json;

// Standard library only, and valid Python 2 too so that a wrong interpreter is reported by
// version rather than by a syntax error.
constexpr const char* kProbeScript = R"PY(
import json, os, platform, site, struct, sys, sysconfig
cands = list(sys.path)
try:
    cands += site.getsitepackages()
except Exception:
    pass
try:
    if site.ENABLE_USER_SITE:
        cands.append(site.getusersitepackages())
except Exception:
    pass
dirs = []
for d in cands:
    if isinstance(d, str) and d and os.path.isdir(d) and d not in dirs:
        dirs.append(d)
try:
    libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
except Exception:
    libc = ""
print(json.dumps({
    "implementation": sys.implementation.name,
    "major": sys.version_info[0], "minor": sys.version_info[1],
    "abiflags": getattr(sys, "abiflags", ""),
    "executable": sys.executable or "",
    "libc": libc,
    "platform": sysconfig.get_platform(),
    "pointer_bits": 8 * struct.calcsize("P"),
    "site_dirs": dirs,
}))
)PY";

std::string last_line(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.remove_suffix(1);
  }
  const auto nl = text.rfind('\n');
  return std::string(nl == std::string_view::npos ? text : text.substr(nl + 1));
}

std::string shorten(std::string s) {
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  for (char& c : s) {
    if (c == '\n' || c == '\r' || c == '\0') c = ' ';
  }
  return s;
}

std::string string_field(const json& j, const char* key) {
  const auto it = j.find(key);
  return (it != j.end() && it->is_string()) ? it->get<std::string>() : std::string();
}

int int_field(const json& j, const char* key, int fallback) {
  const auto it = j.find(key);
  return (it != j.end() && it->is_number_integer()) ? it->get<int>() : fallback;
}

}  // namespace

Expected<PythonInfo, std::string> parse_python_probe(std::string_view output) {
  const std::string line = last_line(output);
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("major") || !j.contains("implementation")) {
    return unexpected("no probe result in its output: \"" + shorten(line) + "\"");
  }
  PythonInfo p;
  p.implementation = string_field(j, "implementation");
  p.major = int_field(j, "major", 0);
  p.minor = int_field(j, "minor", 0);
  p.abiflags = string_field(j, "abiflags");
  p.executable = string_field(j, "executable");
  p.platform = string_field(j, "platform");
  p.pointer_bits = int_field(j, "pointer_bits", 64);
  // os.confstr gives "glibc 2.36"; anything else (musl has no such name) means no glibc.
  const std::string libc = string_field(j, "libc");
  if (libc.starts_with("glibc ")) p.glibc = libc.substr(6);
  if (const auto it = j.find("site_dirs"); it != j.end() && it->is_array()) {
    for (const auto& d : *it) {
      if (d.is_string()) p.site_dirs.push_back(d.get<std::string>());
    }
  }
  if (p.major <= 0 || p.minor < 0 || p.implementation.empty()) {
    return unexpected(std::string("the probe result has no Python version"));
  }
  return p;
}

Expected<PythonInfo, std::string> probe_python(const std::string& interpreter,
                                               std::chrono::milliseconds timeout) {
  const std::string program = interpreter.empty() ? std::string("python3") : interpreter;
  const bool on_path = program.find('/') == std::string::npos;
  const std::string who = "python interpreter '" + program + "'";
  const ChildResult r = run_program({program, "-c", kProbeScript}, timeout);
  if (r.end == ChildResult::End::kStartFailed) {
    if (on_path && r.start_error.ends_with("No such file or directory")) {
      return unexpected(who + " not found on PATH (set python=/path/to/python)");
    }
    return unexpected(who + " " + r.describe());
  }
  if (!r.ok()) {
    const std::string why = last_line(r.err);
    return unexpected(who + " " + r.describe() + (why.empty() ? "" : ": " + shorten(why)));
  }
  auto info = parse_python_probe(r.out);
  if (!info) return unexpected(who + " is not usable: " + info.error());
  if (info->major != 3) {
    return unexpected(who + " is Python " + info->version() + "; Python 3 is needed");
  }
  return info;
}

}  // namespace whfs::target::testing
