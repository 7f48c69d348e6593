#pragma once
// What a wheel's local version label (PEP 440, after "+") says about the build it was made
// for. Builders spell torch and CUDA in several ways; the common forms are read:
//
//   +cu128torch2.9        CUDA 12.8, torch 2.9 (this dataset's own wheels)
//   +cu12torch2.9cxx11abiTRUE    CUDA 12 (major only), torch 2.9 (flash-attn releases)
//   +torch250cu124        torch 2.5(.0), CUDA 12.4 (natten: M m p digits)
//   +pt25cu124            torch 2.5, CUDA 12.4 (PyG: major and minor digits)
//   +cu128  +torch2.9  +cuda12.8  +cpu  +rocm6.2
//
// A name is read only where a word starts ("cu" in "cxx11abi" is not CUDA). What a label does
// not name is not a conflict: a label without torch says nothing about torch.

#include <optional>
#include <string>
#include <string_view>

namespace whfs::check {

struct VersionPair {
  int major = 0;
  int minor = -1;  // -1: only the major is named (cu12)
};

struct LocalBuild {
  std::optional<VersionPair> cuda;
  std::optional<VersionPair> torch;
  bool cpu = false;   // +cpu: a CPU-only build
  bool rocm = false;  // +rocm...: a ROCm build
};

// The build that the local part of `version` ("2.8.3+cu128torch2.9") names. Pure.
LocalBuild parse_local_build(std::string_view version);

// Why a wheel of `version` cannot go to a folder for torch `torch` ("2.9") and CUDA `cuda`
// ("12.8"), or nullopt when its local version names nothing else. Pure.
std::optional<std::string> local_version_conflict(std::string_view version, std::string_view torch,
                                                  std::string_view cuda);

}  // namespace whfs::check
