#include "fs/hub/retry.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>

namespace whfs::hub {
namespace {

std::optional<long> parse_uint(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.remove_suffix(1);
  if (s.empty() || s.size() > 9) return std::nullopt;
  long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

// The value of `key=` among ';'-separated parameters, e.g. r and t in "api";r=0;t=37.
std::optional<long> param(std::string_view header, std::string_view key) {
  std::size_t i = 0;
  while (i < header.size()) {
    auto semi = header.find(';', i);
    if (semi == std::string_view::npos) semi = header.size();
    auto item = header.substr(i, semi - i);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    if (item.size() > key.size() && item.starts_with(key) && item[key.size()] == '=') {
      return parse_uint(item.substr(key.size() + 1));
    }
    i = semi + 1;
  }
  return std::nullopt;
}

}  // namespace

std::chrono::milliseconds backoff_delay(const RetryPolicy& p, int retry, double jitter01) {
  const int shift = std::clamp(retry, 0, 30);
  const auto full = std::min<std::int64_t>(p.cap.count(), p.base.count() << std::min(shift, 20));
  jitter01 = std::clamp(jitter01, 0.0, 1.0);
  return std::chrono::milliseconds(
      static_cast<std::int64_t>(static_cast<double>(full) * (0.5 + 0.5 * jitter01)));
}

std::optional<std::chrono::seconds> server_retry_hint(std::string_view retry_after,
                                                      std::string_view ratelimit) {
  if (!ratelimit.empty()) {
    const auto r = param(ratelimit, "r");
    const auto t = param(ratelimit, "t");
    if (r && *r == 0 && t) return std::chrono::seconds(*t);
  }
  if (auto v = parse_uint(retry_after)) return std::chrono::seconds(*v);
  return std::nullopt;
}

bool retryable_status(int status) {
  return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 ||
         status == 504;
}

}  // namespace whfs::hub
