#pragma once
// The on-disk format of the block cache ("wheelhouse-fs-cache/1"): the named LMDB databases,
// their keys and values. Changing anything here is a format change: bump kFormatName, and
// regenerate the golden fixture (tests/unit/cache/data) on purpose.
//
//   meta      "format" -> FormatRecord; "usage" -> Usage; "counters" -> Counters; "cap" -> u64;
//             "shared" -> u64 (ms since the epoch): when the store was first found shared with
//             a group or writable by others; absent in a store that was always private
//   blocks    ContentKey + u32 BE index -> u64 LE XXH3 checksum + payload
//   contents  ContentKey -> ContentRecord
//   lru       u64 BE last access (ms) + ContentKey -> "" (the eviction order)
//   leases    ContentKey + 16-byte holder -> u64 LE expiry (ms since the epoch)
//   revisions, listings: see metadata_codec.h
//
// ContentKey = kind byte (ContentId::Kind) + digest (32 or 20 bytes). Big-endian numbers in
// keys keep LMDB's byte order equal to numeric order.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "cache/content_id.h"

namespace whfs::cache {

inline constexpr std::string_view kFormatName = "wheelhouse-fs-cache/1";

inline constexpr const char* kMetaDb = "meta";
inline constexpr const char* kBlocksDb = "blocks";
inline constexpr const char* kContentsDb = "contents";
inline constexpr const char* kLruDb = "lru";
inline constexpr const char* kLeasesDb = "leases";
inline constexpr const char* kRevisionsDb = "revisions";
inline constexpr const char* kListingsDb = "listings";

inline constexpr std::string_view kFormatKey = "format";
inline constexpr std::string_view kUsageKey = "usage";
inline constexpr std::string_view kCountersKey = "counters";
inline constexpr std::string_view kCapKey = "cap";
inline constexpr std::string_view kSharedKey = "shared";

// A key of at most N bytes held by value (no allocation on the read path).
template <std::size_t N>
struct SmallKey {
  std::array<std::byte, N> buf{};
  std::size_t size = 0;
  std::span<const std::byte> bytes() const { return {buf.data(), size}; }
  void put(std::span<const std::uint8_t> b);
  void put_be(std::uint64_t v, int n);
};

inline constexpr std::size_t kContentKeyMax = 1 + ContentId::kMaxDigestSize;
inline constexpr std::size_t kHolderSize = 16;
using ContentKey = SmallKey<kContentKeyMax>;
using BlockKey = SmallKey<kContentKeyMax + 4>;
using LruKey = SmallKey<8 + kContentKeyMax>;
using LeaseKey = SmallKey<kContentKeyMax + kHolderSize>;
using Holder = std::array<std::uint8_t, kHolderSize>;

ContentKey content_key(const ContentId& id);
BlockKey block_key(const ContentId& id, std::uint32_t index);
LruKey lru_key(std::uint64_t last_access_ms, const ContentId& id);
LeaseKey lease_key(const ContentId& id, const Holder& holder);

std::optional<ContentId> content_id_from_key(std::span<const std::byte> key);
// The block index when `key` is a block key of `prefix` (a content key), else nullopt.
std::optional<std::uint32_t> block_index_in(std::span<const std::byte> key,
                                            std::span<const std::byte> prefix);
struct LruEntry {
  std::uint64_t last_access_ms;
  ContentId id;
};
std::optional<LruEntry> decode_lru_key(std::span<const std::byte> key);

// Block payload sizes and their cost in LMDB pages.
class BlockGeometry {
 public:
  static constexpr std::size_t kChecksumSize = 8;
  // The payload that makes a block value fill exactly `pages` overflow pages: LMDB stores a
  // value of V bytes in ceil((V + 16) / page) pages (16 = page header).
  static std::uint32_t payload_for_pages(std::uint32_t pages, std::uint32_t page_size);

  BlockGeometry(std::uint32_t block_size, std::uint32_t page_size)
      : block_size_(block_size), page_size_(page_size) {}

  std::uint32_t block_size() const { return block_size_; }
  std::uint32_t page_size() const { return page_size_; }
  std::uint32_t block_count(std::uint64_t content_size) const;
  std::uint32_t block_length(std::uint64_t content_size, std::uint32_t index) const;
  // Bytes of the data file a block value of `value_size` takes (overflow pages or leaf room).
  std::uint64_t footprint(std::size_t key_size, std::size_t value_size) const;

 private:
  std::uint32_t block_size_;
  std::uint32_t page_size_;
};

// The map size puts run under: the cap (rounded down to pages) less a small reserve that only
// eviction txns may use. LMDB needs fresh pages even to delete, and reuses the pages a txn
// frees only two commits later, so a map filled to the last page by puts could otherwise never
// commit again; with the reserve an eviction can always commit, and the data file still never
// grows past the cap. The reserve is 1/64 of the cap, at least 64 pages, at most 64 MiB.
std::uint64_t put_map_size(std::uint64_t cap, std::uint64_t page_size);
std::uint64_t full_map_size(std::uint64_t cap, std::uint64_t page_size);

// XXH3-64 of the payload, seeded with a hash of the key: a block stored under the wrong key
// fails its check too.
std::uint64_t block_checksum(std::span<const std::byte> key, std::span<const std::byte> payload);

struct FormatRecord {
  std::string name{kFormatName};
  std::uint32_t block_size = 0;
  std::uint32_t page_size = 0;
  std::uint64_t created_ms = 0;
};
std::string encode(const FormatRecord& r);
std::optional<FormatRecord> decode_format(std::span<const std::byte> v);

struct ContentRecord {
  std::uint64_t size = 0;
  std::uint32_t present = 0;
  std::uint32_t total = 0;
  // Changes whenever a block of the content is deleted, so a verification that raced with a
  // deletion and a re-put is not recorded.
  std::uint32_t epoch = 0;
  bool verified = false;
  std::uint64_t last_access_ms = 0;
  bool complete() const { return present == total; }
};
std::string encode(const ContentRecord& r);
std::optional<ContentRecord> decode_content(std::span<const std::byte> v);

// Exact totals, updated in the write txn that changes them.
struct Usage {
  std::uint64_t blocks = 0;
  std::uint64_t contents = 0;
  std::uint64_t footprint_bytes = 0;  // pages of all DBs in the data file (LMDB's count)
  std::uint64_t payload_bytes = 0;    // content bytes stored
  bool operator==(const Usage&) const = default;
};
std::string encode(const Usage& u);
std::optional<Usage> decode_usage(std::span<const std::byte> v);

// Cumulative event counters, added to in batches.
struct Counters {
  std::uint64_t hits = 0;    // blocks served
  std::uint64_t misses = 0;  // blocks asked for and absent
  std::uint64_t evictions = 0;
  std::uint64_t evicted_bytes = 0;
  std::uint64_t corrupt_blocks = 0;
  std::uint64_t corrupt_contents = 0;
  Counters& operator+=(const Counters& o);
  bool operator==(const Counters&) const = default;
};
std::string encode(const Counters& c);
std::optional<Counters> decode_counters(std::span<const std::byte> v);

std::string encode_u64(std::uint64_t v);
std::optional<std::uint64_t> decode_u64(std::span<const std::byte> v);

}  // namespace whfs::cache
