#pragma once
// Wheel file names (PEP 427) and PEP 503 project names: pure functions over untrusted names
// from the remote listing, fuzzed in tests/fuzz/wheel_name_fuzz.cpp.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace whfs::target {

// {distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl. Each tag field may be a
// compressed tag set ("py2.py3"), kept here split on '.'. Tags are case-insensitive and stored
// lowercased, as pip compares them.
struct WheelName {
  std::string distribution;  // as written, e.g. flash_attn
  std::string version;       // as written, may carry a local part: 2.8.3+cu128torch2.9
  std::string build;         // empty when there is none; starts with a digit otherwise
  std::vector<std::string> python_tags;
  std::vector<std::string> abi_tags;
  std::vector<std::string> platform_tags;
};

// A compressed tag set may expand to at most this many triples; longer names are refused so
// that ranking a hostile name stays cheap.
inline constexpr std::size_t kMaxTagTriples = 256;

// nullopt for anything that is not a well-formed wheel name: wrong number of fields, empty or
// ill-charactered fields, a build tag not starting with a digit, a path separator, no ".whl".
std::optional<WheelName> parse_wheel_name(std::string_view filename);

// PEP 503 normalisation: lowercase, runs of '-', '_' and '.' become one '-'
// ("Flash_Attn" -> "flash-attn"), so two spellings of one project compare equal.
std::string normalize_project_name(std::string_view name);

}  // namespace whfs::target
