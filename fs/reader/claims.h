#pragma once
// Cross-process download claims: of the processes sharing a cache, one downloads a content and
// the others wait for its blocks (the Hub serves it once), unless its download makes no
// progress for `claim_takeover`; then the waiter downloads what is left itself. The claim is
// shared by this process's readers of the content while any of them holds it. It reads and
// writes no block: it asks the cache two things, through the calls the fetcher gives it.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "cache/block_store.h"
#include "fs/common/expected.h"
#include "fs/reader/read_types.h"

namespace whfs::reader {

class Claims {
 public:
  // What Claims asks of the cache: a claim on a content's download (BlockStore::claim_download)
  // and the content's state (how far the other process got: BlockStore::content_state).
  struct Cache {
    std::function<cache::Result<std::unique_ptr<cache::BlockStore::DownloadClaim>>(
        const cache::ContentId&)>
        claim;
    std::function<cache::Result<std::optional<cache::ContentState>>(const cache::ContentId&)> state;
  };
  Claims(Cache cache, std::chrono::seconds takeover, ReadPathStats& stats)
      : cache_(std::move(cache)), takeover_(takeover), stats_(stats) {}

  // This process's claim on downloading a content, or the news that another process finished
  // it meanwhile (with the content's state then); a null claim when there is nothing to
  // coordinate with (the cache cannot say) or this process takes over a stalled download.
  struct Outcome {
    std::shared_ptr<cache::BlockStore::DownloadClaim> claim;
    std::optional<cache::ContentState> finished;  // set: another process completed it
  };
  Expected<Outcome, ReadError> claim_or_wait(const FileContent& c, const WaitPolicy& wait);

 private:
  std::optional<Outcome> take(const FileContent& c);

  const Cache cache_;
  const std::chrono::seconds takeover_;
  ReadPathStats& stats_;
  std::mutex mu_;  // guards held_; a leaf
  std::unordered_map<cache::ContentId, std::weak_ptr<cache::BlockStore::DownloadClaim>> held_;
  // A waiter sleeps here between looks at the other process's progress (a cancel wakes it).
  std::mutex sleep_mu_;
  std::condition_variable sleep_cv_;
};

}  // namespace whfs::reader
