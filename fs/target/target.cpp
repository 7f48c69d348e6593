#include "fs/target/target.h"

#include <gnu/libc-version.h>
#include <sys/utsname.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "fs/target/cuda_errors.h"

namespace whfs::target {
namespace {

using nlohmann::json;

bool all_digits(std::string_view s) {
  return !s.empty() && s.size() < 6 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "12.8" -> {"12", "8"}; nullopt unless two dot-separated numbers.
std::optional<std::pair<std::string_view, std::string_view>> two_numbers(std::string_view s) {
  const auto dot = s.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const auto a = s.substr(0, dot);
  const auto b = s.substr(dot + 1);
  if (!all_digits(a) || !all_digits(b)) return std::nullopt;
  return std::make_pair(a, b);
}

// "2.9" or "2.9.1" -> {"2", "9"}: a third number (a patch level) is accepted and dropped.
std::optional<std::pair<std::string_view, std::string_view>> major_minor_of(std::string_view s) {
  const auto first = s.find('.');
  if (first != std::string_view::npos) {
    const auto second = s.find('.', first + 1);
    if (second != std::string_view::npos) {
      if (!all_digits(s.substr(second + 1))) return std::nullopt;
      s = s.substr(0, second);
    }
  }
  return two_numbers(s);
}

std::string strip_zeros(std::string_view digits) {
  while (digits.size() > 1 && digits.front() == '0') digits.remove_prefix(1);
  return std::string(digits);
}

// Fills `axis` from an override, if there is one. Returns true when the override decided the
// axis (valid or not): a bad override is reported, never replaced by detection.
// The options struct has already merged WHEELHOUSE_* into the option fields, so the source
// names both.
bool apply_override(Axis& axis, const char* key, const char* env, const std::string& text,
                    Expected<std::string, std::string> (*normalize)(std::string_view)) {
  if (text.empty()) return false;
  auto v = normalize(text);
  if (v) {
    axis.value = *v;
    axis.source = std::string("override ") + key + "=" + text + " (mount option or " + env + ")";
  } else {
    axis.missing = v.error();
  }
  return true;
}

// The platform tags of the daemon's own process: for a python_tag override when the target
// interpreter could not be asked.
std::vector<std::string> host_platforms() {
  utsname u{};
  const std::string machine = ::uname(&u) == 0 ? u.machine : "x86_64";
  const auto [major, minor] = parse_glibc_version(::gnu_get_libc_version());
  return linux_platform_tags(machine, major, minor);
}

std::vector<std::string> python_platforms(const PythonInfo& p) {
  const std::string arch = linux_wheel_arch(p);
  if (arch.empty()) return {};
  const auto [major, minor] = parse_glibc_version(p.glibc);
  return linux_platform_tags(arch, major, minor);
}

void detect_python_tag(Target& t, const TargetOverrides& o) {
  std::optional<CPythonAbi> abi;
  if (apply_override(t.python_tag, "python_tag", "WHEELHOUSE_PYTHON_TAG", o.python_tag,
                     normalize_python_tag)) {
    if (t.python_tag.has_value()) {
      abi = CPythonAbi{3, std::stoi(t.python_tag.value.substr(3)), ""};
    }
  } else if (!t.python) {
    t.python_tag.missing = "no Python interpreter: " + t.python_error;
  } else if (!t.python->is_cpython()) {
    t.python_tag.missing = t.python->executable + " is " + t.python->implementation + " " +
                           t.python->version() + "; the wheelhouse holds CPython wheels";
  } else {
    t.python_tag.value = t.python->python_tag();
    t.python_tag.source = "interpreter " + t.python->executable + " (CPython " +
                          t.python->version() + t.python->abiflags + ")";
    abi = CPythonAbi{t.python->major, t.python->minor, t.python->abiflags};
  }
  if (!abi) return;
  t.platforms = t.python ? python_platforms(*t.python) : std::vector<std::string>{};
  if (t.platforms.empty()) {
    t.platforms = host_platforms();
    t.notes.push_back("platform tags from this process (glibc " +
                      std::string(::gnu_get_libc_version()) + "), not from a Python interpreter");
  }
  t.tags = SupportedTags(cpython_tags(*abi, t.platforms));
}

void detect_torch_and_cuda(Target& t, const TargetOverrides& o) {
  const bool torch_set =
      apply_override(t.torch, "torch", "WHEELHOUSE_TORCH", o.torch, normalize_torch);
  const bool cuda_set = apply_override(t.cuda, "cuda", "WHEELHOUSE_CUDA", o.cuda, normalize_cuda);
  if (torch_set && cuda_set) return;
  std::string why;
  if (!t.python) {
    why = "no Python interpreter: " + t.python_error;
  } else if (auto found = find_torch(t.python->site_dirs)) {
    t.torch_install = *found;
  } else {
    why = found.error();
  }
  const auto& ti = t.torch_install;
  if (!torch_set) {
    if (ti) {
      t.torch.value = ti->major_minor;
      t.torch.source = "torch " + ti->version + " (" + ti->path + ")";
    } else {
      t.torch.missing = why;
    }
  }
  if (!cuda_set) {
    if (!ti) {
      t.cuda.missing = why;
    } else if (ti->cuda.empty()) {
      t.cuda.missing = "torch " + ti->version + " is a " +
                       (ti->hip.empty() ? "CPU" : "ROCm (hip " + ti->hip + ")") +
                       " build: its version.py has cuda = None (set cuda= to override)";
    } else if (auto c = normalize_cuda(ti->cuda)) {
      t.cuda.value = *c;
      t.cuda.source =
          "torch " + ti->version + " was built with CUDA " + ti->cuda + " (" + ti->path + ")";
    } else {
      t.cuda.missing = ti->path + ": cuda = '" + ti->cuda + "' is not a CUDA version";
    }
  }
}

void detect_arch(Target& t, const TargetOverrides& o, const DetectOptions& options) {
  if (apply_override(t.arch, "arch", "WHEELHOUSE_ARCH", o.arch, normalize_arch)) return;
  GpuProbeOptions g = options.gpu;
  g.cudart = o.cudart;
  if (t.python) g.site_dirs = t.python->site_dirs;
  t.gpu = probe_gpus(g);
  const GpuReport& r = *t.gpu;
  if (!r.found()) {
    t.arch.missing = r.error;
    return;
  }
  const GpuDevice& d = r.devices.front();
  t.arch.value = d.arch();
  t.arch.source = "device 0" + (d.name.empty() ? "" : " (" + d.name + ")") + " through the " +
                  to_string(r.api) + " " + r.library;
  if (auto note = r.heterogeneity_note(); !note.empty()) t.notes.push_back(note);
}

json axis_json(const Axis& a) {
  if (a.has_value()) return {{"value", a.value}, {"source", a.source}};
  return {{"value", nullptr}, {"missing", a.missing}};
}

json gpu_json(const GpuReport& r) {
  json devices = json::array();
  for (const auto& d : r.devices) {
    devices.push_back({{"index", d.index}, {"arch", d.arch()}, {"name", d.name}});
  }
  json attempts = json::array();
  for (const auto& a : r.attempts) {
    attempts.push_back({{"api", to_string(a.api)}, {"library", a.library}, {"outcome", a.outcome}});
  }
  json j = {{"devices", devices}, {"attempts", attempts}};
  if (r.found()) {
    j["api"] = to_string(r.api);
    j["library"] = r.library;
    j["runtime_version"] = cuda_version_text(r.runtime_version);
    j["driver_version"] = cuda_version_text(r.driver_version);
  } else {
    j["error"] = r.error;
  }
  return j;
}

}  // namespace

DetectOptions default_detect_options(const GetEnv& getenv) {
  DetectOptions d;
  if (const char* v = getenv("CUDA_VISIBLE_DEVICES"); v != nullptr) {
    d.gpu.cuda_visible_devices = std::string(v);
  }
  return d;
}

Expected<std::string, std::string> normalize_arch(std::string_view text) {
  std::string_view s = text;
  std::string digits;
  if (auto parts = two_numbers(s)) {  // compute capability "8.9"
    if (parts->second.size() != 1) {
      return unexpected("arch=" + std::string(text) + ": the minor number has one digit (8.9)");
    }
    digits = strip_zeros(parts->first) + std::string(parts->second);
  } else {
    if (s.starts_with("sm_")) {
      s.remove_prefix(3);
    } else if (s.starts_with("sm")) {
      s.remove_prefix(2);
    } else {
      s = {};
    }
    if (!all_digits(s) || s.size() < 2 || s.front() == '0') {
      return unexpected("arch=" + std::string(text) +
                        ": expected smXY as in the folder names (sm89, sm120) or a compute "
                        "capability (8.9)");
    }
    digits = std::string(s);
  }
  if (digits.size() < 2 || digits.front() == '0') {
    return unexpected("arch=" + std::string(text) + ": not a compute capability");
  }
  return "sm" + digits;
}

Expected<std::string, std::string> normalize_torch(std::string_view text) {
  const auto parts = major_minor_of(text);
  if (!parts || text.find('+') != std::string_view::npos) {
    return unexpected("torch=" + std::string(text) +
                      ": expected major.minor such as 2.9 (the CUDA version goes in cuda=)");
  }
  return strip_zeros(parts->first) + "." + strip_zeros(parts->second);
}

Expected<std::string, std::string> normalize_cuda(std::string_view text) {
  if (text.starts_with("cu") && text.size() >= 4 && all_digits(text.substr(2))) {
    const auto d = text.substr(2);  // cu128 -> 12.8: the last digit is the minor
    return strip_zeros(d.substr(0, d.size() - 1)) + "." + std::string(d.substr(d.size() - 1));
  }
  const auto parts = major_minor_of(text);
  if (!parts || parts->second.size() != 1) {
    return unexpected("cuda=" + std::string(text) +
                      ": expected major.minor such as 12.8 (or the folder form cu128)");
  }
  return strip_zeros(parts->first) + "." + std::string(parts->second);
}

Expected<std::string, std::string> normalize_python_tag(std::string_view text) {
  if (auto parts = two_numbers(text); parts && parts->first == "3") {
    return "cp3" + strip_zeros(parts->second);
  }
  if (text.starts_with("cp3") && all_digits(text.substr(3)) && text.size() <= 5) {
    return std::string(text);
  }
  return unexpected("python_tag=" + std::string(text) + ": expected a CPython 3 tag such as cp312");
}

Expected<void, std::string> validate_overrides(const TargetOverrides& o) {
  const std::pair<const std::string*, Expected<std::string, std::string> (*)(std::string_view)>
      checks[] = {{&o.arch, normalize_arch},
                  {&o.torch, normalize_torch},
                  {&o.cuda, normalize_cuda},
                  {&o.python_tag, normalize_python_tag}};
  for (const auto& [value, normalize] : checks) {
    if (value->empty()) continue;
    if (auto v = normalize(*value); !v) return unexpected(v.error());
  }
  return {};
}

Target detect_target(const TargetOverrides& o, const DetectOptions& options) {
  Target t;
  // The interpreter answers three axes and tells where torch's own libcudart is; it is asked
  // unless every axis it could inform is overridden.
  const bool need_python =
      o.torch.empty() || o.cuda.empty() || o.python_tag.empty() || o.arch.empty();
  if (need_python) {
    auto p = probe_python(o.python, options.python_timeout);
    if (p) {
      t.python = std::move(*p);
    } else {
      t.python_error = p.error();
    }
  } else {
    t.python_error = "not asked: torch, cuda, python_tag and arch are all overridden";
  }
  detect_python_tag(t, o);
  detect_torch_and_cuda(t, o);
  detect_arch(t, o, options);
  return t;
}

json to_json(const Target& t) {
  json j = {{"arch", axis_json(t.arch)}, {"torch", axis_json(t.torch)},
            {"cuda", axis_json(t.cuda)}, {"python_tag", axis_json(t.python_tag)},
            {"platforms", t.platforms},  {"notes", t.notes}};
  if (t.python) {
    j["python"] = {
        {"executable", t.python->executable}, {"implementation", t.python->implementation},
        {"version", t.python->version()},     {"abiflags", t.python->abiflags},
        {"glibc", t.python->glibc},           {"platform", t.python->platform}};
  } else {
    j["python"] = {{"error", t.python_error}};
  }
  if (t.torch_install) {
    j["torch_install"] = {
        {"version", t.torch_install->version},
        {"cuda", t.torch_install->cuda.empty() ? json(nullptr) : json(t.torch_install->cuda)},
        {"path", t.torch_install->path}};
  } else {
    j["torch_install"] = nullptr;
  }
  if (t.gpu) {
    j["gpu"] = gpu_json(*t.gpu);
  } else {
    j["gpu"] = {{"skipped", "arch is overridden"}};
  }
  return j;
}

}  // namespace whfs::target
