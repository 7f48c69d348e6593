#include "fs/hub/url.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <ctime>

#include "fs/common/percent.h"
#include "fs/common/text.h"

namespace whfs::hub {
namespace {

// Removes "." and ".." segments (RFC 3986 §5.2.4).
std::string remove_dot_segments(std::string_view path) {
  std::string out;
  std::size_t i = 0;
  while (i < path.size()) {
    std::size_t next = path.find('/', i + 1);
    if (next == std::string_view::npos) next = path.size();
    std::string_view seg = path.substr(i, next - i);  // includes the leading "/"
    if (seg == "/." || seg == "/..") {
      if (seg == "/..") {
        const auto slash = out.rfind('/');
        out.erase(slash == std::string::npos ? 0 : slash);
      }
      if (next == path.size()) out.push_back('/');
    } else {
      out.append(seg);
    }
    i = next;
  }
  return out;
}

struct Split {
  std::string_view scheme_authority;  // "https://host:port"
  std::string_view path;
  std::string_view query;  // with "?"
};

Split split_url(std::string_view url) {
  Split s;
  const auto scheme_end = url.find("://");
  const auto auth_start = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  auto path_start = url.find_first_of("/?#", auth_start);
  if (path_start == std::string_view::npos) path_start = url.size();
  s.scheme_authority = url.substr(0, path_start);
  auto rest = url.substr(path_start);
  rest = rest.substr(0, rest.find('#'));
  const auto q = rest.find('?');
  s.path = rest.substr(0, q);
  if (q != std::string_view::npos) s.query = rest.substr(q);
  return s;
}

}  // namespace

std::string encode_segment(std::string_view s) { return percent_encode(s); }

std::string encode_path(std::string_view path) {
  std::string out;
  std::size_t start = 0;
  while (true) {
    const auto slash = path.find('/', start);
    out += encode_segment(path.substr(start, slash - start));
    if (slash == std::string_view::npos) break;
    out.push_back('/');
    start = slash + 1;
  }
  return out;
}

std::optional<Origin> origin_of(std::string_view url) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return std::nullopt;
  Origin o;
  o.scheme = lower(url.substr(0, scheme_end));
  if (o.scheme != "http" && o.scheme != "https") return std::nullopt;
  auto authority = url.substr(scheme_end + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    authority = authority.substr(at + 1);  // drop userinfo
  }
  std::string_view host = authority;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = authority.substr(1, close - 1);
    if (close + 1 < authority.size() && authority[close + 1] == ':') {
      port = authority.substr(close + 2);
    }
  } else if (const auto colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) return std::nullopt;
  o.host = lower(host);
  if (port.empty()) {
    o.port = o.scheme == "https" ? 443 : 80;
  } else {
    int p = 0;
    for (char c : port) {
      if (std::isdigit(static_cast<unsigned char>(c)) == 0) return std::nullopt;
      p = p * 10 + (c - '0');
      if (p > 65535) return std::nullopt;
    }
    o.port = p;
  }
  return o;
}

bool is_loopback_host(std::string_view host) {
  if (host == "localhost" || host == "::1" || host == "0:0:0:0:0:0:0:1") return true;
  if (!host.starts_with("127.")) return false;
  int dots = 0;
  for (char c : host) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  return dots == 3;
}

std::string resolve_reference(std::string_view base, std::string_view ref) {
  if (ref.find("://") != std::string_view::npos && ref.find("://") < ref.find_first_of("/?#")) {
    return std::string(ref);  // absolute
  }
  const Split b = split_url(base);
  if (ref.starts_with("//")) {
    const auto scheme_end = base.find("://");
    return std::string(base.substr(0, scheme_end + 1)) + std::string(ref);
  }
  const auto ref_path_end = ref.find_first_of("?#");
  std::string_view ref_path = ref.substr(0, ref_path_end);
  std::string_view ref_tail =
      ref_path_end == std::string_view::npos ? std::string_view{} : ref.substr(ref_path_end);
  ref_tail = ref_tail.substr(0, ref_tail.find('#'));
  std::string path;
  if (ref_path.empty()) {
    path = std::string(b.path);
    if (ref_tail.empty()) ref_tail = b.query;
  } else if (ref_path.front() == '/') {
    path = remove_dot_segments(ref_path);
  } else {
    std::string merged(b.path.substr(0, b.path.rfind('/') + 1));
    if (merged.empty()) merged = "/";
    merged += ref_path;
    path = remove_dot_segments(merged);
  }
  return std::string(b.scheme_authority) + path + std::string(ref_tail);
}

std::string redact(std::string_view url) {
  const auto q = url.find_first_of("?#");
  return std::string(url.substr(0, q));
}

// The query value of `key` (raw, not decoded), or "".
std::string query_value(std::string_view url, std::string_view key) {
  const auto q = url.find('?');
  if (q == std::string_view::npos) return {};
  std::string_view rest = url.substr(q + 1);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    auto item = rest.substr(0, amp);
    if (item.size() > key.size() && item.starts_with(key) && item[key.size()] == '=') {
      return std::string(item.substr(key.size() + 1));
    }
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return {};
}

// When a signed URL stops working, from X-Amz-Date + X-Amz-Expires or CloudFront's Expires.
std::optional<std::time_t> signed_url_expiry(std::string_view url) {
  // Decimal seconds that fit with room to add (a hostile or broken URL must not overflow).
  auto seconds = [](const std::string& s) -> std::optional<std::int64_t> {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0 ||
        v > (std::int64_t{1} << 40)) {
      return std::nullopt;
    }
    return v;
  };
  const std::string amz_date = query_value(url, "X-Amz-Date");
  const auto amz_expires = seconds(query_value(url, "X-Amz-Expires"));
  if (amz_date.size() == 16 && amz_expires) {
    std::tm tm{};
    const char* end = strptime(amz_date.c_str(), "%Y%m%dT%H%M%SZ", &tm);
    if (end != nullptr && *end == '\0') {
      const std::time_t signed_at = timegm(&tm);
      if (signed_at != static_cast<std::time_t>(-1)) return signed_at + *amz_expires;
    }
  }
  if (const auto expires = seconds(query_value(url, "Expires"))) {
    return static_cast<std::time_t>(*expires);
  }
  return std::nullopt;
}

}  // namespace whfs::hub
