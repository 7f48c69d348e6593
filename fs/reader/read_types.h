#pragma once
// The read path's vocabulary, shared by its parts (serving_gate.h, downloads.h, verifier.h,
// memory_contents.h, claims.h) and the Fetcher that composes them (fetcher.h).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "cache/block_store.h"
#include "fs/common/cancel.h"
#include "fs/common/fs_error.h"

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
  // Serve a content the cache records as verified without hashing it in this process first.
  bool trust_cache = false;
  // A cache others can write (cache_group=, a read-only tier): peek() takes from it only the
  // bytes of contents this process verified itself, else it reads them with one ranged GET
  // (what a wheel's METADATA is made of must not come from a co-tenant's blocks).
  bool peek_verified_only = false;
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
  // on a slow link is not a failure while its bytes keep arriving).
  std::chrono::milliseconds patience{30000};
  CancelFlag* cancel = nullptr;  // the caller went away (FUSE interrupt)
};

// A whole content downloaded and verified in memory (the cache could not keep it).
struct MemoryContent {
  std::unique_ptr<std::byte[]> data;
  std::uint64_t size = 0;
};

// Where a servable read reads from.
struct Source {
  std::shared_ptr<const MemoryContent> memory;  // null: from the cache
};

// Each part adds its own counters (add_to); the Fetcher sums them.
struct FetcherStats {
  std::uint64_t requests = 0;
  std::uint64_t bytes = 0;
  std::uint64_t demand_requests = 0;
  std::uint64_t prefetch_requests = 0;
  std::uint64_t waits_joined = 0;  // block requests that joined a download already in flight
  std::uint64_t errors = 0;
  std::uint64_t corrupt = 0;
  std::uint64_t uncached = 0;      // downloads the cache could not keep
  std::uint64_t in_memory = 0;     // contents verified and served from memory instead
  std::uint64_t rechecks = 0;      // contents verified by this process before serving them
  std::uint64_t failed_fast = 0;   // reads failed at once (quarantine or a recent failure)
  std::uint64_t interrupted = 0;   // reads whose caller went away while they waited
  std::uint64_t shared_waits = 0;  // files another process sharing the cache downloaded
  std::uint64_t takeovers = 0;     // ... or started to, then stalled: downloaded here
};

}  // namespace whfs::reader
