#pragma once
// Whole-content verification, for the cache's copy and for a copy in memory alike: a content
// is hashed against its id (LFS sha256, or git blob sha1); a mismatch fetches it once more and
// hashes it again; a second mismatch quarantines it (reads fail at once for a while). Every
// mismatch makes the content suspect (never streamed again; the gate tells its corrupt
// listener, since streaming readers may have been given some of those bytes). Hashing a whole
// file is the costliest step of a cold read, so verifying the cache's copy is single-flight:
// concurrent requests for one content wait for the one running.

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>

#include "cache/block_store.h"
#include "fs/common/expected.h"
#include "fs/common/function_ref.h"
#include "fs/common/hash.h"
#include "fs/reader/read_types.h"
#include "fs/reader/serving_gate.h"

namespace whfs::reader {

// The hash a content is checked against: its LFS sha256, or its git blob sha1.
Hasher hasher_for(const FileContent& c);

class Verifier {
 public:
  // Fetches the whole content once more (into wherever the copy being verified lives).
  using Refetch = FunctionRef<Expected<void, ReadError>()>;
  // Verification's retry policy: a mismatch is fetched again this many times, then the
  // content is quarantined (a Hub that serves wrong bytes twice is not asked a third time).
  static constexpr int kRefetches = 1;

  Verifier(cache::BlockStore& store, ServingGate& gate, const FetcherConfig& config,
           ReadPathStats& stats);

  // The cache's copy, complete (`recorded`: the cache records it as matching its hash): taken
  // as it is when the gate says so (ServingGate::must_verify), else hashed by this process.
  // On a match the gate trusts the content; if blocks went missing while it was hashed, it
  // succeeds without trust and the caller looks again.
  Expected<void, ReadError> verify_cached(const FileContent& c, bool recorded, Refetch refetch);
  // A copy in memory, `data` of c.size bytes; `refetch` fills it again.
  Expected<void, ReadError> verify_buffer(const FileContent& c, std::span<const std::byte> data,
                                          Refetch refetch);

 private:
  enum class Outcome { kMatch, kMismatch };
  // The one copy of "hash; on a mismatch fetch once more and hash again; then quarantine".
  Expected<void, ReadError> check_twice(const FileContent& c,
                                        FunctionRef<Expected<Outcome, ReadError>()> check,
                                        Refetch refetch);
  Expected<void, ReadError> verify_cached_once(const FileContent& c, Refetch refetch);

  struct Verification {
    std::mutex mu;  // guards done and result
    std::condition_variable cv;
    bool done = false;
    std::optional<ReadError> result;
  };

  cache::BlockStore& store_;
  ServingGate& gate_;
  const std::chrono::seconds quarantine_for_;
  ReadPathStats& stats_;

  // Lock order: mu_ and a Verification's mu are leaves, never held together or across I/O.
  std::mutex mu_;  // guards running_
  std::unordered_map<cache::ContentId, std::shared_ptr<Verification>> running_;
};

}  // namespace whfs::reader
