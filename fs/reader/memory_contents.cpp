#include "fs/reader/memory_contents.h"

#include <spdlog/spdlog.h>

namespace whfs::reader {

std::shared_ptr<const MemoryContent> MemoryContents::hit(const cache::ContentId& id) {
  std::lock_guard lock(mu_);
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (it->first == id) {
      lru_.splice(lru_.begin(), lru_, it);  // most recently used first
      return lru_.front().second;
    }
  }
  return nullptr;
}

Expected<MemoryContents::Joined, ReadError> MemoryContents::join_or_plan(
    const FileContent& c, const std::string& why,
    FunctionRef<std::shared_ptr<BufferFetch>()> plan) {
  std::lock_guard lock(mu_);
  if (auto it = pending_.find(c.id); it != pending_.end()) {
    stats_.waits_joined.add();
    return Joined{it->second, it->second->pieces, false};
  }
  if (c.size > limit_) {
    return unexpected(ReadError{FsErrorKind::kIo,
                                c.path + ": not served: " + why + ", and at " +
                                    std::to_string(c.size >> 20) +
                                    " MiB it is larger than the memory it could be verified in"});
  }
  // Room for it: forget verified contents, least recently used first (open files keep theirs
  // alive).
  while (bytes_ + c.size > limit_ && !lru_.empty()) {
    bytes_ -= lru_.back().second->size;
    lru_.pop_back();
  }
  if (bytes_ + c.size > limit_) {
    return unexpected(
        ReadError{FsErrorKind::kIo,
                  c.path + ": not served: " + why + ", and the memory to verify it in is in use"});
  }
  spdlog::info("{}: {}; verifying it in memory", c.path, why);
  stats_.in_memory.add();
  auto m = plan();
  if (m->pieces.empty()) {  // an empty file: nothing to fetch, nothing to hold
    auto empty = std::make_shared<MemoryContent>();
    std::lock_guard result_lock(m->mu);
    m->result = std::move(empty);
    return Joined{std::move(m), {}, false};
  }
  bytes_ += c.size;
  pending_[c.id] = m;
  return Joined{m, m->pieces, true};
}

void MemoryContents::finish(const BufferFetch& m, std::shared_ptr<const MemoryContent> result) {
  std::lock_guard lock(mu_);
  const auto it = pending_.find(m.content.id);
  if (it == pending_.end() || it->second.get() != &m) return;  // dropped at shutdown
  // Each piece holds the fetch and the fetch its pieces: break the cycle now that no one can
  // join (waiters hold their own copies of the pieces). The worker that runs this holds its
  // own reference to the fetch.
  it->second->pieces.clear();
  pending_.erase(it);
  if (result) {
    lru_.emplace_front(m.content.id, std::move(result));
  } else {
    bytes_ -= m.content.size;
  }
}

void MemoryContents::drop_pending() {
  std::lock_guard lock(mu_);
  for (auto& [id, m] : pending_) {
    m->pieces.clear();
    bytes_ -= m->content.size;
  }
  pending_.clear();
}

}  // namespace whfs::reader
