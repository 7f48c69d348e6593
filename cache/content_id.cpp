#include "cache/content_id.h"

#include <algorithm>

#include "fs/common/hash.h"

namespace whfs::cache {

namespace {
constexpr std::string_view kSha256Prefix = "sha256:";
constexpr std::string_view kGitSha1Prefix = "gitsha1:";
}  // namespace

ContentId::ContentId(Kind kind, std::span<const std::uint8_t> digest) : kind_(kind) {
  std::copy(digest.begin(), digest.end(), bytes_.begin());
}

std::optional<ContentId> ContentId::from_digest(Kind kind, std::span<const std::uint8_t> digest) {
  if (kind != Kind::kSha256 && kind != Kind::kGitSha1) return std::nullopt;
  if (digest.size() != digest_size(kind)) return std::nullopt;
  return ContentId(kind, digest);
}

std::optional<ContentId> ContentId::from_hex(Kind kind, std::string_view hex) {
  if (hex.size() != 2 * digest_size(kind)) return std::nullopt;
  const auto bytes = whfs::from_hex(hex);
  if (!bytes) return std::nullopt;
  return from_digest(kind, *bytes);
}

std::optional<ContentId> ContentId::parse(std::string_view text) {
  if (text.starts_with(kSha256Prefix)) {
    return from_hex(Kind::kSha256, text.substr(kSha256Prefix.size()));
  }
  if (text.starts_with(kGitSha1Prefix)) {
    return from_hex(Kind::kGitSha1, text.substr(kGitSha1Prefix.size()));
  }
  return std::nullopt;
}

std::optional<ContentId> ContentId::of(const RemoteEntry& entry) {
  if (entry.is_dir()) return std::nullopt;
  if (entry.is_lfs()) return from_hex(Kind::kSha256, entry.lfs_sha256);
  return from_hex(Kind::kGitSha1, entry.oid);
}

std::string ContentId::hex() const { return whfs::to_hex(digest()); }

std::string ContentId::to_string() const {
  return std::string(kind_ == Kind::kSha256 ? kSha256Prefix : kGitSha1Prefix) + hex();
}

}  // namespace whfs::cache
