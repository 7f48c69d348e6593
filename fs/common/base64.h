#pragma once
// Base64 (RFC 4648), once for the tree: the standard alphabet with padding for the Hub's JSON
// (a preupload sample, a regular file's content in a commit), and the URL-safe alphabet without
// padding that a wheel's RECORD writes its hashes in (PEP 376, PEP 427), both ways.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace whfs {

// The standard alphabet ("+/"), padded with "=".
std::string base64(std::span<const std::byte> data);
std::string base64(std::string_view data);

// The URL-safe alphabet ("-_"), without padding.
std::string base64url_nopad(std::span<const std::byte> data);

// The bytes of URL-safe base64, padded or not; nullopt on a character outside the URL-safe
// alphabet (the standard one's "+/" included), padding that is incomplete, too long or not at
// the end, or a length no encoding has (4n+1 characters). The unused low bits of the last
// character are ignored, as Python's decoder ignores them.
std::optional<std::vector<std::uint8_t>> base64url_decode(std::string_view text);

}  // namespace whfs
