#include "fs/targeting/key.h"

#include <gnu/libc-version.h>
#include <sys/utsname.h>

#include <algorithm>
#include <array>

#include "fs/common/text.h"
#include "fs/targeting/target.h"

namespace whfs::target {
namespace {

constexpr std::array<std::string_view, 8> kMachines = {"x86_64", "aarch64", "i686",  "armv7l",
                                                       "armv8l", "ppc64le", "s390x", "riscv64"};
constexpr std::size_t kMaxArchs = 16;

// A number without a leading zero (unless it is "0"), at most 4 digits.
std::optional<int> number(std::string_view s) {
  if (s.empty() || s.size() > 4 || (s.size() > 1 && s.front() == '0')) return std::nullopt;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// "2.9" -> {2, 9}.
std::optional<std::pair<int, int>> dotted(std::string_view s) {
  const auto dot = s.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const auto a = number(s.substr(0, dot));
  const auto b = number(s.substr(dot + 1));
  if (!a || !b) return std::nullopt;
  return std::make_pair(*a, *b);
}

// "128" -> {12, 8}: the last digit is the minor (as in the folder names).
std::optional<std::pair<int, int>> last_digit_minor(std::string_view s) {
  if (s.size() < 2) return std::nullopt;
  const auto a = number(s.substr(0, s.size() - 1));
  const auto b = number(s.substr(s.size() - 1));
  if (!a || !b || *a == 0) return std::nullopt;
  return std::make_pair(*a, *b);
}

Unexpected<std::string> bad(std::string_view text, const std::string& why) {
  return unexpected("target key \"" + std::string(text) + "\": " + why);
}

}  // namespace

HostPlatform host_platform() {
  HostPlatform h;
  utsname u{};
  h.machine = ::uname(&u) == 0 ? u.machine : "x86_64";
  const auto [major, minor] = parse_glibc_version(::gnu_get_libc_version());
  if (major > 0) h.libc = std::to_string(major) + "." + std::to_string(minor);
  return h;
}

std::string format_key(const TargetKey& k, const HostPlatform& host) {
  std::string s;
  for (const auto& [major, minor] : k.archs) {
    s += (s.empty() ? "sm" : "+sm") + std::to_string(major) + std::to_string(minor);
  }
  s += "-torch" + std::to_string(k.torch_major) + "." + std::to_string(k.torch_minor);
  s += "-cu" + std::to_string(k.cuda_major) + std::to_string(k.cuda_minor);
  s += "-cp3" + std::to_string(k.python_minor) + (k.free_threaded ? "t" : "");
  if (k.libc != host.libc) s += k.libc.empty() ? "-noglibc" : "-glibc" + k.libc;
  if (k.machine != host.machine) s += "-" + k.machine;
  return s;
}

Expected<TargetKey, std::string> parse_key(std::string_view text, const HostPlatform& host) {
  if (text.size() > 200) return bad(text.substr(0, 40), "too long");
  const auto parts = split(text, '-');
  if (parts.size() < 4 || parts.size() > 6) {
    return bad(text, "expected <archs>-torch<M.m>-cu<NN>-cp3<N>[-glibc<M.m>][-<machine>]");
  }
  TargetKey k;
  for (const auto a : split(parts[0], '+')) {
    const auto cc = a.starts_with("sm") ? last_digit_minor(a.substr(2)) : std::nullopt;
    if (!cc) return bad(text, "\"" + std::string(a) + "\" is not an arch such as sm89");
    if (!k.archs.empty() && *cc <= k.archs.back()) {
      return bad(text, "archs are listed lowest first, each once (sm80+sm89)");
    }
    k.archs.push_back(*cc);
  }
  if (k.archs.size() > kMaxArchs) return bad(text, "too many archs");
  const auto torch = parts[1].starts_with("torch") ? dotted(parts[1].substr(5)) : std::nullopt;
  if (!torch) return bad(text, "\"" + std::string(parts[1]) + "\" is not torch<major>.<minor>");
  std::tie(k.torch_major, k.torch_minor) = *torch;
  const auto cuda =
      parts[2].starts_with("cu") ? last_digit_minor(parts[2].substr(2)) : std::nullopt;
  if (!cuda) return bad(text, "\"" + std::string(parts[2]) + "\" is not cu<digits> (cu128)");
  std::tie(k.cuda_major, k.cuda_minor) = *cuda;
  std::string_view py = parts[3];
  if (py.ends_with("t")) {
    k.free_threaded = true;
    py.remove_suffix(1);
  }
  const auto minor = py.starts_with("cp3") ? number(py.substr(3)) : std::nullopt;
  if (!minor) return bad(text, "\"" + std::string(parts[3]) + "\" is not a CPython tag (cp312)");
  k.python_minor = *minor;
  k.libc = host.libc;
  k.machine = host.machine;
  std::size_t i = 4;
  if (i < parts.size() && (parts[i].starts_with("glibc") || parts[i] == "noglibc")) {
    if (parts[i] == "noglibc") {
      k.libc.clear();
    } else {
      const auto g = dotted(parts[i].substr(5));
      if (!g) return bad(text, "\"" + std::string(parts[i]) + "\" is not glibc<major>.<minor>");
      k.libc = std::to_string(g->first) + "." + std::to_string(g->second);
    }
    ++i;
  }
  if (i < parts.size()) {
    if (std::find(kMachines.begin(), kMachines.end(), parts[i]) == kMachines.end()) {
      return bad(text, "\"" + std::string(parts[i]) +
                           "\" is not a known machine (x86_64, "
                           "aarch64, ...) or glibc<M.m>");
    }
    k.machine = std::string(parts[i]);
    ++i;
  }
  if (i != parts.size()) return bad(text, "unexpected \"" + std::string(parts[i]) + "\"");
  return k;
}

Expected<TargetKey, std::string> key_of(const Target& t) {
  for (const Axis* a : {&t.arch, &t.torch, &t.cuda, &t.python_tag}) {
    if (!a->has_value()) return unexpected(a->missing);
  }
  if (t.machine.empty()) return unexpected(std::string("the machine is not known"));
  // The axes are normalised already; the key's own parser checks them once more.
  HostPlatform none{"", "-"};
  std::string libc = t.libc.empty() ? "noglibc" : "glibc" + t.libc;
  const std::string text = t.arch.value + "-torch" + t.torch.value + "-cu" +
                           t.cuda.value.substr(0, t.cuda.value.find('.')) +
                           t.cuda.value.substr(t.cuda.value.find('.') + 1) + "-" +
                           t.python_tag.value + "-" + libc + "-" + t.machine;
  return parse_key(text, none);
}

Target target_of(const TargetKey& k, const HostPlatform& host) {
  Target t;
  const std::string source = "the key " + format_key(k, host);
  std::string archs;
  for (const auto& [major, minor] : k.archs) {
    archs += (archs.empty() ? "sm" : "+sm") + std::to_string(major) + std::to_string(minor);
  }
  t.arch = Axis{archs, source, ""};
  t.torch = Axis{std::to_string(k.torch_major) + "." + std::to_string(k.torch_minor), source, ""};
  t.cuda = Axis{std::to_string(k.cuda_major) + "." + std::to_string(k.cuda_minor), source, ""};
  t.python_tag =
      Axis{"cp3" + std::to_string(k.python_minor) + (k.free_threaded ? "t" : ""), source, ""};
  t.machine = k.machine;
  t.libc = k.libc;
  fill_tags(t);
  return t;
}

}  // namespace whfs::target
