#include "fs/targeting/wheel_name.h"

#include <algorithm>

namespace whfs::target {
namespace {

bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) return out;
    start = pos + 1;
  }
}

// Distribution names in wheel file names are escaped to [A-Za-z0-9_.] (no '-', which separates
// the fields); they start and end with a letter or digit.
bool valid_distribution(std::string_view s) {
  if (s.empty() || !is_alnum(s.front()) || !is_alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return is_alnum(c) || c == '_' || c == '.'; });
}

// A loose PEP 440 check: the exact grammar is the business of pip; here a version must start
// with a letter or digit (epochs "1!2.0" and a leading "v" are allowed) and use only the
// characters a normalised version can have.
bool valid_version(std::string_view s) {
  if (s.empty() || !is_alnum(s.front()) || !is_alnum(s.back())) return false;
  if (std::count(s.begin(), s.end(), '+') > 1 || std::count(s.begin(), s.end(), '!') > 1) {
    return false;
  }
  return std::all_of(s.begin(), s.end(), [](char c) {
    return is_alnum(c) || c == '.' || c == '_' || c == '+' || c == '!';
  });
}

bool valid_build(std::string_view s) {
  return !s.empty() && is_digit(s.front()) &&
         std::all_of(s.begin(), s.end(), [](char c) { return is_alnum(c) || c == '_'; });
}

// One tag field: '.'-separated non-empty parts of [A-Za-z0-9_]; stored lowercased.
std::optional<std::vector<std::string>> parse_tag_set(std::string_view field) {
  std::vector<std::string> out;
  for (std::string_view part : split(field, '.')) {
    if (part.empty() || part.size() > 64) return std::nullopt;
    std::string tag;
    for (char c : part) {
      if (!is_alnum(c) && c != '_') return std::nullopt;
      tag.push_back(lower(c));
    }
    out.push_back(std::move(tag));
    if (out.size() > kMaxTagTriples) return std::nullopt;
  }
  return out;
}

}  // namespace

std::optional<WheelName> parse_wheel_name(std::string_view filename) {
  constexpr std::string_view kSuffix = ".whl";
  if (filename.size() <= kSuffix.size() || !filename.ends_with(kSuffix)) return std::nullopt;
  const std::string_view stem = filename.substr(0, filename.size() - kSuffix.size());
  const std::vector<std::string_view> fields = split(stem, '-');
  if (fields.size() != 5 && fields.size() != 6) return std::nullopt;

  WheelName w;
  const std::size_t tags_at = fields.size() - 3;
  if (!valid_distribution(fields[0]) || !valid_version(fields[1])) return std::nullopt;
  if (fields.size() == 6 && !valid_build(fields[2])) return std::nullopt;
  auto python = parse_tag_set(fields[tags_at]);
  auto abi = parse_tag_set(fields[tags_at + 1]);
  auto platform = parse_tag_set(fields[tags_at + 2]);
  if (!python || !abi || !platform) return std::nullopt;
  if (python->size() * abi->size() * platform->size() > kMaxTagTriples) return std::nullopt;

  w.distribution = std::string(fields[0]);
  w.version = std::string(fields[1]);
  if (fields.size() == 6) w.build = std::string(fields[2]);
  w.python_tags = std::move(*python);
  w.abi_tags = std::move(*abi);
  w.platform_tags = std::move(*platform);
  return w;
}

std::string normalize_project_name(std::string_view name) {
  std::string out;
  bool in_run = false;
  for (char c : name) {
    if (c == '-' || c == '_' || c == '.') {
      if (!in_run) out.push_back('-');
      in_run = true;
    } else {
      out.push_back(lower(c));
      in_run = false;
    }
  }
  return out;
}

}  // namespace whfs::target
