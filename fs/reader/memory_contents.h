#pragma once
// Contents the cache could not keep, verified in memory instead: the ones verified, most
// recently used first, within a byte budget (open files keep theirs alive past it), and the
// fetches into memory under way, so that concurrent readers of a content join one.

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "fs/common/expected.h"
#include "fs/common/function_ref.h"
#include "fs/reader/downloads.h"
#include "fs/reader/read_types.h"

namespace whfs::reader {

class MemoryContents {
 public:
  using BufferFetch = Downloads::BufferFetch;
  MemoryContents(std::uint64_t limit, ReadPathStats& stats) : limit_(limit), stats_(stats) {}

  // A verified content in memory (and now the most recently used), or null.
  std::shared_ptr<const MemoryContent> hit(const cache::ContentId& id);

  // The fetch of `c` under way, joined; or a new one made by `plan` (which must not lock
  // anything) once its bytes are reserved: `mine` then says the caller starts its pieces.
  // Fails when the content is larger than the budget, or the budget is in use; `why` says
  // why the cache could not keep it.
  struct Joined {
    std::shared_ptr<BufferFetch> fetch;
    std::vector<std::shared_ptr<Downloads::Flight>> pieces;  // the caller's copy, to wait on
    bool mine = false;
  };
  Expected<Joined, ReadError> join_or_plan(const FileContent& c, const std::string& why,
                                           FunctionRef<std::shared_ptr<BufferFetch>()> plan);
  // A fetch is over: keeps `result` (verified) or gives its bytes back (null: it failed).
  void finish(const BufferFetch& m, std::shared_ptr<const MemoryContent> result);
  // Shutting down: fetches whose pieces were cancelled never finish; break their cycles.
  void drop_pending();

 private:
  const std::uint64_t limit_;
  ReadPathStats& stats_;  // in_memory, waits_joined
  std::mutex mu_;         // guards everything below; a leaf (plan() takes no lock)
  std::list<std::pair<cache::ContentId, std::shared_ptr<const MemoryContent>>> lru_;
  std::unordered_map<cache::ContentId, std::shared_ptr<BufferFetch>> pending_;
  std::uint64_t bytes_ = 0;  // in lru_ and in pending_
};

}  // namespace whfs::reader
