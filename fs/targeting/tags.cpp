#include "fs/targeting/tags.h"

#include <algorithm>

#include "fs/common/text.h"
#include "fs/targeting/pep440.h"

namespace whfs::target {
namespace {

std::string key(std::string_view interpreter, std::string_view abi, std::string_view platform) {
  std::string k;
  k.reserve(interpreter.size() + abi.size() + platform.size() + 2);
  k.append(interpreter).push_back('-');
  k.append(abi).push_back('-');
  k.append(platform);
  return k;
}

// Build tags compare by their leading number, then by the rest (PEP 427).
int compare_build(const std::string& a, const std::string& b) {
  auto split = [](const std::string& s) {
    std::size_t i = 0;
    std::uint64_t n = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9' && n < (1ull << 58)) {
      n = n * 10 + static_cast<std::uint64_t>(s[i] - '0');
      ++i;
    }
    return std::make_pair(n, s.substr(i));
  };
  // No build tag sorts before any build tag.
  if (a.empty() != b.empty()) return a.empty() ? -1 : 1;
  const auto ka = split(a);
  const auto kb = split(b);
  return ka < kb ? -1 : (kb < ka ? 1 : 0);
}

}  // namespace

std::vector<std::string> linux_platform_tags(std::string_view arch, int glibc_major,
                                             int glibc_minor) {
  std::vector<std::string> out;
  const std::string a(arch);
  if (glibc_major == 2) {
    // PEP 600: glibc 2.x runs wheels for every older 2.y. The oldest manylinux is 2.5 on x86
    // (manylinux1) and 2.17 elsewhere (manylinux2014 was the first for those).
    const int oldest = (a == "x86_64" || a == "i686") ? 5 : 17;
    for (int minor = glibc_minor; minor >= oldest; --minor) {
      out.push_back("manylinux_2_" + std::to_string(minor) + "_" + a);
      if (minor == 17) out.push_back("manylinux2014_" + a);
      if (minor == 12) out.push_back("manylinux2010_" + a);
      if (minor == 5) out.push_back("manylinux1_" + a);
    }
  }
  out.push_back("linux_" + a);
  return out;
}

std::vector<Tag> cpython_tags(const CPythonAbi& abi, const std::vector<std::string>& platforms) {
  std::vector<Tag> out;
  const std::string nodot = std::to_string(abi.major) + std::to_string(abi.minor);
  const std::string cp = "cp" + nodot;
  const bool threaded = abi.abiflags.find('t') != std::string::npos;
  const bool debug = abi.abiflags.find('d') != std::string::npos;

  std::vector<std::string> abis = {cp + abi.abiflags};
  // Since 3.8 a debug build also loads normal extension modules.
  if (debug && (abi.major > 3 || abi.minor >= 8)) abis.push_back(cp + (threaded ? "t" : ""));
  for (const auto& a : abis) {
    for (const auto& p : platforms) out.push_back({cp, a, p});
  }
  const bool abi3 = !threaded && (abi.major > 3 || abi.minor >= 2);
  if (abi3) {
    for (const auto& p : platforms) out.push_back({cp, "abi3", p});
  }
  for (const auto& p : platforms) out.push_back({cp, "none", p});
  if (abi3) {
    for (int minor = abi.minor - 1; minor >= 2; --minor) {
      const std::string older = "cp" + std::to_string(abi.major) + std::to_string(minor);
      for (const auto& p : platforms) out.push_back({older, "abi3", p});
    }
  }

  // packaging's _py_interpreter_range: py3Y, py3, py3(Y-1) .. py30.
  std::vector<std::string> py = {"py" + nodot, "py" + std::to_string(abi.major)};
  for (int minor = abi.minor - 1; minor >= 0; --minor) {
    py.push_back("py" + std::to_string(abi.major) + std::to_string(minor));
  }
  for (const auto& v : py) {
    for (const auto& p : platforms) out.push_back({v, "none", p});
  }
  out.push_back({cp, "none", "any"});
  for (const auto& v : py) out.push_back({v, "none", "any"});
  return out;
}

SupportedTags::SupportedTags(std::vector<Tag> tags) : tags_(std::move(tags)) {
  rank_.reserve(tags_.size());
  for (std::size_t i = 0; i < tags_.size(); ++i) {
    const auto& t = tags_[i];
    rank_.emplace(key(t.interpreter, t.abi, t.platform), i);  // keeps the first of duplicates
  }
}

std::optional<std::size_t> SupportedTags::rank(const Tag& tag) const {
  const auto it = rank_.find(key(tag.interpreter, tag.abi, tag.platform));
  if (it == rank_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::size_t> wheel_rank(const WheelName& wheel, const SupportedTags& supported) {
  std::optional<std::size_t> best;
  for (const auto& py : wheel.python_tags) {
    for (const auto& abi : wheel.abi_tags) {
      for (const auto& plat : wheel.platform_tags) {
        const auto r = supported.rank(Tag{py, abi, plat});
        if (r && (!best || *r < *best)) best = r;
      }
    }
  }
  return best;
}

std::optional<std::size_t> best_wheel(std::span<const WheelName> wheels,
                                      const SupportedTags& supported) {
  std::optional<std::size_t> best;
  std::size_t best_rank = 0;
  std::string best_name;
  for (std::size_t i = 0; i < wheels.size(); ++i) {
    const auto r = wheel_rank(wheels[i], supported);
    if (!r) continue;
    std::string name = wheel_file_name(wheels[i]);
    bool better = !best;
    if (best) {
      const WheelName& b = wheels[*best];
      if (int v = compare_versions(wheels[i].version, b.version); v != 0) {
        better = v > 0;
      } else if (*r != best_rank) {
        better = *r < best_rank;
      } else if (int bt = compare_build(wheels[i].build, b.build); bt != 0) {
        better = bt > 0;
      } else {
        better = name < best_name;
      }
    }
    if (better) {
      best = i;
      best_rank = *r;
      best_name = std::move(name);
    }
  }
  return best;
}

std::string wheel_file_name(const WheelName& wheel) {
  std::string out = wheel.distribution + "-" + wheel.version;
  if (!wheel.build.empty()) out += "-" + wheel.build;
  out += "-" + join(wheel.python_tags, ".") + "-" + join(wheel.abi_tags, ".") + "-" +
         join(wheel.platform_tags, ".") + ".whl";
  return out;
}

}  // namespace whfs::target
