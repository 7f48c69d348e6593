#include "fs/targeting/target.h"

#include <algorithm>
#include <nlohmann/json.hpp>

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

// "cp313t" -> {13, "t"}.
std::pair<int, std::string> python_tag_parts(const std::string& tag) {
  const bool t = tag.ends_with("t");
  return {std::stoi(tag.substr(3, tag.size() - 3 - (t ? 1 : 0))), t ? "t" : ""};
}

void compose_python_tag(Target& t, const TargetOverrides& o, const TargetFacts& f) {
  if (apply_override(t.python_tag, "python_tag", "WHEELHOUSE_PYTHON_TAG", o.python_tag,
                     normalize_python_tag)) {
    return;
  }
  if (f.python == nullptr) {
    t.python_tag.missing = "no Python interpreter: " + f.python_error;
    return;
  }
  const PythonInfo& p = *f.python;
  if (!p.is_cpython()) {
    t.python_tag.missing = p.executable + " is " + p.implementation + " " + p.version() +
                           "; the wheelhouse holds CPython wheels";
    return;
  }
  if (!p.abiflags.empty() && p.abiflags != "t") {
    t.python_tag.missing = p.executable + " is a CPython build with ABI flags \"" + p.abiflags +
                           "\" (a debug build?); the wheelhouse holds release builds";
    return;
  }
  t.python_tag.value = p.python_tag() + p.abiflags;
  t.python_tag.source =
      "the interpreter " + p.executable + " (CPython " + p.version() + p.abiflags + ")";
}

void compose_torch_and_cuda(Target& t, const TargetOverrides& o, const TargetFacts& f) {
  const bool torch_set =
      apply_override(t.torch, "torch", "WHEELHOUSE_TORCH", o.torch, normalize_torch);
  const bool cuda_set = apply_override(t.cuda, "cuda", "WHEELHOUSE_CUDA", o.cuda, normalize_cuda);
  if (torch_set && cuda_set) return;
  std::string why;
  if (f.python == nullptr) {
    why = "no Python interpreter: " + f.python_error;
  } else if (f.torch != nullptr) {
    t.torch_install = *f.torch;
  } else {
    why = f.torch_error;
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

void compose_arch(Target& t, const TargetOverrides& o, const TargetFacts& f) {
  if (apply_override(t.arch, "arch", "WHEELHOUSE_ARCH", o.arch, normalize_arch)) return;
  if (f.machine_gpus == nullptr || f.visible == nullptr) {
    t.arch.missing = "the GPUs were not probed";
    return;
  }
  const GpuReport& r = *f.machine_gpus;
  const VisibleGpus& v = *f.visible;
  t.notes.insert(t.notes.end(), v.notes.begin(), v.notes.end());
  if (v.devices.empty()) {
    t.arch.missing = v.why;
    return;
  }
  t.gpus = v.devices;
  t.arch.value = arch_set(v.devices);
  t.arch.source = v.why + ", through the " + std::string(to_string(r.api)) + " " + r.library;
  if (t.arch.value.find('+') != std::string::npos) {
    t.notes.push_back("the GPUs this process may use differ (" + t.arch.value +
                      "): a folder is chosen only if its build runs on all of them");
  }
}

json axis_json(const Axis& a) {
  if (a.has_value()) return {{"value", a.value}, {"source", a.source}};
  return {{"value", nullptr}, {"missing", a.missing}};
}

json gpus_json(const std::vector<GpuDevice>& gpus) {
  json devices = json::array();
  for (const auto& d : gpus) {
    json j = {{"index", d.index}, {"arch", d.arch()}, {"name", d.name}};
    if (!d.uuid.empty()) j["uuid"] = d.uuid;
    devices.push_back(std::move(j));
  }
  return devices;
}

}  // namespace

namespace {

Expected<std::string, std::string> normalize_one_arch(std::string_view text) {
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

}  // namespace

// One arch, or several joined by '+' (a node whose GPUs differ): sorted, without repeats.
Expected<std::string, std::string> normalize_arch(std::string_view text) {
  std::vector<std::pair<int, std::string>> parts;
  std::string_view rest = text;
  while (true) {
    const auto plus = rest.find('+');
    auto one = normalize_one_arch(rest.substr(0, plus));
    if (!one) return unexpected(one.error());
    const int cc = std::stoi(one->substr(2));
    if (std::none_of(parts.begin(), parts.end(), [&](const auto& p) { return p.first == cc; })) {
      parts.emplace_back(cc, *one);
    }
    if (plus == std::string_view::npos) break;
    rest.remove_prefix(plus + 1);
  }
  // sm120 after sm89: by (major, minor), which is the number's order once split.
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.first / 10, a.first % 10) < std::make_pair(b.first / 10, b.first % 10);
  });
  std::string out;
  for (const auto& [cc, name] : parts) out += (out.empty() ? "" : "+") + name;
  return out;
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
  std::string_view s = text;
  const bool free_threaded = s.ends_with("t") && s.size() > 1;
  if (free_threaded) s.remove_suffix(1);
  const std::string flag = free_threaded ? "t" : "";
  if (auto parts = two_numbers(s); parts && parts->first == "3") {
    return "cp3" + strip_zeros(parts->second) + flag;
  }
  if (s.starts_with("cp3") && all_digits(s.substr(3)) && s.size() <= 5 && s.size() > 3 &&
      (s.size() == 4 || s[3] != '0')) {
    return std::string(s) + flag;
  }
  return unexpected("python_tag=" + std::string(text) +
                    ": expected a CPython 3 tag such as cp312 (cp313t: free-threaded)");
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

void fill_tags(Target& t) {
  t.platforms.clear();
  t.tags = SupportedTags();
  if (!t.python_tag.has_value() || t.machine.empty()) return;
  const auto [major, minor] = parse_glibc_version(t.libc);
  t.platforms = linux_platform_tags(t.machine, major, minor);
  const auto [py_minor, flags] = python_tag_parts(t.python_tag.value);
  t.tags = SupportedTags(cpython_tags(CPythonAbi{3, py_minor, flags}, t.platforms));
}

Target compose_target(const TargetOverrides& o, const TargetFacts& f) {
  Target t;
  if (f.python != nullptr) {
    t.python = *f.python;
  } else {
    t.python_error = f.python_error;
  }
  compose_python_tag(t, o, f);
  compose_torch_and_cuda(t, o, f);
  compose_arch(t, o, f);
  // The platform: the interpreter's own (its ELF header, its root's libc), else the host's.
  if (f.python != nullptr && !linux_wheel_arch(*f.python).empty()) {
    t.machine = linux_wheel_arch(*f.python);
    t.libc = f.python->glibc;
  } else {
    t.machine = f.host.machine;
    t.libc = f.host.libc;
    if (t.python_tag.has_value()) {
      t.notes.push_back("platform tags of the mount host (" + t.machine + ", glibc " + t.libc +
                        "), not of a Python interpreter");
    }
  }
  fill_tags(t);
  return t;
}

std::string summary(const Target& t) {
  auto axis = [](const Axis& a) { return a.has_value() ? a.value : "?"; };
  return axis(t.arch) + ", torch " + axis(t.torch) + ", CUDA " + axis(t.cuda) + ", " +
         axis(t.python_tag);
}

json to_json(const Target& t) {
  json j = {{"arch", axis_json(t.arch)}, {"torch", axis_json(t.torch)},
            {"cuda", axis_json(t.cuda)}, {"python_tag", axis_json(t.python_tag)},
            {"machine", t.machine},      {"glibc", t.libc.empty() ? json(nullptr) : json(t.libc)},
            {"platforms", t.platforms},  {"notes", t.notes}};
  if (t.python) {
    j["python"] = {
        {"executable", t.python->executable}, {"implementation", t.python->implementation},
        {"version", t.python->version()},     {"abiflags", t.python->abiflags},
        {"glibc", t.python->glibc},           {"platform", t.python->platform}};
  } else if (!t.python_error.empty()) {
    j["python"] = {{"error", t.python_error}};
  } else {
    j["python"] = nullptr;
  }
  if (t.torch_install) {
    j["torch_install"] = {
        {"version", t.torch_install->version},
        {"cuda", t.torch_install->cuda.empty() ? json(nullptr) : json(t.torch_install->cuda)},
        {"path", t.torch_install->path}};
  } else {
    j["torch_install"] = nullptr;
  }
  j["gpus"] = gpus_json(t.gpus);
  return j;
}

}  // namespace whfs::target
