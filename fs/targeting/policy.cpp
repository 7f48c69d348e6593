#include "fs/targeting/policy.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "fs/common/text.h"

namespace whfs::target {
namespace {

// Digits only, at most 5, as an int.
std::optional<int> number(std::string_view s) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// "cu128" digits -> {12, 8}.
std::optional<std::pair<int, int>> cuda_digits(std::string_view digits) {
  if (digits.size() < 2) return std::nullopt;
  const auto major = number(digits.substr(0, digits.size() - 1));
  const auto minor = number(digits.substr(digits.size() - 1));
  if (!major || !minor || digits.front() == '0') return std::nullopt;
  return std::make_pair(*major, *minor);
}

std::string cu(int major, int minor) {
  return "cu" + std::to_string(major) + std::to_string(minor);
}

std::string join(const std::vector<std::string>& items, std::string_view sep = ", ") {
  return whfs::join(items, sep);
}

struct Want {
  ComputeCapability arch;
  int torch_major = 0;
  int torch_minor = 0;
  int cuda_major = 0;
  int cuda_minor = 0;
  std::string torch_text;  // 2.9
  std::string cuda_text;   // 12.8
};

struct TorchPick {
  std::string folder;  // empty: nothing usable; `why` says why
  std::string why;
};

// The torch folder of one arch folder for `want`, with its reason.
TorchPick pick_torch(const std::string& arch_name, const std::vector<std::string>& names,
                     const Want& want, std::vector<std::string>& ignored) {
  std::vector<std::pair<TorchFolder, std::string>> same_torch;
  std::vector<std::string> other_torch;
  for (const auto& n : names) {
    const auto f = parse_torch_folder(n);
    if (!f) {
      ignored.push_back(arch_name + '/' + n);
    } else if (f->torch_major == want.torch_major && f->torch_minor == want.torch_minor) {
      same_torch.emplace_back(*f, n);
    } else {
      other_torch.push_back(n);
    }
  }
  const std::string torch_folder = "torch" + want.torch_text;
  if (same_torch.empty()) {
    return {"", "no " + torch_folder + " folder for " + arch_name +
                    (other_torch.empty() ? "" : " (it has " + join(other_torch) + ")")};
  }
  std::vector<std::pair<TorchFolder, std::string>> same_major;
  std::vector<std::string> majors;
  for (const auto& [f, n] : same_torch) {
    if (f.cuda_major == want.cuda_major) {
      same_major.emplace_back(f, n);
    } else if (const auto m = "cu" + std::to_string(f.cuda_major) + "x";
               std::find(majors.begin(), majors.end(), m) == majors.end()) {
      majors.push_back(m);
    }
  }
  if (same_major.empty()) {
    return {"", "only " + join(majors) + " builds for torch " + want.torch_text + " in " +
                    arch_name + "; CUDA " + want.cuda_text + " needs a cu" +
                    std::to_string(want.cuda_major) + "x build"};
  }
  // Exact first, then the highest older minor, then the lowest newer minor.
  auto score = [&](const TorchFolder& f) {
    if (f.cuda_minor == want.cuda_minor) return 0;
    if (f.cuda_minor < want.cuda_minor) return 100 + (want.cuda_minor - f.cuda_minor);
    return 200 + (f.cuda_minor - want.cuda_minor);
  };
  const auto best =
      std::min_element(same_major.begin(), same_major.end(), [&](const auto& a, const auto& b) {
        const int sa = score(a.first);
        const int sb = score(b.first);
        return sa != sb ? sa < sb : a.second < b.second;
      });
  const TorchFolder& f = best->first;
  const std::string exact = cu(want.cuda_major, want.cuda_minor);
  std::string why;
  if (f.cuda_minor == want.cuda_minor) {
    why = best->second + " matches torch " + want.torch_text + " with CUDA " + want.cuda_text;
  } else if (f.cuda_minor < want.cuda_minor) {
    why = best->second + ": no " + exact + " build; " + cu(f.cuda_major, f.cuda_minor) +
          " is the closest older CUDA " + std::to_string(f.cuda_major) +
          " build and runs with torch's CUDA " + want.cuda_text;
  } else {
    why = best->second + ": no " + exact + " or older CUDA " + std::to_string(want.cuda_major) +
          " build; " + cu(f.cuda_major, f.cuda_minor) + " is newer than torch's CUDA " +
          want.cuda_text + " and may need a newer CUDA runtime than torch ships";
  }
  return {best->second, why};
}

std::optional<std::string> read_want(const Target& t, Want& w) {
  if (!t.arch.has_value()) return "no GPU arch: " + t.arch.missing;
  if (!t.torch.has_value()) return "no torch version: " + t.torch.missing;
  if (!t.cuda.has_value()) return "no CUDA version: " + t.cuda.missing;
  // One arch, or several (the GPUs a process may use differ): a build must run on all of
  // them, so they must share a major, and the lowest minor bounds the folder.
  std::optional<ComputeCapability> arch;
  std::string rest = t.arch.value;
  while (true) {
    const auto plus = rest.find('+');
    const auto one = parse_arch_folder(std::string_view(rest).substr(0, plus));
    if (!one) {
      arch.reset();
      break;
    }
    if (arch && arch->major != one->major) {
      return "the GPUs differ in major (" + t.arch.value +
             "): no single build runs on all of them (limit the process to one kind with "
             "CUDA_VISIBLE_DEVICES)";
    }
    if (!arch || one->minor < arch->minor) arch = one;
    if (plus == std::string::npos) break;
    rest = rest.substr(plus + 1);
  }
  const auto torch_dot = t.torch.value.find('.');
  const auto cuda_dot = t.cuda.value.find('.');
  if (!arch || torch_dot == std::string::npos || cuda_dot == std::string::npos) {
    return "the target is malformed: arch " + t.arch.value + ", torch " + t.torch.value +
           ", cuda " + t.cuda.value;
  }
  const auto tm = number(std::string_view(t.torch.value).substr(0, torch_dot));
  const auto tn = number(std::string_view(t.torch.value).substr(torch_dot + 1));
  const auto cm = number(std::string_view(t.cuda.value).substr(0, cuda_dot));
  const auto cn = number(std::string_view(t.cuda.value).substr(cuda_dot + 1));
  if (!tm || !tn || !cm || !cn) {
    return "the target is malformed: torch " + t.torch.value + ", cuda " + t.cuda.value;
  }
  w = Want{*arch, *tm, *tn, *cm, *cn, t.torch.value, t.cuda.value};
  return std::nullopt;
}

}  // namespace

std::optional<ComputeCapability> parse_arch_folder(std::string_view name) {
  if (!name.starts_with("sm")) return std::nullopt;
  const auto digits = name.substr(2);
  if (digits.size() < 2 || digits.size() > 4 || digits.front() == '0') return std::nullopt;
  const auto major = number(digits.substr(0, digits.size() - 1));
  const auto minor = number(digits.substr(digits.size() - 1));
  if (!major || !minor) return std::nullopt;
  return ComputeCapability{*major, *minor};
}

std::optional<TorchFolder> parse_torch_folder(std::string_view name) {
  if (!name.starts_with("torch")) return std::nullopt;
  const auto rest = name.substr(5);
  const auto dash = rest.find("-cu");
  if (dash == std::string_view::npos) return std::nullopt;
  const auto version = rest.substr(0, dash);
  const auto dot = version.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const auto tm = number(version.substr(0, dot));
  const auto tn = number(version.substr(dot + 1));
  const auto c = cuda_digits(rest.substr(dash + 3));
  if (!tm || !tn || !c) return std::nullopt;
  return TorchFolder{*tm, *tn, c->first, c->second};
}

FolderChoice choose_folder(const Target& target, const PackageFolders& folders) {
  FolderChoice choice;
  Want want;
  if (auto bad = read_want(target, want)) {
    choice.reason = *bad;
    return choice;
  }
  const bool several = target.arch.value.find('+') != std::string::npos;
  const std::string arch_name = several ? "all of " + target.arch.value : target.arch.value;
  // Compatible arch folders, best first: same major, minor <= the GPU's, highest first.
  std::vector<std::pair<ComputeCapability, std::string>> usable;
  std::vector<std::string> others;
  for (const auto& [name, torch_folders] : folders) {
    const auto a = parse_arch_folder(name);
    if (!a) {
      choice.ignored.push_back(name);
    } else if (a->major == want.arch.major && a->minor <= want.arch.minor) {
      usable.emplace_back(*a, name);
    } else {
      others.push_back(name);
    }
  }
  std::sort(usable.begin(), usable.end(),
            [](const auto& a, const auto& b) { return a.first.minor > b.first.minor; });
  if (usable.empty()) {
    choice.reason =
        "no sm" + std::to_string(want.arch.major) + "x folder at or below " + arch_name +
        (others.empty() ? ""
                        : " (only " + join(others) + ", which cannot run on " + arch_name + ")");
    return choice;
  }
  std::vector<std::string> why_not;
  for (const auto& [cc, name] : usable) {
    TorchPick pick = pick_torch(name, folders.at(name), want, choice.ignored);
    if (pick.folder.empty()) {
      why_not.push_back(std::move(pick.why));
      continue;
    }
    choice.found = true;
    choice.arch_folder = name;
    choice.torch_folder = pick.folder;
    std::vector<std::string> parts;
    if (cc.minor == want.arch.minor && !several) {
      parts.push_back(name + " matches the GPU exactly");
    } else if (several) {
      parts.insert(parts.end(), why_not.begin(), why_not.end());
      parts.push_back(name + " runs on " + arch_name + " (same major, minor at most the lowest)");
    } else {
      if (usable.front().first.minor != want.arch.minor) {
        parts.push_back("no " + arch_name + " folder");
      }
      parts.insert(parts.end(), why_not.begin(), why_not.end());
      parts.push_back(name + " runs on " + arch_name + " (same major, lower minor)");
    }
    parts.push_back(std::move(pick.why));
    choice.reason = join(parts, "; ");
    return choice;
  }
  choice.reason = join(why_not, "; ");
  return choice;
}

nlohmann::json to_json(const FolderChoice& c) {
  nlohmann::json j = {{"found", c.found}, {"reason", c.reason}, {"ignored", c.ignored}};
  j["folder"] = c.found ? nlohmann::json(c.path()) : nlohmann::json(nullptr);
  return j;
}

}  // namespace whfs::target
