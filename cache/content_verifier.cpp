// ContentVerifier: the verification of a whole content against its hash.

#include "cache/content_verifier.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "cache/block_format.h"
#include "fs/common/hash.h"

namespace whfs::cache {

Result<ContentState> ContentVerifier::verify(const ContentId& id, std::uint64_t content_size) {
  const std::uint32_t total = geometry_.block_count(content_size);
  std::optional<ContentRecord> rec;
  auto ok = engine_.read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
    auto r = store_.load_record(rd.txn, id);
    if (!r) return Unexpected<lmdb::Error>{r.error()};
    rec = *r;
    return {};
  });
  if (!ok) return Unexpected<CacheError>{ok.error()};
  if (!rec || rec->size != content_size) return ContentState{0, total, false};
  if (!rec->complete()) return state_of(*rec);

  // The hash this process computed while the blocks arrived, when it covers them all; else a
  // full pass over the stored blocks.
  Result<std::optional<std::vector<std::uint8_t>>> hashed =
      std::optional<std::vector<std::uint8_t>>();
  if (auto running = hashes_.take_digest(id, content_size, rec->epoch)) {
    hashed = std::optional<std::vector<std::uint8_t>>(std::move(*running));
  } else {
    second_passes_.fetch_add(1);
    hashed = hash_content(id, content_size);
  }
  if (!hashed) return Unexpected<CacheError>{hashed.error()};
  if (!*hashed) {
    // Blocks went missing (evicted, or failed their checksum) while hashing.
    auto now = store_.content_state(id);
    if (!now) return Unexpected<CacheError>{now.error()};
    return now->value_or(ContentState{0, total, false});
  }
  const bool match =
      std::equal(id.digest().begin(), id.digest().end(), (*hashed)->begin(), (*hashed)->end());
  if (read_only_) {
    // Nothing is dropped or recorded in a read-only cache: this process keeps what it found.
    store_.keep_unwritten(id, match ? ContentStore::Found::kMatch : ContentStore::Found::kMismatch);
    if (!match) {
      return cache_error(CacheError::Kind::kCorrupt,
                         "read-only cache: " + id.to_string() + " does not match its hash");
    }
    ContentState st = state_of(*rec);
    st.verified = true;
    return st;
  }
  if (!match) {
    auto dropped = engine_.write(0, [&](WriteScope& s) -> lmdb::Res<void> {
      ++s.counters.corrupt_contents;
      auto purged = store_.purge(s, id);
      if (!purged) return Unexpected<lmdb::Error>{purged.error()};
      return {};
    });
    spdlog::warn("cache: {} does not match its hash: dropped all {} blocks", id.to_string(), total);
    if (!dropped) return Unexpected<CacheError>{dropped.error()};
    return cache_error(CacheError::Kind::kCorrupt,
                       "cache: " + id.to_string() + " does not match its hash");
  }
  ContentState state = state_of(*rec);
  auto marked = engine_.write(0, [&](WriteScope& s) -> lmdb::Res<void> {
    auto now = store_.load_record(s.txn, id);
    if (!now) return Unexpected<lmdb::Error>{now.error()};
    // Record it only if no block was deleted (and maybe replaced) since we hashed.
    if (!*now || (*now)->epoch != rec->epoch || !(*now)->complete()) {
      state = *now ? state_of(**now) : ContentState{0, total, false};
      return {};
    }
    ContentRecord updated = **now;
    updated.verified = true;
    state = state_of(updated);
    return updated.verified == (*now)->verified ? lmdb::Res<void>()
                                                : store_.store_record(s, id, *now, updated);
  });
  if (!marked) return Unexpected<CacheError>{marked.error()};
  return state;
}

Result<std::optional<std::vector<std::uint8_t>>> ContentVerifier::hash_content(
    const ContentId& id, std::uint64_t content_size) {
  Hasher hasher = id.kind() == ContentId::Kind::kSha256 ? Hasher(HashAlgo::kSha256)
                                                        : git_blob_hasher(content_size);
  const std::uint32_t total = geometry_.block_count(content_size);
  const auto per_txn = static_cast<std::uint32_t>(
      std::max<std::uint64_t>(1, kVerifyChunkBytes / geometry_.block_size()));
  const ContentKey prefix = content_key(id);
  std::vector<std::uint32_t> damaged;
  bool gap = false;
  for (std::uint32_t first = 0; first < total && !gap && damaged.empty(); first += per_txn) {
    const std::uint32_t end = std::min(total, first + per_txn);
    auto ok = engine_.read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      StoredBytesHasher bytes(hasher, engine_.env());
      auto e = rd.cursor.seek(block_key(id, first).bytes());
      for (std::uint32_t next = first; next < end; ++next, e = rd.cursor.next()) {
        if (!e) return Unexpected<lmdb::Error>{e.error()};
        const auto index = *e ? block_index_in((*e)->key, prefix.bytes()) : std::nullopt;
        if (index != next) {
          gap = true;
          return {};
        }
        // No per-block checksum on this pass: the whole content's hash covers every byte (a
        // third of the pass's time saved); a mismatch is looked at block by block below.
        const auto value = (*e)->value;
        if (value.size() < BlockGeometry::kChecksumSize ||
            value.size() - BlockGeometry::kChecksumSize !=
                geometry_.block_length(content_size, next)) {
          damaged.push_back(next);
          return {};
        }
        bytes.add(value.subspan(BlockGeometry::kChecksumSize));
      }
      bytes.flush();  // (within the txn)
      return {};
    });
    if (!ok) return Unexpected<CacheError>{ok.error()};
  }
  if (!damaged.empty() && !read_only_) (void)store_.drop_damaged_blocks(id, damaged);
  if (gap || !damaged.empty()) return std::optional<std::vector<std::uint8_t>>();
  auto digest = hasher.finish();
  if (!std::equal(id.digest().begin(), id.digest().end(), digest.begin(), digest.end())) {
    // A block damaged at rest fails its own checksum: drop just it (a miss, downloaded again)
    // rather than call the whole content a bad download.
    auto failing = blocks_failing_checksum(id, content_size);
    if (!failing) return Unexpected<CacheError>{failing.error()};
    if (!failing->empty()) {
      if (!read_only_) (void)store_.drop_damaged_blocks(id, *failing);
      return std::optional<std::vector<std::uint8_t>>();
    }
  }
  return std::optional<std::vector<std::uint8_t>>(std::move(digest));
}

Result<std::vector<std::uint32_t>> ContentVerifier::blocks_failing_checksum(
    const ContentId& id, std::uint64_t content_size) {
  std::vector<std::uint32_t> failing;
  const std::uint32_t total = geometry_.block_count(content_size);
  const ContentKey prefix = content_key(id);
  auto ok = engine_.read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
    failing.clear();
    auto e = rd.cursor.seek(block_key(id, 0).bytes());
    for (; e && *e; e = rd.cursor.next()) {
      const auto index = block_index_in((*e)->key, prefix.bytes());
      if (!index || *index >= total) break;
      if (!checked_payload((*e)->key, (*e)->value)) failing.push_back(*index);
    }
    if (!e) return Unexpected<lmdb::Error>{e.error()};
    return {};
  });
  if (!ok) return Unexpected<CacheError>{ok.error()};
  return failing;
}

}  // namespace whfs::cache
