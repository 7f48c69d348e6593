#pragma once
// Who may serve what, decided here and nowhere else, without I/O. The daemon builds the one
// gate of a mount and hands it to everything that serves bytes or takes the cache's word: the
// reader, the fetcher and its parts, the listing source (fs/vfs/listing_source.h) and, through
// believes_records(), the wheel metadata. It holds:
//  - whose records are believed (CacheTrust, decided once by the daemon): a believed cache's
//    "verified" records, stored listings and METADATA records are taken at their word; else
//    each content is hashed by this process before it is served, listings come from the Hub,
//    and peek() takes only bytes this process verified;
//  - the contents this process may read at all (admitted: cache/audience.h; the Fetcher finds
//    out, by a grant or a proof, and tells it);
//  - the serving mode, the contents this process verified (trusted), those that failed their
//    hash (suspect: never streamed again), the quarantine after a second mismatch and the
//    memory of recent failures.
// A reader asks verdict(); Fetcher::ensure() hands the verdict back once the read is servable.

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "cache/audience.h"
#include "cache/block_store.h"
#include "fs/common/clock.h"
#include "fs/reader/read_types.h"

namespace whfs::reader {

class ServingGate {
 public:
  // `scope`: whose cached bytes this process may read and whose it records (must outlive the
  // gate); `trust`: whose records it believes; `config`: the serving mode, the quarantine and
  // the memory of failures; `stats`: where it counts the reads it fails at once.
  ServingGate(const cache::AccessScope& scope, CacheTrust trust, const FetcherConfig& config,
              ReadPathStats& stats);

  const cache::AccessScope& scope() const { return scope_; }
  const CacheTrust& cache_trust() const { return trust_; }
  // The cache's records (a "verified" mark, a listing, a wheel's METADATA) are taken as they are.
  bool believes_records() const { return trust_.believed; }
  bool streaming() const { return serving_ == Serving::kStreaming; }

  // A reader's question: may it read the cache now, and how.
  Verdict verdict(const cache::ContentId& id) const;
  // Whether this process may read the cache's bytes of the content: one of its audiences holds
  // a grant, it proved it holds the content, or its own Hub served it bytes of it.
  bool admitted(const cache::ContentId& id) const;
  // Returns true when the content was not admitted before.
  bool admit(const cache::ContentId& id);
  // Streaming, and this content has not failed its hash before.
  bool streams(const cache::ContentId& id) const;
  // Whether a content the cache holds whole (`recorded`: as matching its hash) must be hashed
  // by this process before it is served.
  bool must_verify(const cache::ContentId& id, bool recorded) const;
  // Verified by this process, or the cache's records are believed.
  bool serves_verified(const cache::ContentId& id) const;
  // Whether peek() may take a content's bytes from the cache before it is verified: what a
  // wheel's METADATA is made of must not come from a co-tenant's blocks.
  bool may_peek_cache(const cache::ContentId& id) const { return serves_verified(id); }

  // The error a read of this content fails with at once (quarantined, or failed moments ago).
  std::optional<ReadError> blocked(const cache::ContentId& id, const std::string& path);
  void remember_failure(const cache::ContentId& id, const ReadError& e);
  void quarantine(const cache::ContentId& id);
  // Its download failed its hash: served only verified from now on, even when streaming; and
  // whoever may have been served its bytes is told (the listener, outside any lock).
  void suspect(const cache::ContentId& id);
  // Called each time a content's downloaded bytes do not match its hash: streaming readers may
  // have been given some of them, so the kernel must drop its pages.
  void set_corrupt_listener(std::function<void(const cache::ContentId&)> listener);
  // This process saw it match its hash (and it is no longer suspect).
  void trust(const cache::ContentId& id);
  // ... by hashing its stored blocks just now: for kFreshHash from now its reads skip the
  // block checksums (ReadMode::kHashedHere). Later reads (the kernel's page cache answers the
  // ones right after) check them again: a block damaged at rest since is caught.
  void hashed_here(const cache::ContentId& id);
  static constexpr std::chrono::seconds kFreshHash{30};
  // Its blocks are changing: what this process verified before no longer holds.
  void distrust(const cache::ContentId& id);

 private:
  bool trusted_locked(const cache::ContentId& id) const { return trusted_.count(id) != 0; }

  const cache::AccessScope& scope_;
  const CacheTrust trust_;
  const Serving serving_;
  const std::chrono::seconds corrupt_quarantine_;
  const std::chrono::seconds failure_memo_;
  ReadPathStats& stats_;

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
  std::mutex listener_mu_;  // guards listener_; a leaf
  std::function<void(const cache::ContentId&)> listener_;
};

}  // namespace whfs::reader
