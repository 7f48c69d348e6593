// RunningHashes: the running hash of a content's blocks as they arrive in order.

#include "cache/running_hashes.h"

#include <algorithm>
#include <memory>
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
    StoredBytesHasher bytes(h.hasher, engine_.env());
    for (auto e = rd.cursor.seek(block_key(id, h.next).bytes()); h.next < total;
         e = rd.cursor.next()) {
      if (!e) return Unexpected<lmdb::Error>{e.error()};
      const auto index = *e ? block_index_in((*e)->key, prefix.bytes()) : std::nullopt;
      if (!index || *index != h.next) break;
      // No block checksum: the content's hash covers these bytes (as in hash_content).
      const auto payload = unchecked_payload((*e)->value);
      if (!payload || payload->size() != geometry_.block_length(h.content_size, h.next)) break;
      bytes.add(*payload);
      ++h.next;
    }
    bytes.flush();  // (within the txn: the pages stay these bytes until it ends)
    return {};
  });
  return static_cast<bool>(ok);
}

void StoredBytesHasher::add(std::span<const std::byte> payload) {
  if (scratch_ == nullptr) {
    thread_local std::unique_ptr<std::byte[]> buf;  // (touched once per thread, not per hash)
    if (!buf) buf.reset(new std::byte[kScratch]);
    scratch_ = buf.get();
  }
  while (!payload.empty()) {
    if (used_ == kScratch) flush();
    const std::size_t n = std::min(payload.size(), kScratch - used_);
    copy_.add(payload.first(n), scratch_ + used_);
    used_ += n;
    payload = payload.subspan(n);
  }
}

void StoredBytesHasher::flush() {
  copy_.flush();
  if (used_ > 0) hasher_.update(std::span<const std::byte>(scratch_, used_));
  used_ = 0;
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
