#include "tools/csi/volume.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <string_view>

#include "fs/common/hash.h"
#include "fs/common/text.h"
#include "fs/common/units.h"
#include "fs/hub/hub_client.h"

namespace whfs::csi {
namespace {

constexpr std::size_t kMaxValue = 256;

// A value quoted in an error: printable, cut short (pod authors may put anything in it).
std::string shown_value(std::string_view v) {
  std::string out = "\"";
  for (const char c : v.substr(0, 80)) {
    out += std::isprint(static_cast<unsigned char>(c)) != 0 ? c : '?';
  }
  if (v.size() > 80) out += "...";
  return out + "\"";
}

bool plain_value(std::string_view v) {
  return !v.empty() && v.size() <= 64 && std::all_of(v.begin(), v.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || c == '.' || c == '_' || c == '+' || c == '-';
  });
}

// Branch, tag, commit or refs/pr/N: the characters git allows in a ref that a URL path can
// carry without escaping, no "..", no leading '/' or '-'.
bool valid_revision(std::string_view r) {
  if (r.empty() || r.size() > 255 || r.front() == '/' || r.front() == '-' || r.back() == '/') {
    return false;
  }
  if (r.find("..") != std::string_view::npos || r.find("//") != std::string_view::npos) {
    return false;
  }
  return std::all_of(r.begin(), r.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || c == '.' || c == '_' || c == '-' || c == '/';
  });
}

// A numeric option's bounds for a volume: wide enough for any real use, narrow enough that one
// pod cannot make its daemon hold gigabytes in flight, hammer the Hub or hang its readers.
enum class Unit { kBytes, kSeconds, kCount };
struct Bounds {
  const char* key;
  Unit unit;
  std::uint64_t least;
  std::uint64_t most;
  bool zero_too;  // 0 means "off"
  const char* text;
};
constexpr Bounds kBounds[] = {
    {"readahead", Unit::kBytes, 1ULL << 20, 256ULL << 20, false, "from 1M to 256M"},
    {"connections", Unit::kCount, 1, 32, false, "from 1 to 32"},
    {"refresh", Unit::kSeconds, 60, 86400, true, "0 (off) or from 1m to 1d"},
    {"read_timeout", Unit::kSeconds, 1, 600, false, "from 1s to 10m"},
    {"stall_timeout", Unit::kSeconds, 1, 120, false, "from 1s to 2m"},
    {"caller_timeout", Unit::kSeconds, 1, 30, false, "from 1s to 30s"},
};

std::optional<std::uint64_t> number_of(Unit unit, std::string_view v) {
  if (unit == Unit::kBytes) return parse_size(v);
  if (unit == Unit::kSeconds) {
    auto d = parse_duration(v);
    if (!d || d->count() < 0) return std::nullopt;
    return static_cast<std::uint64_t>(d->count());
  }
  if (v.empty() || v.size() > 9 ||
      !std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
    return std::nullopt;
  }
  return std::stoull(std::string(v));
}

// The setting a key decides: current= and nocurrent both decide what current/ is.
std::string_view setting_of(std::string_view key) { return key == "nocurrent" ? "current" : key; }

// The admin's option that decides the same setting as `key`, or "".
std::string node_option_for(std::string_view key, const std::vector<std::string>& node_options) {
  for (const auto& item : node_options) {
    const std::string_view k = trim(std::string_view(item).substr(0, item.find('=')));
    if (setting_of(k) == setting_of(key)) return item;
  }
  return {};
}

Expected<std::vector<std::string>, std::string> parse_options(
    std::string_view text, const std::vector<std::string>& node_options) {
  std::vector<std::string> out;
  for (const auto item : split_nonempty(text, ',')) {
    const auto opt = trim(item);
    if (opt.empty()) continue;
    const auto eq = opt.find('=');
    const auto key = opt.substr(0, eq);
    if (key == "offline") {
      return unexpected(std::string(
          "volume_context options: \"offline\" is not an option a volume may set: it serves "
          "whatever the node's shared cache recorded, unchecked (the node's: wheelhouse-csi "
          "--daemon-option offline)"));
    }
    const bool known = std::any_of(std::begin(kVolumeOptions), std::end(kVolumeOptions),
                                   [&](const char* k) { return key == k; });
    if (!known) {
      return unexpected("volume_context options: " + shown_value(key) +
                        " is not an option a volume may set (allowed: " +
                        [] {
                          std::vector<std::string> v(std::begin(kVolumeOptions),
                                                     std::end(kVolumeOptions));
                          return join(v, ", ");
                        }() +
                        "; the others are the node's: wheelhouse-csi --daemon-option)");
    }
    if (const auto admin = node_option_for(key, node_options); !admin.empty()) {
      return unexpected("volume_context options: " + std::string(key) +
                        " is set by this node's admin (" + admin +
                        ", wheelhouse-csi --daemon-option): a volume may not set it");
    }
    if (eq != std::string_view::npos && !plain_value(opt.substr(eq + 1))) {
      return unexpected("volume_context options: the value of " + std::string(key) + " " +
                        shown_value(opt.substr(eq + 1)) +
                        " must be 1-64 letters, digits, '.', '_', '+' or '-'");
    }
    for (const auto& b : kBounds) {
      if (key != b.key) continue;
      const auto value = eq == std::string_view::npos ? std::string_view() : opt.substr(eq + 1);
      const auto n = number_of(b.unit, value);
      const bool in_bounds = n && ((*n == 0 && b.zero_too) || (*n >= b.least && *n <= b.most));
      if (!in_bounds) {
        return unexpected("volume_context options: " + std::string(key) + "=" + std::string(value) +
                          " is out of bounds: " + b.key + " must be " + b.text + " on a volume");
      }
    }
    out.emplace_back(opt);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

std::string volume_option_bounds() {
  std::vector<std::string> parts;
  for (const auto& b : kBounds) parts.push_back(std::string(b.key) + " " + b.text);
  return join(parts, ", ");
}

std::string normalise_endpoint(std::string_view url) {
  std::string e(trim(url));
  while (!e.empty() && e.back() == '/') e.pop_back();
  const bool http = e.starts_with("http://") || e.starts_with("https://");
  if (!http || e.size() > kMaxValue) return {};
  const auto host = e.substr(e.find("//") + 2);
  if (host.empty()) return {};
  for (const unsigned char c : e) {
    if (std::isgraph(c) == 0 || c == ',' || c == '\\') return {};
  }
  return e;
}

std::string VolumeSpec::key() const {
  std::string text = endpoint + '\n' + repo + '\n' + revision + '\n' + join(options, ",") + '\n';
  text += token.empty() ? std::string("-") : sha256_hex(token);
  return sha256_hex(text).substr(0, 16);
}

std::string VolumeSpec::describe() const {
  std::string d = endpoint + " " + repo + "@" + revision;
  if (!options.empty()) d += " [" + join(options, ",") + "]";
  if (!token.empty()) d += " (with a token)";
  return d;
}

Expected<VolumeSpec, std::string> parse_volume(const std::map<std::string, std::string>& context,
                                               const std::map<std::string, std::string>& secrets,
                                               const ParseLimits& limits) {
  VolumeSpec spec;
  for (const auto& [key, value] : context) {
    if (key.starts_with("csi.storage.k8s.io/")) continue;  // kubelet's pod info
    if (key != kRepoKey && key != kRevisionKey && key != kEndpointKey && key != kOptionsKey) {
      return unexpected("volume_context: unknown key " + shown_value(key) +
                        " (known: repo, revision, endpoint, options)");
    }
    if (value.size() > 4096) return unexpected("volume_context: " + key + " is too long");
  }
  const auto get = [&](const char* key) -> std::string {
    const auto it = context.find(key);
    return it == context.end() ? std::string() : std::string(trim(it->second));
  };
  const std::string repo = get(kRepoKey);
  if (repo.empty()) {
    return unexpected(std::string(
        "volume_context: repo is required (the dataset, e.g. DoctorPopi/python_wheelhouse)"));
  }
  auto ref = hub::parse_repo_ref(repo);
  if (!ref) return unexpected("volume_context repo: " + ref.error());
  if (ref->type != hub::RepoType::kDataset) {
    return unexpected("volume_context repo " + shown_value(repo) + ": a wheelhouse is a dataset");
  }
  spec.repo = ref->id;
  spec.revision = get(kRevisionKey);
  if (spec.revision.empty()) spec.revision = "main";
  if (!valid_revision(spec.revision)) {
    return unexpected("volume_context revision " + shown_value(spec.revision) +
                      ": expected a branch, tag, commit or refs/pr/N");
  }
  if (limits.allowed_endpoints.empty()) {
    return unexpected(std::string("no endpoint is allowed on this node (--allow-endpoint)"));
  }
  const std::string asked = get(kEndpointKey);
  spec.endpoint = asked.empty() ? limits.allowed_endpoints.front() : normalise_endpoint(asked);
  if (spec.endpoint.empty()) {
    return unexpected("volume_context endpoint " + shown_value(asked) +
                      ": expected an http(s) URL");
  }
  if (std::find(limits.allowed_endpoints.begin(), limits.allowed_endpoints.end(), spec.endpoint) ==
      limits.allowed_endpoints.end()) {
    return unexpected("volume_context endpoint " + shown_value(spec.endpoint) +
                      " is not one this node allows (" + join(limits.allowed_endpoints, ", ") +
                      "; wheelhouse-csi --allow-endpoint)");
  }
  auto options = parse_options(get(kOptionsKey), limits.node_options);
  if (!options) return unexpected(options.error());
  spec.options = std::move(*options);
  for (const char* key : kTokenKeys) {
    if (auto it = secrets.find(key); it != secrets.end() && !it->second.empty()) {
      std::string token(trim(it->second));
      // A token is one line of printable characters; anything else is not a token (and would
      // be written into a token file).
      if (token.size() > 1024 || !std::all_of(token.begin(), token.end(), [](unsigned char c) {
            return std::isgraph(c) != 0;
          })) {
        return unexpected(std::string("secrets: ") + key +
                          " is not a token (one line of printable characters)");
      }
      spec.token = std::move(token);
      break;
    }
  }
  return spec;
}

}  // namespace whfs::csi
