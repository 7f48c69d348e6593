#pragma once
// Encoding of the metadata the cache keeps so that a remount or a start without network needs
// no request: revision -> commit, and per commit each fetched folder listing.
//
//   revisions  key(endpoint, repo, rev, audience)
//                -> v1: u8 1, str echo, str commit, u64 resolved_ms
//   listings   key(endpoint, repo, commit, folder, audience) -> v1: u8 1, str echo, u32 n, n x
//   entry entry: str path, u8 type, u64 size, str oid, str lfs_sha256, str xet_hash listings
//   key("wheel-metadata", content id, audience)
//                -> v1: u8 1, str echo, u8 verified, str bytes
//              (a wheel's METADATA file, by the wheel's content)
//   listings   key("grant", content id, audience) -> v1: u8 1, str echo
//              (the audience may read the content's bytes: audience.h)
// The audience is a key's last part (audience.h); records of caches made before audiences
// existed have one part fewer, so they are never found (a miss: fetched again). Keys of a
// different number of parts never meet (each part is length-prefixed).
//
// A key is the length-prefixed parts ("echo"); when that is longer than LMDB's key limit it is
// 0xff + SHA-256 of the echo instead. The value repeats the echo so a lookup can tell its own
// record from a hash collision or from garbage. Decoding is bounds-checked: anything malformed
// decodes to nullopt (the caller logs it and treats it as a miss).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fs/common/remote_entry.h"

namespace whfs::cache {

// Times are stored as ms since the epoch; anything past 9999-12-31 is garbage (and would
// overflow system_clock's nanoseconds).
inline constexpr std::uint64_t kMaxTimeMs = 253402300799999;

struct MetadataKey {
  std::string echo;  // the length-prefixed parts
  std::string key;   // what LMDB stores: the echo, or 0xff + its SHA-256 when too long
};
MetadataKey metadata_key(std::initializer_list<std::string_view> parts);

struct RevisionRecord {
  std::string commit;
  std::chrono::system_clock::time_point resolved_at;
  std::string audience;  // which audience it was found under (part of the key, not the value)
  bool operator==(const RevisionRecord&) const = default;
};

std::string encode_revision(const MetadataKey& key, const RevisionRecord& rev);
std::optional<RevisionRecord> decode_revision(std::span<const std::byte> value,
                                              const MetadataKey& key);

std::string encode_listing(const MetadataKey& key, const std::vector<RemoteEntry>& entries);
std::optional<std::vector<RemoteEntry>> decode_listing(std::span<const std::byte> value,
                                                       const MetadataKey& key);

// A wheel's METADATA file, and whether it was read from the wheel after the wheel matched its
// hash (and its RECORD), or only from ranged reads before.
struct WheelMetadataRecord {
  std::string metadata;
  bool verified = false;
  bool operator==(const WheelMetadataRecord&) const = default;
};
inline constexpr std::size_t kMaxWheelMetadata = 4u << 20;
MetadataKey wheel_metadata_key(std::string_view content_id, std::string_view audience);

// A grant: the audience may read the bytes of the content (ContentId::to_string()).
MetadataKey grant_key(std::string_view content_id, std::string_view audience);
std::string encode_grant(const MetadataKey& key);
bool decode_grant(std::span<const std::byte> value, const MetadataKey& key);
std::string encode_wheel_metadata(const MetadataKey& key, const WheelMetadataRecord& record);
std::optional<WheelMetadataRecord> decode_wheel_metadata(std::span<const std::byte> value,
                                                         const MetadataKey& key);

}  // namespace whfs::cache
