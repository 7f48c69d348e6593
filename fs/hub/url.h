#pragma once
// URL pieces the Hub client needs: percent-encoding by the Hub's rules (hub-api.md §2),
// origins (scheme, host, port) for the token policy, relative-reference resolution for
// redirects, and redaction of signed query strings before anything is logged.

#include <ctime>
#include <optional>
#include <string>
#include <string_view>

namespace whfs::hub {

// Everything but RFC 3986 unreserved characters is encoded: "+" -> %2B, "/" -> %2F, " " -> %20.
// Used for one path segment, and for a revision, which is ONE segment ("refs/pr/1" ->
// "refs%2Fpr%2F1").
std::string encode_segment(std::string_view s);

// A repo path encoded segment by segment: "/" stays, everything else as encode_segment.
std::string encode_path(std::string_view path);

struct Origin {
  std::string scheme;  // lower case
  std::string host;    // lower case, without brackets
  int port = 0;        // explicit or the scheme's default
  bool operator==(const Origin&) const = default;
};

// nullopt for anything that is not an absolute http(s) URL.
std::optional<Origin> origin_of(std::string_view url);

// localhost, 127.0.0.0/8 or ::1 (as origin_of() spells hosts): traffic that never leaves the
// machine.
bool is_loopback_host(std::string_view host);

// RFC 3986 §5.2 resolution of a Location header against the URL it came from.
std::string resolve_reference(std::string_view base, std::string_view ref);

// The URL without its query and fragment ("...?<redacted>"), safe to log: signed CDN URLs
// carry credentials in the query.
std::string redact(std::string_view url);

// The query value of `key` in a URL (raw, not decoded), or "".
std::string query_value(std::string_view url, std::string_view key);

// When a signed URL stops working, from X-Amz-Date + X-Amz-Expires (S3) or Expires
// (CloudFront), in seconds since the epoch; nullopt when it does not say. Fuzzed.
std::optional<std::time_t> signed_url_expiry(std::string_view url);

}  // namespace whfs::hub
