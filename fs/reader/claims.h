#pragma once
// Cross-process download claims: of the processes sharing a cache, one downloads a content and
// the others wait for its blocks (the Hub serves it once), unless its download makes no
// progress for `claim_takeover`; then the waiter downloads what is left itself. The claim is
// shared by this process's readers of the content while any of them holds it.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "cache/block_store.h"
#include "fs/common/expected.h"
#include "fs/reader/read_types.h"

namespace whfs::reader {

class Claims {
 public:
  Claims(cache::BlockStore& store, std::chrono::seconds takeover)
      : store_(store), takeover_(takeover) {}

  // This process's claim on downloading a content, or the news that another process finished
  // it meanwhile; a null claim when there is nothing to coordinate with (the cache cannot say)
  // or this process takes over a stalled download.
  struct Outcome {
    std::shared_ptr<cache::BlockStore::DownloadClaim> claim;
    bool other_finished = false;
  };
  Expected<Outcome, ReadError> claim_or_wait(const FileContent& c, const WaitPolicy& wait);

  void add_to(FetcherStats& s) const {
    s.shared_waits += shared_waits_.load();
    s.takeovers += takeovers_.load();
  }

 private:
  std::optional<Outcome> take(const FileContent& c);

  cache::BlockStore& store_;
  const std::chrono::seconds takeover_;
  std::mutex mu_;  // guards held_; a leaf
  std::unordered_map<cache::ContentId, std::weak_ptr<cache::BlockStore::DownloadClaim>> held_;
  // A waiter sleeps here between looks at the other process's progress (a cancel wakes it).
  std::mutex sleep_mu_;
  std::condition_variable sleep_cv_;
  std::atomic<std::uint64_t> shared_waits_{0};
  std::atomic<std::uint64_t> takeovers_{0};
};

}  // namespace whfs::reader
