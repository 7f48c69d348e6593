#pragma once
// The read path's vocabulary, shared by its parts (serving_gate.h, downloads.h, verifier.h,
// memory_contents.h, claims.h) and the Fetcher that composes them (fetcher.h); its figures are
// in read_stats.h.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "cache/block_store.h"
#include "fs/common/cancel.h"
#include "fs/common/fs_error.h"
#include "fs/reader/read_stats.h"

namespace whfs::reader {

struct FileContent {
  std::string commit;
  std::string path;  // any path with this content at that commit
  std::uint64_t size = 0;
  cache::ContentId id;
};

// A read fails with the filesystem's own error: its kind is decided here, where the meaning
// is known (a Hub 404 for a listed file's bytes is EIO, a hash mismatch kCorrupt), and reaches
// the FUSE adapter unchanged.
using ReadError = FsErr;

inline ReadError cancelled_error(std::string message) {
  return ReadError{FsErrorKind::kInterrupted, std::move(message)};
}

enum class Serving {
  kVerified,   // only bytes of a file whose whole hash matched (the default)
  kStreaming,  // bytes as they arrive; the whole file is checked once complete
};

struct FetcherConfig {
  unsigned workers = 16;
  // Bytes per ranged GET (request_size.h): about `request_target` of the measured rate, from
  // `min_request` to `max_request`; `first_request` until a GET was measured.
  std::uint64_t max_request = 16ull << 20;
  std::uint64_t min_request = 256ull << 10;
  std::uint64_t first_request = 4ull << 20;
  std::chrono::milliseconds request_target{1000};
  Serving serving = Serving::kVerified;
  // How long one call of the Hub for bytes may move no byte, however many retries (then it
  // fails with the Hub's cause); a small GET a caller waits for itself (a wheel's METADATA, a
  // proof of access) gets this in all. The downloads of files go on while bytes arrive, and a
  // read fails when its downloads move no byte for its patience (WaitPolicy).
  std::chrono::seconds request_timeout{30};
  // After a content failed verification twice, reads of it fail at once for this long.
  std::chrono::seconds corrupt_quarantine{60};
  // After a read of a content failed (no progress in time, the Hub failing), reads of it fail
  // at once for this long: the kernel retries a failed read of the same range at once, and a
  // retry must not cost another full wait.
  std::chrono::seconds failure_memo{10};
  // Contents the cache cannot keep are verified in memory, up to this many bytes in all.
  std::uint64_t memory_limit = 512ull << 20;
  // Another process sharing the cache downloading a file this process needs is waited for
  // (the Hub serves it once) unless its download makes no progress for this long; then this
  // process downloads what is left itself.
  std::chrono::seconds claim_takeover{10};
};

// How long a read may wait, and what stops it early.
struct WaitPolicy {
  // The longest a read waits without any progress of the downloads it needs (a large file
  // on a slow link is not a failure while its bytes keep arriving). Set by the caller from the
  // mount's read_timeout; zero fails a read that would have to wait at all.
  std::chrono::milliseconds patience{};
  CancelFlag* cancel = nullptr;  // the caller went away (FUSE interrupt)
};

// A whole content downloaded and verified in memory (the cache could not keep it).
struct MemoryContent {
  std::unique_ptr<std::byte[]> data;
  std::uint64_t size = 0;
};

// Whose word the cache's records are taken on, decided once by the daemon (its
// cache_trust(): a cache only this user can have written, or cache_trusted=) and held by the
// serving gate alone (serving_gate.h).
struct CacheTrust {
  bool believed = false;
  std::string why;  // in words, for the log and `wheelhouse status`
};

// What a read may do with the cache now: the serving gate's answer, and what
// Fetcher::ensure() hands back once it made a read servable.
struct Verdict {
  enum class Kind {
    kFromCache,   // read the store in `mode`; a block it lacks still means fetch first
    kFetchFirst,  // the Fetcher must make the content servable (download, verify) first
  };
  Kind kind = Kind::kFetchFirst;
  cache::BlockStore::ReadMode mode = cache::BlockStore::ReadMode::kVerified;
  bool from_cache() const { return kind == Kind::kFromCache; }
};

// Where a servable read reads from: a content verified in memory, or the cache as `verdict`
// says.
struct Source {
  std::shared_ptr<const MemoryContent> memory;  // null: from the cache
  Verdict verdict;
};

}  // namespace whfs::reader
