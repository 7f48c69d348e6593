#include "fs/common/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

namespace whfs {
namespace {

// Splits "12.5G" into a non-negative number and a suffix; nullopt when there is no number.
struct NumberAndSuffix {
  double number;
  std::string suffix;
};

std::optional<NumberAndSuffix> split_number(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && text[i] == ' ') ++i;
  const std::size_t start = i;
  bool seen_digit = false;
  bool seen_dot = false;
  while (i < text.size()) {
    const char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c)) != 0) {
      seen_digit = true;
    } else if (c == '.' && !seen_dot) {
      seen_dot = true;
    } else {
      break;
    }
    ++i;
  }
  if (!seen_digit) return std::nullopt;
  const std::string digits(text.substr(start, i - start));
  std::string suffix;
  for (; i < text.size(); ++i) {
    if (text[i] == ' ') continue;
    suffix.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(text[i]))));
  }
  return NumberAndSuffix{std::strtod(digits.c_str(), nullptr), suffix};
}

}  // namespace

std::optional<std::uint64_t> parse_size(std::string_view text) {
  auto parsed = split_number(text);
  if (!parsed) return std::nullopt;
  double mult = 1;
  const std::string& s = parsed->suffix;
  if (s.empty() || s == "b") {
    mult = 1;
  } else if (s == "k" || s == "kb" || s == "kib") {
    mult = 1024.0;
  } else if (s == "m" || s == "mb" || s == "mib") {
    mult = 1024.0 * 1024;
  } else if (s == "g" || s == "gb" || s == "gib") {
    mult = 1024.0 * 1024 * 1024;
  } else if (s == "t" || s == "tb" || s == "tib") {
    mult = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return std::nullopt;
  }
  const double bytes = std::floor(parsed->number * mult);
  if (!std::isfinite(bytes) || bytes >= 18446744073709551615.0) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

std::optional<std::chrono::seconds> parse_duration(std::string_view text) {
  auto parsed = split_number(text);
  if (!parsed) return std::nullopt;
  double mult = 1;
  const std::string& s = parsed->suffix;
  if (s.empty() || s == "s" || s == "sec") {
    mult = 1;
  } else if (s == "m" || s == "min") {
    mult = 60;
  } else if (s == "h") {
    mult = 3600;
  } else if (s == "d") {
    mult = 86400;
  } else {
    return std::nullopt;
  }
  const double secs = std::floor(parsed->number * mult);
  // A century is already absurd for a refresh period; refuse anything that would overflow.
  if (!std::isfinite(secs) || secs > 100.0 * 365 * 86400) return std::nullopt;
  return std::chrono::seconds(static_cast<std::int64_t>(secs));
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  auto v = static_cast<double>(bytes);
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

}  // namespace whfs
