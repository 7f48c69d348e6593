#pragma once
// The fetcher is the only code that joins the cache and the network: it makes a read
// servable and says where to read it from. It composes the read path's parts, each with its
// own lock, and asks the one serving gate (serving_gate.h: who may serve what; no I/O) that
// the daemon built:
//  - Downloads (downloads.h): flights, queues and workers, over RangedGets (ranged_gets.h):
//    one counted ranged GET, the only call of the HubClient for bytes.
//  - Verifier (verifier.h): whole-content hashing, a retry, then quarantine.
//  - MemoryContents (memory_contents.h): contents the cache cannot keep, verified in memory.
//  - Claims (claims.h): one download of a content among the processes sharing a cache.
//
// Who may read what (cache/audience.h): a shared cache holds contents that daemons with other
// credentials fetched. This process uses the cache's bytes of a content only once it is
// admitted (ServingGate::admit): one of its audiences holds a grant for the content; or its own
// Hub served it bytes of the file (a download, which then records a grant); or, for a content
// someone else fetched, it proved it may read it: one ranged GET of a few KiB at a random
// stored offset, with its own credential, equal to the stored bytes (the Hub refuses a
// credential without access: 401/403/404, the read fails with that; and an endpoint that does
// not hold the content cannot answer with its bytes).
//
// Verified serving (the default): a read is served only from a content whose whole-file hash
// (LFS sha256, or git blob sha1) this process has seen match, so the first read of a cold
// file waits for the whole file, fetched in parallel ranged GETs. Streaming (an opt-in):
// blocks are served as they arrive and the file is verified once complete. A content the cache
// cannot keep (full of open files, read-only, failing) is downloaded whole into memory and
// verified there, or the read fails: the direct path never serves unverified bytes either.

#include <optional>
#include <string>

#include "cache/block_store.h"
#include "fs/common/expected.h"
#include "fs/hub/hub_client.h"
#include "fs/reader/block_math.h"
#include "fs/reader/claims.h"
#include "fs/reader/downloads.h"
#include "fs/reader/memory_contents.h"
#include "fs/reader/read_types.h"
#include "fs/reader/serving_gate.h"
#include "fs/reader/verifier.h"

namespace whfs::reader {

class Fetcher {
 public:
  // The most bytes a proof of access asks of the Hub (admit()).
  static constexpr std::size_t kProofBytes = 4096;
  // `gate` (who may serve what, and whose bytes this process may read: its scope) and `stats`
  // (where the parts record) outlive the fetcher.
  Fetcher(cache::BlockStore& store, hub::HubClient& hub, ServingGate& gate, ReadPathStats& stats,
          FetcherConfig config);
  ~Fetcher();
  Fetcher(const Fetcher&) = delete;
  Fetcher& operator=(const Fetcher&) = delete;

  // Makes the bytes of `need` servable and says where they are: a content verified in memory,
  // or the cache with the gate's verdict once it is (with verified serving: the whole content
  // downloaded, front to back, and verified by this process; streaming: the blocks of `need`
  // present). One pass, no retry of its own: a verdict that is still "fetch
  // first" (the cache lost the blocks meanwhile) is the reader's to ask again. `then` is
  // queued as a prefetch after the downloads this read waits for (streaming readahead).
  Expected<Source, ReadError> ensure(const FileContent& content, BlockRange need,
                                     const WaitPolicy& wait,
                                     std::optional<BlockRange> then = std::nullopt);

  // Bytes of a content for the daemon's own use (a wheel's metadata), whether or not the whole
  // content has matched its hash yet: from the cache, else downloaded into it (only the blocks
  // they span), else straight from one ranged GET. Never handed to a reader as such: whoever
  // uses them checks what it derives once the content is verified.
  Expected<std::string, ReadError> peek(const FileContent& content, std::uint64_t offset,
                                        std::size_t size, const WaitPolicy& wait);

  // Queues a background download of a block range; blocks already in flight are skipped.
  void prefetch(const FileContent& content, BlockRange range) {
    downloads_.prefetch(content, range);
  }

  // Ends the workers; flights still queued fail as interrupted.
  void shutdown();

 private:
  using Stored = Downloads::Stored;
  Expected<Source, ReadError> ensure_verified(const FileContent& c, const WaitPolicy& wait);
  Expected<Source, ReadError> ensure_streaming(const FileContent& c, BlockRange need,
                                               const WaitPolicy& wait,
                                               std::optional<BlockRange> then);
  // The whole content into memory, verified there.
  Expected<Source, ReadError> fetch_to_memory(const FileContent& c, const WaitPolicy& wait,
                                              const std::string& why);
  void finish_memory_fetch(Downloads::BufferFetch& m);
  // The cache's complete copy, made servable (verifier.h; `recorded`: the cache's record).
  Expected<void, ReadError> verify_cached(const FileContent& c, bool recorded);
  // The blocks of `r` the cache lacks: all of them when nothing of the content is stored
  // (`stored`: the content has a record), without asking; nullopt when the cache cannot say.
  std::optional<std::vector<std::uint32_t>> missing_of(const FileContent& c, BlockRange r,
                                                       bool stored);
  // The bytes [offset, offset + size) from the cache's present blocks; nullopt when one is
  // missing.
  std::optional<std::string> copy_present(const FileContent& c, std::uint64_t offset,
                                          std::size_t size);
  // peek()'s bytes from the cache (fetched into it first when missing); nullopt when the cache
  // cannot give them.
  Expected<std::optional<std::string>, ReadError> peek_cache(const FileContent& c,
                                                             std::uint64_t offset, std::size_t size,
                                                             const WaitPolicy& wait);
  // Fails at once when shutting down, or when the gate blocks the content.
  std::optional<ReadError> refused(const FileContent& c);

  // Admits `c` when one of this process's audiences holds a grant for it, or proves access to
  // the blocks someone else stored (prove()). False when nothing of it is cached: the caller
  // fetches it from the Hub (then fetched_here()).
  Expected<bool, ReadError> admit(const FileContent& c, const WaitPolicy& wait);
  // One ranged GET of up to kProofBytes at a random offset of a stored block, compared with
  // the stored bytes; false when no block is stored.
  Expected<bool, ReadError> prove(const FileContent& c, const WaitPolicy& wait);
  // This process's Hub served bytes of `c` (Downloads tells, as they are stored): admitted,
  // and a grant recorded for its audience.
  void fetched_here(const FileContent& c);

  cache::BlockStore& store_;
  ServingGate& gate_;
  ReadPathStats& stats_;
  const FetcherConfig config_;
  // In construction order; none of their locks is held while another part is called.
  MemoryContents memory_;
  Verifier verifier_;
  Claims claims_;
  Downloads downloads_;  // last: its workers (which call the parts above) end first
};

}  // namespace whfs::reader
