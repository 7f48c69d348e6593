#include "cache/records.h"

#include <xxhash.h>

#include <algorithm>

#include "cache/codec.h"

namespace whfs::cache {

namespace {
constexpr std::uint8_t kRecordVersion = 1;
constexpr std::uint8_t kVerifiedFlag = 1;
constexpr std::size_t kLmdbPageHeader = 16;  // PAGEHDRSZ
constexpr std::size_t kLmdbNodeHeader = 8;   // NODESIZE
constexpr std::size_t kLmdbIndexSlot = 2;    // indx_t

std::uint64_t get_be(std::span<const std::byte> b) {
  std::uint64_t v = 0;
  for (std::byte x : b) v = v << 8 | static_cast<std::uint64_t>(x);
  return v;
}
}  // namespace

template <std::size_t N>
void SmallKey<N>::put(std::span<const std::uint8_t> b) {
  for (std::uint8_t x : b) buf[size++] = static_cast<std::byte>(x);
}

template <std::size_t N>
void SmallKey<N>::put_be(std::uint64_t v, int n) {
  for (int i = n - 1; i >= 0; --i) buf[size++] = static_cast<std::byte>(v >> (8 * i) & 0xff);
}

template struct SmallKey<kContentKeyMax>;
template struct SmallKey<kContentKeyMax + 4>;
template struct SmallKey<8 + kContentKeyMax>;
template struct SmallKey<kContentKeyMax + kHolderSize>;

// ---- keys ------------------------------------------------------------------------------

namespace {
template <std::size_t N>
void put_content(SmallKey<N>& k, const ContentId& id) {
  k.buf[k.size++] = static_cast<std::byte>(id.kind());
  k.put(id.digest());
}
}  // namespace

ContentKey content_key(const ContentId& id) {
  ContentKey k;
  put_content(k, id);
  return k;
}

BlockKey block_key(const ContentId& id, std::uint32_t index) {
  BlockKey k;
  put_content(k, id);
  k.put_be(index, 4);
  return k;
}

LruKey lru_key(std::uint64_t last_access_ms, const ContentId& id) {
  LruKey k;
  k.put_be(last_access_ms, 8);
  put_content(k, id);
  return k;
}

LeaseKey lease_key(const ContentId& id, const Holder& holder) {
  LeaseKey k;
  put_content(k, id);
  k.put(holder);
  return k;
}

std::optional<ContentId> content_id_from_key(std::span<const std::byte> key) {
  if (key.empty()) return std::nullopt;
  const auto kind = static_cast<ContentId::Kind>(key[0]);
  if (kind != ContentId::Kind::kSha256 && kind != ContentId::Kind::kGitSha1) return std::nullopt;
  const auto digest = key.subspan(1);
  if (digest.size() != ContentId::digest_size(kind)) return std::nullopt;
  return ContentId::from_digest(
      kind, {reinterpret_cast<const std::uint8_t*>(digest.data()), digest.size()});
}

std::optional<std::uint32_t> block_index_in(std::span<const std::byte> key,
                                            std::span<const std::byte> prefix) {
  if (key.size() != prefix.size() + 4) return std::nullopt;
  if (!std::equal(prefix.begin(), prefix.end(), key.begin())) return std::nullopt;
  return static_cast<std::uint32_t>(get_be(key.subspan(prefix.size())));
}

std::optional<LruEntry> decode_lru_key(std::span<const std::byte> key) {
  if (key.size() < 8) return std::nullopt;
  auto id = content_id_from_key(key.subspan(8));
  if (!id) return std::nullopt;
  return LruEntry{get_be(key.first(8)), *id};
}

// ---- geometry --------------------------------------------------------------------------

std::uint32_t BlockGeometry::payload_for_pages(std::uint32_t pages, std::uint32_t page_size) {
  return static_cast<std::uint32_t>(std::size_t{pages} * page_size - kLmdbPageHeader -
                                    kChecksumSize);
}

std::uint32_t BlockGeometry::block_count(std::uint64_t content_size) const {
  return static_cast<std::uint32_t>((content_size + block_size_ - 1) / block_size_);
}

std::uint32_t BlockGeometry::block_length(std::uint64_t content_size, std::uint32_t index) const {
  const std::uint64_t start = std::uint64_t{index} * block_size_;
  if (start >= content_size) return 0;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(block_size_, content_size - start));
}

std::uint64_t BlockGeometry::footprint(std::size_t key_size, std::size_t value_size) const {
  // LMDB's me_nodemax: a leaf node bigger than this moves its value to overflow pages.
  const std::size_t node_max =
      (((page_size_ - kLmdbPageHeader) / 2) & ~std::size_t{1}) - kLmdbIndexSlot;
  const std::size_t node = kLmdbNodeHeader + key_size + value_size;
  if (node <= node_max) return node + kLmdbIndexSlot;
  const std::size_t pages = (kLmdbPageHeader - 1 + value_size) / page_size_ + 1;  // OVPAGES
  return pages * page_size_ + kLmdbNodeHeader + key_size + sizeof(std::uint64_t) + kLmdbIndexSlot;
}

std::uint64_t full_map_size(std::uint64_t cap, std::uint64_t page_size) {
  return cap / page_size * page_size;
}

std::uint64_t put_map_size(std::uint64_t cap, std::uint64_t page_size) {
  const std::uint64_t full = full_map_size(cap, page_size);
  const std::uint64_t reserve = std::clamp<std::uint64_t>(full / 64 / page_size * page_size,
                                                          64 * page_size, std::uint64_t{64} << 20);
  return full > 2 * reserve ? full - reserve : full / 2;
}

std::uint64_t block_checksum(std::span<const std::byte> key, std::span<const std::byte> payload) {
  const XXH64_hash_t seed = XXH3_64bits(key.data(), key.size());
  return XXH3_64bits_withSeed(payload.data(), payload.size(), seed);
}

// ---- records ---------------------------------------------------------------------------

std::string encode(const FormatRecord& r) {
  ByteWriter w;
  w.str(r.name);
  w.u32(r.block_size);
  w.u32(r.page_size);
  w.u64(r.created_ms);
  return w.take();
}

std::optional<FormatRecord> decode_format(std::span<const std::byte> v) {
  ByteReader r(v);
  FormatRecord f;
  f.name = r.str(256);
  // Only the name is read first: a newer format may lay out the rest differently.
  if (!r.ok()) return std::nullopt;
  if (f.name != kFormatName) return f;
  f.block_size = r.u32();
  f.page_size = r.u32();
  f.created_ms = r.u64();
  if (!r.done()) return std::nullopt;
  return f;
}

namespace {
// Each record's fields in their order on disk: one list serves the encoder and the decoder.
constexpr std::uint32_t ContentRecord::*kContentU32Fields[] = {
    &ContentRecord::present, &ContentRecord::total, &ContentRecord::epoch};
constexpr std::uint64_t ContentRecord::*kContentU64Fields[] = {&ContentRecord::size,
                                                               &ContentRecord::last_access_ms};
constexpr std::uint64_t Usage::*kUsageFields[] = {&Usage::blocks, &Usage::contents,
                                                  &Usage::footprint_bytes, &Usage::payload_bytes};
constexpr std::uint64_t Counters::*kCounterFields[] = {
    &Counters::hits,          &Counters::misses,         &Counters::evictions,
    &Counters::evicted_bytes, &Counters::corrupt_blocks, &Counters::corrupt_contents};

// A version byte, then the u64 fields of `rec`.
template <class T, std::size_t N>
std::string encode_u64_fields(const T& rec, std::uint64_t T::*const (&fields)[N]) {
  ByteWriter w;
  w.u8(kRecordVersion);
  for (auto f : fields) w.u64(rec.*f);
  return w.take();
}

template <class T, std::size_t N>
std::optional<T> decode_u64_fields(std::span<const std::byte> v,
                                   std::uint64_t T::*const (&fields)[N]) {
  ByteReader r(v);
  T rec;
  if (r.u8() != kRecordVersion) return std::nullopt;
  for (auto f : fields) rec.*f = r.u64();
  if (!r.done()) return std::nullopt;
  return rec;
}
}  // namespace

std::string encode(const ContentRecord& c) {
  ByteWriter w;
  w.u8(kRecordVersion);
  w.u8(c.verified ? kVerifiedFlag : 0);
  for (auto f : kContentU32Fields) w.u32(c.*f);
  for (auto f : kContentU64Fields) w.u64(c.*f);
  return w.take();
}

std::optional<ContentRecord> decode_content(std::span<const std::byte> v) {
  ByteReader r(v);
  ContentRecord c;
  if (r.u8() != kRecordVersion) return std::nullopt;
  c.verified = (r.u8() & kVerifiedFlag) != 0;
  for (auto f : kContentU32Fields) c.*f = r.u32();
  for (auto f : kContentU64Fields) c.*f = r.u64();
  if (!r.done() || c.present > c.total) return std::nullopt;
  return c;
}

std::string encode(const Usage& u) { return encode_u64_fields(u, kUsageFields); }

std::optional<Usage> decode_usage(std::span<const std::byte> v) {
  return decode_u64_fields(v, kUsageFields);
}

Counters& Counters::operator+=(const Counters& o) {
  for (auto f : kCounterFields) this->*f += o.*f;
  return *this;
}

std::string encode(const Counters& c) { return encode_u64_fields(c, kCounterFields); }

std::optional<Counters> decode_counters(std::span<const std::byte> v) {
  return decode_u64_fields(v, kCounterFields);
}

std::string encode_u64(std::uint64_t v) {
  ByteWriter w;
  w.u64(v);
  return w.take();
}

std::optional<std::uint64_t> decode_u64(std::span<const std::byte> v) {
  ByteReader r(v);
  const std::uint64_t x = r.u64();
  if (!r.done()) return std::nullopt;
  return x;
}

}  // namespace whfs::cache
