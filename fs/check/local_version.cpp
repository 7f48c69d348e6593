#include "fs/check/local_version.h"

#include <string>

#include "fs/common/text.h"

namespace whfs::check {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_letter(char c) { return c >= 'a' && c <= 'z'; }

int number(std::string_view digits) {
  int v = 0;
  for (char c : digits.substr(0, 4)) v = v * 10 + (c - '0');
  return v;
}

// The digits (and dots between digits) at the start of `s`.
std::string_view numeral(std::string_view s) {
  std::size_t n = 0;
  while (n < s.size() && (is_digit(s[n]) || (s[n] == '.' && n + 1 < s.size() &&
                                             is_digit(s[n + 1]) && n > 0 && is_digit(s[n - 1])))) {
    ++n;
  }
  return s.substr(0, n);
}

// "12.8" -> 12.8; otherwise digits: "12" (a 1x major alone) -> 12, "128" -> 12.8, "92" -> 9.2.
VersionPair cuda_of(std::string_view n) {
  if (const auto dot = n.find('.'); dot != std::string_view::npos) {
    return {number(n.substr(0, dot)), number(n.substr(dot + 1, n.find('.', dot + 1) - dot - 1))};
  }
  if (n.size() == 1 || (n.size() == 2 && n[0] == '1')) return {number(n), -1};
  return {number(n.substr(0, n.size() - 1)), number(n.substr(n.size() - 1))};
}

// Dotted "2.9" / "2.9.0"; digits after "torch" are major, minor, patch ("250" -> 2.5, "2100"
// -> 2.10); after "pt" major and minor ("25" -> 2.5, "210" -> 2.10).
VersionPair torch_of(std::string_view n, bool pt) {
  if (const auto dot = n.find('.'); dot != std::string_view::npos) {
    return {number(n.substr(0, dot)), number(n.substr(dot + 1, n.find('.', dot + 1) - dot - 1))};
  }
  if (n.size() == 1) return {number(n), -1};
  const std::size_t minor_digits = pt ? n.size() - 1 : (n.size() >= 4 ? 2 : 1);
  return {number(n.substr(0, 1)), number(n.substr(1, minor_digits))};
}

std::string text(const VersionPair& v) {
  return std::to_string(v.major) + (v.minor >= 0 ? "." + std::to_string(v.minor) : "");
}

// "12.8" -> {12, 8}; nullopt when it is not major.minor.
std::optional<VersionPair> dotted(std::string_view s) {
  const auto dot = s.find('.');
  if (dot == std::string_view::npos || dot == 0) return std::nullopt;
  return VersionPair{number(s.substr(0, dot)), number(s.substr(dot + 1))};
}

bool differs(const VersionPair& named, const VersionPair& target) {
  return named.major != target.major || (named.minor >= 0 && named.minor != target.minor);
}

}  // namespace

LocalBuild parse_local_build(std::string_view version) {
  LocalBuild b;
  const auto plus = version.find('+');
  if (plus == std::string_view::npos) return b;
  const std::string local = lower(version.substr(plus + 1));
  const std::string_view s(local);
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && is_letter(s[i - 1])) continue;  // only where a word starts
    const std::string_view rest = s.substr(i);
    auto after = [&](std::string_view prefix) {
      return rest.starts_with(prefix) ? numeral(rest.substr(prefix.size())) : std::string_view();
    };
    if (auto n = after("torch"); !n.empty()) {
      b.torch = torch_of(n, false);
    } else if (auto n2 = after("pt"); !n2.empty()) {
      b.torch = torch_of(n2, true);
    } else if (auto n3 = after("cuda"); !n3.empty()) {
      b.cuda = cuda_of(n3);
    } else if (auto n4 = after("cu"); !n4.empty()) {
      b.cuda = cuda_of(n4);
    } else if (rest.starts_with("cpu") && (rest.size() == 3 || !is_letter(rest[3]))) {
      b.cpu = true;
    } else if (rest.starts_with("rocm")) {
      b.rocm = true;
    }
  }
  return b;
}

std::optional<std::string> local_version_conflict(std::string_view version, std::string_view torch,
                                                  std::string_view cuda) {
  const LocalBuild b = parse_local_build(version);
  const std::string label =
      "its local version +" + std::string(version.substr(version.find('+') + 1));
  if (b.cpu || b.rocm) {
    return label + " names a " + (b.cpu ? "CPU-only" : "ROCm") + " build; the folder is for CUDA " +
           std::string(cuda);
  }
  const auto want_cuda = dotted(cuda);
  if (b.cuda && want_cuda && differs(*b.cuda, *want_cuda)) {
    return label + " names CUDA " + text(*b.cuda) + "; the target has CUDA " + std::string(cuda);
  }
  const auto want_torch = dotted(torch);
  if (b.torch && want_torch && differs(*b.torch, *want_torch)) {
    return label + " names torch " + text(*b.torch) + "; the target has torch " +
           std::string(torch);
  }
  return std::nullopt;
}

}  // namespace whfs::check
