#pragma once
// Who may serve a content's bytes, decided in one place and without I/O: the contents this
// process may read at all (admitted: cache/audience.h; the Fetcher finds out and tells it), the
// serving mode, the contents this process verified (trusted), those that failed their hash
// (suspect: never streamed again), the quarantine after a second mismatch and the memory of
// recent failures.
// The Reader asks it before reading the cache, the Fetcher before downloading, and the
// downloads after a content became complete.

#include <atomic>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "cache/block_store.h"
#include "fs/common/clock.h"
#include "fs/reader/read_types.h"

namespace whfs::reader {

// What a read may do with the cache now.
struct Verdict {
  enum class Kind {
    kFromCache,   // read the store in `mode`; a block it lacks still means fetch first
    kFetchFirst,  // the Fetcher must make the content servable (download, verify) first
  };
  Kind kind = Kind::kFetchFirst;
  cache::BlockStore::ReadMode mode = cache::BlockStore::ReadMode::kVerified;
};

class ServingGate {
 public:
  explicit ServingGate(const FetcherConfig& config);

  Verdict verdict(const cache::ContentId& id) const;
  // Whether this process may read the cache's bytes of the content: one of its audiences holds
  // a grant, it proved it holds the content, or its own Hub served it bytes of it.
  bool admitted(const cache::ContentId& id) const;
  // Returns true when the content was not admitted before.
  bool admit(const cache::ContentId& id);
  // Streaming, and this content has not failed its hash before.
  bool streams(const cache::ContentId& id) const;
  // Whether a content the cache holds whole (`verified`: recorded as matching its hash) must
  // be hashed by this process before it is served.
  bool must_verify(const cache::ContentId& id, bool verified) const;
  // Verified by this process, or the cache is trusted.
  bool serves_verified(const cache::ContentId& id) const;
  // Whether peek() may take a content's bytes from the cache before it is verified.
  bool may_peek_cache(const cache::ContentId& id) const;

  // The error a read of this content fails with at once (quarantined, or failed moments ago).
  std::optional<ReadError> blocked(const cache::ContentId& id, const std::string& path);
  void remember_failure(const cache::ContentId& id, const ReadError& e);
  void quarantine(const cache::ContentId& id);
  // Its download failed its hash: served only verified from now on, even when streaming.
  void suspect(const cache::ContentId& id);
  // This process saw it match its hash (and it is no longer suspect).
  void trust(const cache::ContentId& id);
  // ... by hashing its stored blocks just now: for kFreshHash from now its reads skip the
  // block checksums (ReadMode::kHashedHere). Later reads (the kernel's page cache answers the
  // ones right after) check them again: a block damaged at rest since is caught.
  void hashed_here(const cache::ContentId& id);
  static constexpr std::chrono::seconds kFreshHash{30};
  // Its blocks are changing: what this process verified before no longer holds.
  void distrust(const cache::ContentId& id);

  void add_to(FetcherStats& s) const { s.failed_fast += failed_fast_.load(); }

 private:
  bool trusted_locked(const cache::ContentId& id) const { return trusted_.count(id) != 0; }

  const Serving serving_;
  const bool trust_cache_;
  const bool peek_verified_only_;
  const std::chrono::seconds corrupt_quarantine_;
  const std::chrono::seconds failure_memo_;

  // Shared for the verdicts every read asks for; exclusive to change a set. A leaf lock.
  mutable std::shared_mutex mu_;
  std::unordered_set<cache::ContentId> admitted_;
  std::unordered_set<cache::ContentId> trusted_;
  std::unordered_map<cache::ContentId, Clock::time_point> hashed_at_;  // hashed_here(), bounded
  std::unordered_set<cache::ContentId> suspect_;
  std::unordered_map<cache::ContentId, Clock::time_point> quarantine_;
  struct Failure {
    Clock::time_point until;
    ReadError error;
  };
  std::unordered_map<cache::ContentId, Failure> failed_;
  std::atomic<std::uint64_t> failed_fast_{0};
};

}  // namespace whfs::reader
