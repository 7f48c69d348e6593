#pragma once
// The wheel tags a CPython interpreter accepts, in pip's order of preference (pypa/packaging
// tags.py: cpython_tags() then compatible_tags()), and ranking of wheel names against them.
// Pure functions: the interpreter's facts come from the Python probe or an override.

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fs/targeting/wheel_name.h"

namespace whfs::target {

struct Tag {
  std::string interpreter;  // cp312, py3
  std::string abi;          // cp312, abi3, none
  std::string platform;     // manylinux_2_28_x86_64, linux_x86_64, any

  std::string str() const { return interpreter + "-" + abi + "-" + platform; }
  bool operator==(const Tag&) const = default;
};

// What the tag list of a CPython interpreter depends on.
struct CPythonAbi {
  int major = 3;
  int minor = 0;
  std::string abiflags;  // sys.abiflags: "" normally, "d" debug, "t" free-threaded, "m" < 3.8
};

// The platform tags of Linux on `arch` (x86_64, aarch64, ...) with glibc major.minor, best
// first: manylinux_2_<minor>_<arch> down to manylinux_2_5 (x86_64, i686) or manylinux_2_17
// (others), each legacy alias (manylinux2014, manylinux2010, manylinux1) right after the tag it
// names, then linux_<arch>. glibc_major 0 (musl or unknown libc): linux_<arch> only.
//
// pip's vendored packaging (up to 25.x) puts linux_<arch> last; packaging 26.3 moved it first.
// Where both kinds of wheel are present this picks the manylinux one, as pip 25 does.
std::vector<std::string> linux_platform_tags(std::string_view arch, int glibc_major,
                                             int glibc_minor);

// Every tag the interpreter accepts, best first, as packaging.tags.sys_tags() lists them for
// CPython on the given platforms:
//   cpXY-cpXY{flags}-P, cpXY-abi3-P, cpXY-none-P (each for every platform P in order),
//   cpX(Y-1)..cp32-abi3-P, then py3Y-none-P, py3-none-P, py3(Y-1)..py30-none-P,
//   cpXY-none-any, py3Y-none-any, py3-none-any, py3(Y-1)..py30-none-any.
// Free-threaded builds ("t") take no abi3 tags; debug builds ("d") also take cpXY-cpXY.
std::vector<Tag> cpython_tags(const CPythonAbi& abi, const std::vector<std::string>& platforms);

// An ordered tag list with O(1) rank lookup. Copyable value; built once per detection.
class SupportedTags {
 public:
  SupportedTags() = default;
  explicit SupportedTags(std::vector<Tag> tags);

  const std::vector<Tag>& tags() const { return tags_; }
  bool empty() const { return tags_.empty(); }
  // The position of `tag` in the list (lowest wins), or nullopt when it is not supported.
  std::optional<std::size_t> rank(const Tag& tag) const;

 private:
  std::vector<Tag> tags_;
  std::unordered_map<std::string, std::size_t> rank_;
};

// The best (lowest) rank among the wheel's tag triples; nullopt: pip would not install it.
std::optional<std::size_t> wheel_rank(const WheelName& wheel, const SupportedTags& supported);

// Of several wheels of one project, the index of the one pip would install, or nullopt when
// none is installable. pip's order: the highest version first, then the best tag rank, then
// the higher build tag; a remaining tie goes to the smaller file name (deterministic).
std::optional<std::size_t> best_wheel(std::span<const WheelName> wheels,
                                      const SupportedTags& supported);

// The file name a WheelName stands for (tags joined back with '.').
std::string wheel_file_name(const WheelName& wheel);

}  // namespace whfs::target
