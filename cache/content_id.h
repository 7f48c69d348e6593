#pragma once
// The identity of a file's bytes: the Hub's SHA-256 for LFS files, the git blob SHA-1 for the
// others. Blocks are keyed by it, so the same bytes under two paths or across commits are
// stored once and never need invalidating.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "fs/common/remote_entry.h"

namespace whfs::cache {

class ContentId {
 public:
  // The values are part of the on-disk key format: never renumber.
  enum class Kind : std::uint8_t { kSha256 = 1, kGitSha1 = 2 };

  static constexpr std::size_t kMaxDigestSize = 32;

  // nullopt unless `hex` is the right length (64 or 40) of hex digits.
  static std::optional<ContentId> from_hex(Kind kind, std::string_view hex);
  // nullopt unless `digest` is 32 (kSha256) or 20 (kGitSha1) bytes.
  static std::optional<ContentId> from_digest(Kind kind, std::span<const std::uint8_t> digest);
  // "sha256:<64 hex>" or "gitsha1:<40 hex>", as to_string() writes it.
  static std::optional<ContentId> parse(std::string_view text);
  // The id of a file entry: lfs_sha256 when set, else the git blob oid; nullopt for a folder
  // or malformed hex.
  static std::optional<ContentId> of(const RemoteEntry& entry);

  static constexpr std::size_t digest_size(Kind kind) { return kind == Kind::kSha256 ? 32 : 20; }

  Kind kind() const { return kind_; }
  std::span<const std::uint8_t> digest() const { return {bytes_.data(), digest_size(kind_)}; }
  std::string hex() const;
  std::string to_string() const;

  bool operator==(const ContentId& other) const {
    return kind_ == other.kind_ &&
           std::equal(digest().begin(), digest().end(), other.digest().begin());
  }

 private:
  ContentId(Kind kind, std::span<const std::uint8_t> digest);

  Kind kind_;
  std::array<std::uint8_t, kMaxDigestSize> bytes_{};
};

}  // namespace whfs::cache

template <>
struct std::hash<whfs::cache::ContentId> {
  std::size_t operator()(const whfs::cache::ContentId& id) const noexcept {
    // The digest is already uniformly distributed: its first bytes are a good hash.
    std::size_t h = 0;
    for (std::size_t i = 0; i < sizeof h; ++i) h = h << 8 | id.digest()[i];
    return h ^ static_cast<std::size_t>(id.kind());
  }
};
