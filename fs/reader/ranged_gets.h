#pragma once
// One ranged GET of a content: the read path's only call of the HubClient for bytes. Counted
// as the bytes arrive (ReadPathStats: the transfers that `wheelhouse status` and the metrics
// show, the latency of each GET), and its failure given the read path's meaning. Into a
// caller's buffer, or into the cache as whole blocks arrive.
//
// Its retry policy (the transfer's; the Hub client retries each request itself, transport.h):
// a call of the Hub that moved bytes before it broke (a stall, a reset) is progress, and the
// rest is asked for at once, as long as bytes keep arriving; one that moved none for
// `patience` fails with the Hub's cause.

#include <cstdint>
#include <span>

#include "cache/block_store.h"
#include "fs/common/cancel.h"
#include "fs/common/clock.h"
#include "fs/common/expected.h"
#include "fs/hub/hub_client.h"
#include "fs/reader/block_math.h"
#include "fs/reader/read_types.h"
#include "fs/reader/request_size.h"

namespace whfs::reader {

class RangedGets {
 public:
  // A download is stored in puts of at least this many bytes (whole blocks) as they arrive.
  static constexpr std::uint64_t kStreamPutBytes = 512 << 10;

  // `patience`: how long one call of the Hub may move no byte (read_timeout).
  RangedGets(cache::BlockStore& store, hub::HubClient& hub, RequestSizer::Config sizes,
             std::chrono::seconds patience, ReadPathStats& stats)
      : store_(store), hub_(hub), patience_(patience), stats_(stats), sizer_(sizes) {}

  // The bytes [offset, offset + buf.size()) into `buf`. `abandon` (may be null) ends a GET
  // nobody waits for any more.
  Expected<void, ReadError> get(const FileContent& c, std::uint64_t offset,
                                std::span<std::byte> buf, Deadline deadline,
                                const CancelFlag* abandon);
  // The blocks of `r`, stored in the cache as they arrive, kStreamPutBytes at a time from a
  // small buffer of this thread's (about 0.5 MiB, so it stays in the CPU's cache: the block
  // checksums, the copies into LMDB's pages and the running hash read it there); the cache's
  // answer to the last put (its refusal: the caller takes the memory path).
  Expected<cache::Result<cache::ContentState>, ReadError> get_and_put(const FileContent& c,
                                                                      BlockRange r,
                                                                      Deadline deadline,
                                                                      const CancelFlag* abandon);

  // The sizes of the next GETs, from the rate of the last ones.
  const RequestSizer& sizer() const { return sizer_; }

 private:
  // One counted GET of [offset, offset + length), its bytes handed to `consume`.
  Expected<void, ReadError> counted(const FileContent& c, std::uint64_t offset,
                                    std::uint64_t length, Deadline deadline,
                                    const CancelFlag* abandon, hub::HubClient::ChunkFn consume);

  cache::BlockStore& store_;
  hub::HubClient& hub_;
  const std::chrono::seconds patience_;
  ReadPathStats& stats_;  // requests, bytes, download_errors and latency, transfers
  RequestSizer sizer_;    // thread-safe itself
};

}  // namespace whfs::reader
