#pragma once
// Internal to the cache's block code (content_store.cpp: reads and puts; running_hashes.cpp and
// content_verifier.cpp: running hashes and whole-content checks): the stored block format and
// small helpers.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "cache/block_store.h"
#include "cache/cache_error.h"
#include "cache/lmdb.h"
#include "cache/records.h"

namespace whfs::cache {

// A put is one write txn up to this size; bigger ones are split so that other writers (other
// threads, other processes) never wait long for LMDB's single writer lock.
constexpr std::size_t kMaxPutBytes = std::size_t{256} << 20;
// verify_content hashes this much per read txn: a long-lived snapshot would keep LMDB from
// reusing pages freed meanwhile.
constexpr std::uint64_t kVerifyChunkBytes = std::uint64_t{64} << 20;

inline std::uint64_t load_le64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<std::uint64_t>(p[i]);
  return v;
}

inline void store_le64(std::byte* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i) & 0xff);
}

// The payload of a stored block value, its checksum not checked: for passes whose every byte a
// whole-content hash covers anyway.
inline std::optional<std::span<const std::byte>> unchecked_payload(lmdb::Bytes value) {
  if (value.size() < BlockGeometry::kChecksumSize) return std::nullopt;
  return value.subspan(BlockGeometry::kChecksumSize);
}

// The payload of a stored block value when its checksum holds.
inline std::optional<std::span<const std::byte>> checked_payload(lmdb::Bytes key,
                                                                 lmdb::Bytes value) {
  if (value.size() < BlockGeometry::kChecksumSize) return std::nullopt;
  const auto payload = value.subspan(BlockGeometry::kChecksumSize);
  if (block_checksum(key, payload) != load_le64(value.data())) return std::nullopt;
  return payload;
}

inline ContentState state_of(const ContentRecord& r) { return {r.present, r.total, r.verified}; }

inline Unexpected<CacheError> invalid(const std::string& what) {
  return cache_error(CacheError::Kind::kInvalidArgument, "cache: " + what);
}

// A new record's epoch is random, so that a record deleted and created again (by another
// process) never looks like the one a running hash started on.
std::uint32_t random_epoch();

}  // namespace whfs::cache
