#pragma once
// One entry of a remote folder listing, as the Hub client parses it and the cache persists it.
// Defined here so that fs/hub and cache/ share the type without knowing each other.

#include <cstdint>
#include <string>

namespace whfs {

struct RemoteEntry {
  enum class Type : std::uint8_t { kFile = 0, kDirectory = 1 };

  std::string path;  // full path from the repo root, "/"-separated, validated
  Type type = Type::kFile;
  std::uint64_t size = 0;  // real content size (lfs.size when present); 0 for folders
  std::string oid;         // git oid, 40 hex: blob of the content (plain file), of the LFS
                           // pointer (LFS file), or the tree (folder)
  std::string lfs_sha256;  // 64 hex: sha256 of the content for LFS files, else empty
  std::string xet_hash;    // 64 hex for Xet-backed files, else empty

  bool is_dir() const { return type == Type::kDirectory; }
  bool is_lfs() const { return !lfs_sha256.empty(); }
  // The name after the last "/".
  std::string name() const {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
  }
  bool operator==(const RemoteEntry&) const = default;
};

}  // namespace whfs
