#pragma once
// Which folder of a package runs on the target: pure functions over folder names.
//
//   arch:  the exact smXY folder, else the highest folder of the same major with a lower or
//          equal minor (sm80 code runs on sm86 and sm89); never across majors (sm90 cannot
//          run sm80 code, sm120 cannot run sm89 code). When the best arch folder has no usable
//          torch folder, the next compatible arch folder is tried.
//   torch: major.minor must match exactly (an extension links against torch's C++ ABI).
//   CUDA:  the major must match; the exact CUDA is preferred, else the highest older minor
//          (runs on torch's newer runtime), else the lowest newer minor (may need symbols the
//          older runtime lacks: the reason says so).

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fs/targeting/target.h"

namespace whfs::target {

struct ComputeCapability {
  int major = 0;
  int minor = 0;
};
// "sm89" -> {8, 9}, "sm120" -> {12, 0}: the last digit is the minor. nullopt otherwise.
std::optional<ComputeCapability> parse_arch_folder(std::string_view name);

struct TorchFolder {
  int torch_major = 0;
  int torch_minor = 0;
  int cuda_major = 0;
  int cuda_minor = 0;
};
// "torch2.9-cu128" -> {2, 9, 12, 8}. nullopt otherwise.
std::optional<TorchFolder> parse_torch_folder(std::string_view name);

// One package's folders: arch folder name -> the torch folder names inside it.
using PackageFolders = std::map<std::string, std::vector<std::string>>;

struct FolderChoice {
  bool found = false;
  std::string arch_folder;   // sm80
  std::string torch_folder;  // torch2.9-cu128
  // Why this folder, or why none: "sm86 has no folder; sm80 runs on sm86 (same major, lower
  // minor); torch2.9-cu128 matches torch 2.9 with CUDA 12.8".
  std::string reason;
  std::vector<std::string> ignored;  // folder names that do not parse (sm89/README, foo)

  std::string path() const { return arch_folder + "/" + torch_folder; }
};

FolderChoice choose_folder(const Target& target, const PackageFolders& folders);

// {"found", "folder", "reason", "ignored"} for current/.target.
nlohmann::json to_json(const FolderChoice& choice);

}  // namespace whfs::target
