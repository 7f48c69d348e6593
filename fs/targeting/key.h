#pragma once
// A target key names one folder of targets/: every fact that decides which wheels fit, so
// that two processes with one key see one folder, and CI can name a machine it is not on.
//
//   key    = archs "-torch" MAJOR "." MINOR "-cu" CUDA "-" pytag [ "-" libc ] [ "-" machine ]
//   archs  = "sm" CC *( "+sm" CC )     every GPU the folder must run on, lowest first
//   CUDA   = major and minor digits     (cu128 is CUDA 12.8, as in the folder names)
//   pytag  = "cp3" MINOR [ "t" ]        CPython 3.MINOR, "t" for a free-threaded build
//   libc   = "glibc" MAJOR "." MINOR | "noglibc"
//   machine = x86_64 | aarch64 | i686 | armv7l | armv8l | ppc64le | s390x | riscv64
//
// e.g. sm89-torch2.9-cu128-cp312, sm80+sm86-torch2.8-cu126-cp311-glibc2.31. libc and machine
// default to the mount host's; the canonical form (the one current/ points to) leaves them out
// when they are the host's. Numbers have no leading zeros.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fs/common/expected.h"

namespace whfs::target {

struct Target;

// The platform of the machine the mount runs on: what a key leaves out.
struct HostPlatform {
  std::string machine;  // x86_64
  std::string libc;     // "2.36"; "" without glibc
};
HostPlatform host_platform();

struct TargetKey {
  std::vector<std::pair<int, int>> archs;  // compute capabilities, ascending, no repeats
  int torch_major = 0;
  int torch_minor = 0;
  int cuda_major = 0;
  int cuda_minor = 0;
  int python_minor = 0;
  bool free_threaded = false;
  std::string libc;     // "2.36"; "" without glibc
  std::string machine;  // x86_64
  bool operator==(const TargetKey&) const = default;
};

// The canonical text of a key.
std::string format_key(const TargetKey& key, const HostPlatform& host);

// A key's text, canonical or with the host's libc or machine spelled out. The error says which
// part is wrong.
Expected<TargetKey, std::string> parse_key(std::string_view text, const HostPlatform& host);

// The key of a target whose four axes are known; the error names the first missing one.
Expected<TargetKey, std::string> key_of(const Target& target);

// The target a key stands for: axes (their source is "the key <text>"), platforms and tags.
Target target_of(const TargetKey& key, const HostPlatform& host);

}  // namespace whfs::target
