#include "cache/metadata_codec.h"

#include "cache/codec.h"
#include "fs/common/hash.h"

namespace whfs::cache {

namespace {
constexpr std::uint8_t kVersion = 1;
constexpr std::size_t kMaxInlineKey = 480;  // LMDB's default key limit is 511 bytes
constexpr std::size_t kMaxEcho = std::size_t{64} << 10;
constexpr std::size_t kMaxPath = std::size_t{16} << 10;
constexpr std::size_t kMaxHash = 128;
// The smallest encoded entry: 4 string lengths, type and size.
constexpr std::size_t kMinEntrySize = 4 * 4 + 1 + 8;

std::chrono::system_clock::time_point from_ms(std::uint64_t ms) {
  return std::chrono::system_clock::time_point(
      std::chrono::milliseconds(static_cast<std::int64_t>(ms)));
}

std::uint64_t to_ms(std::chrono::system_clock::time_point t) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
}

// Reads the version and the key echo; false unless they are ours.
bool read_header(ByteReader& r, const MetadataKey& key) {
  if (r.u8() != kVersion) return false;
  return r.str(kMaxEcho) == key.echo && r.ok();
}
}  // namespace

MetadataKey metadata_key(std::initializer_list<std::string_view> parts) {
  ByteWriter w;
  for (std::string_view p : parts) w.str(p);
  MetadataKey k{w.take(), {}};
  if (k.echo.size() <= kMaxInlineKey) {
    k.key = k.echo;
  } else {
    Hasher h(HashAlgo::kSha256);
    h.update(k.echo);
    const auto digest = h.finish();
    k.key = "\xff";
    k.key.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  }
  return k;
}

std::string encode_revision(const MetadataKey& key, const RevisionRecord& rev) {
  ByteWriter w;
  w.u8(kVersion);
  w.str(key.echo);
  w.str(rev.commit);
  w.u64(to_ms(rev.resolved_at));
  return w.take();
}

std::optional<RevisionRecord> decode_revision(std::span<const std::byte> value,
                                              const MetadataKey& key) {
  ByteReader r(value);
  if (!read_header(r, key)) return std::nullopt;
  RevisionRecord rev;
  rev.commit = r.str(kMaxHash);
  const std::uint64_t ms = r.u64();
  if (!r.done() || ms > kMaxTimeMs) return std::nullopt;
  rev.resolved_at = from_ms(ms);
  return rev;
}

std::string encode_listing(const MetadataKey& key, const std::vector<RemoteEntry>& entries) {
  ByteWriter w;
  w.u8(kVersion);
  w.str(key.echo);
  w.u32(static_cast<std::uint32_t>(entries.size()));
  for (const RemoteEntry& e : entries) {
    w.str(e.path);
    w.u8(static_cast<std::uint8_t>(e.type));
    w.u64(e.size);
    w.str(e.oid);
    w.str(e.lfs_sha256);
    w.str(e.xet_hash);
  }
  return w.take();
}

std::optional<std::vector<RemoteEntry>> decode_listing(std::span<const std::byte> value,
                                                       const MetadataKey& key) {
  ByteReader r(value);
  if (!read_header(r, key)) return std::nullopt;
  const std::uint32_t n = r.u32();
  // Bound the allocation by what the input can hold, so garbage cannot ask for gigabytes.
  if (!r.ok() || n > r.remaining() / kMinEntrySize) return std::nullopt;
  std::vector<RemoteEntry> entries(n);
  for (RemoteEntry& e : entries) {
    e.path = r.str(kMaxPath);
    const std::uint8_t type = r.u8();
    if (type > static_cast<std::uint8_t>(RemoteEntry::Type::kDirectory)) r.fail();
    e.type = static_cast<RemoteEntry::Type>(type);
    e.size = r.u64();
    e.oid = r.str(kMaxHash);
    e.lfs_sha256 = r.str(kMaxHash);
    e.xet_hash = r.str(kMaxHash);
    if (!r.ok()) return std::nullopt;
  }
  if (!r.done()) return std::nullopt;
  return entries;
}

MetadataKey wheel_metadata_key(std::string_view content_id, std::string_view audience) {
  return metadata_key({"wheel-metadata", content_id, audience});
}

MetadataKey grant_key(std::string_view content_id, std::string_view audience) {
  return metadata_key({"grant", content_id, audience});
}

std::string encode_grant(const MetadataKey& key) {
  ByteWriter w;
  w.u8(kVersion);
  w.str(key.echo);
  return w.take();
}

bool decode_grant(std::span<const std::byte> value, const MetadataKey& key) {
  ByteReader r(value);
  return read_header(r, key) && r.done();
}

std::string encode_wheel_metadata(const MetadataKey& key, const WheelMetadataRecord& record) {
  ByteWriter w;
  w.u8(kVersion);
  w.str(key.echo);
  w.u8(record.verified ? 1 : 0);
  w.str(record.metadata);
  return w.take();
}

std::optional<WheelMetadataRecord> decode_wheel_metadata(std::span<const std::byte> value,
                                                         const MetadataKey& key) {
  ByteReader r(value);
  if (!read_header(r, key)) return std::nullopt;
  WheelMetadataRecord rec;
  const std::uint8_t verified = r.u8();
  rec.metadata = r.str(kMaxWheelMetadata);
  if (!r.done() || verified > 1) return std::nullopt;
  rec.verified = verified == 1;
  return rec;
}

}  // namespace whfs::cache
