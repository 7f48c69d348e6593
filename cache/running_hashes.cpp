// RunningHashes: the running hash of a content's blocks as they arrive in order.

#include "cache/running_hashes.h"

#include <algorithm>
#include <utility>

#include "cache/block_format.h"

namespace whfs::cache {

void RunningHashes::advance(const ContentId& id, std::uint64_t content_size, std::uint32_t first,
                            std::span<const std::byte> data, bool exact, std::uint32_t epoch) {
  std::shared_ptr<RunningHash> h;
  {
    std::lock_guard lock(mu_);
    auto it = hashes_.find(id);
    if (it != hashes_.end()) {
      h = it->second;
    } else if (first == 0) {
      Hasher hasher = id.kind() == ContentId::Kind::kSha256 ? Hasher(HashAlgo::kSha256)
                                                            : git_blob_hasher(content_size);
      h = std::make_shared<RunningHash>(std::move(hasher), content_size, epoch);
      hashes_.emplace(id, h);
    } else {
      return;  // the front has not arrived: nothing to hash yet
    }
  }
  if (h->epoch != epoch || h->content_size != content_size) {  // blocks were deleted since
    forget(id);
    return;
  }
  // Marked before the lock is tried: a thread hashing now sees the mark once it is done, and
  // hashes these blocks from the store then.
  h->more.store(true);
  std::unique_lock lock(h->mu, std::try_to_lock);
  if (!lock.owns_lock()) return;
  h->more.store(false);
  const std::uint32_t bs = geometry_.block_size();
  const auto n = static_cast<std::uint32_t>((data.size() + bs - 1) / bs);
  if (exact && first <= h->next && h->next < first + n) {
    h->hasher.update(data.subspan(std::size_t{h->next - first} * bs));
    h->next = first + n;
  }
  while (true) {
    if (!catch_up(id, *h)) {
      lock.unlock();
      forget(id);
      return;
    }
    lock.unlock();
    // Blocks put meanwhile by threads that found the lock taken: once more, unless one of
    // them holds it now (then it looks).
    if (!h->more.load() || !lock.try_lock()) return;
    h->more.store(false);
  }
}

bool RunningHashes::catch_up(const ContentId& id, RunningHash& h) {
  // Blocks that came out of order may follow: hash them from the store up to the next gap.
  const std::uint32_t total = geometry_.block_count(h.content_size);
  if (h.next >= total) return true;
  const ContentKey prefix = content_key(id);
  auto ok = engine_.read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
    for (auto e = rd.cursor.seek(block_key(id, h.next).bytes()); h.next < total;
         e = rd.cursor.next()) {
      if (!e) return Unexpected<lmdb::Error>{e.error()};
      const auto index = *e ? block_index_in((*e)->key, prefix.bytes()) : std::nullopt;
      if (!index || *index != h.next) break;
      // No block checksum: the content's hash covers these bytes (as in hash_content).
      const auto payload = unchecked_payload((*e)->value);
      if (!payload || payload->size() != geometry_.block_length(h.content_size, h.next)) break;
      hash_mapped(h.hasher, *payload);
      ++h.next;
    }
    return {};
  });
  return static_cast<bool>(ok);
}

void hash_mapped(Hasher& hasher, std::span<const std::byte> data) {
  // The hardware prefetchers stop at page boundaries, and the stored bytes come from LMDB's
  // map (pages of 4 KiB, out of the CPU's caches when the hash catches up on tens of MiB): the
  // next page is asked for while this one is hashed. Measured on a cold 256 MiB read: the hash
  // catches up at 1.3 GB/s instead of 1.05.
  constexpr std::size_t kPage = 4096;
  for (std::size_t off = 0; off < data.size(); off += kPage) {
    const std::size_t next_end = std::min(data.size(), off + 2 * kPage);
    for (std::size_t p = off + kPage; p < next_end; p += 64) __builtin_prefetch(data.data() + p);
    hasher.update(data.subspan(off, std::min(kPage, data.size() - off)));
  }
}

std::optional<std::vector<std::uint8_t>> RunningHashes::take_digest(const ContentId& id,
                                                                    std::uint64_t content_size,
                                                                    std::uint32_t epoch) {
  std::shared_ptr<RunningHash> h;
  {
    std::lock_guard lock(mu_);
    auto it = hashes_.find(id);
    if (it == hashes_.end()) return std::nullopt;
    h = it->second;
    hashes_.erase(it);
  }
  // Waits for a thread hashing it now; the blocks put while it did are hashed here.
  std::lock_guard lock(h->mu);
  if (h->epoch != epoch || h->content_size != content_size || !catch_up(id, *h)) {
    return std::nullopt;
  }
  if (h->next != geometry_.block_count(content_size)) return std::nullopt;
  return h->hasher.finish();
}

void RunningHashes::forget(const ContentId& id) {
  std::lock_guard lock(mu_);
  hashes_.erase(id);
}

}  // namespace whfs::cache
