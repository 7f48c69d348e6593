#pragma once
// Ordering of PEP 440 versions, enough to pick the newest of several wheels of one project as
// pip would (epoch, release, pre/post/dev releases, local versions such as "+cu128torch2.9").

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace whfs::target {

struct Pep440Version {
  std::uint64_t epoch = 0;
  std::vector<std::uint64_t> release;  // trailing zeros removed: 2.9.0 == 2.9
  int pre_kind = -1;                   // -1 none, 0 a, 1 b, 2 rc
  std::uint64_t pre_number = 0;
  std::optional<std::uint64_t> post;
  std::optional<std::uint64_t> dev;
  std::vector<std::string> local;  // lowercased segments after '+'
};

// Case-insensitive; accepts the spellings PEP 440 normalises (alpha, c, preview, rev, -_.
// separators, a leading v). nullopt when the text is not a version.
std::optional<Pep440Version> parse_pep440(std::string_view text);

// <0, 0, >0 as a sorts before, with, after b. Text that is not a version sorts before every
// version and, among itself, by plain string comparison, so the order is always total.
int compare_versions(std::string_view a, std::string_view b);

}  // namespace whfs::target
