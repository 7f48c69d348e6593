#include "fs/reader/verifier.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace whfs::reader {

Hasher hasher_for(const FileContent& c) {
  return c.id.kind() == cache::ContentId::Kind::kSha256 ? Hasher(HashAlgo::kSha256)
                                                        : git_blob_hasher(c.size);
}

Verifier::Verifier(cache::BlockStore& store, ServingGate& gate, const FetcherConfig& config,
                   ReadPathStats& stats)
    : store_(store), gate_(gate), quarantine_for_(config.corrupt_quarantine), stats_(stats) {}

Expected<void, ReadError> Verifier::check_twice(const FileContent& c,
                                                FunctionRef<Expected<Outcome, ReadError>()> check,
                                                Refetch refetch) {
  for (int refetched = 0;; ++refetched) {
    auto outcome = check();
    if (!outcome) return unexpected(outcome.error());
    if (*outcome == Outcome::kMatch) return {};
    stats_.corrupt.add();
    gate_.suspect(c.id);  // served only verified from now on; whoever streamed it is told
    if (refetched == kRefetches) break;
    spdlog::warn("{}: downloaded bytes do not match {}; downloading the file again", c.path,
                 c.id.to_string());
    if (auto r = refetch(); !r) return unexpected(r.error());
  }
  spdlog::error(
      "{}: corrupt download: its bytes do not match {} twice; reads fail with EIO for {} s", c.path,
      c.id.to_string(), quarantine_for_.count());
  gate_.quarantine(c.id);
  return unexpected(ReadError{
      FsErrorKind::kCorrupt, c.path + ": downloaded bytes do not match " + c.id.to_string(), true});
}

Expected<void, ReadError> Verifier::verify_buffer(const FileContent& c,
                                                  std::span<const std::byte> data,
                                                  Refetch refetch) {
  return check_twice(
      c,
      [&]() -> Expected<Outcome, ReadError> {
        Hasher h = hasher_for(c);
        h.update(data.first(c.size));
        const auto digest = h.finish();
        return std::equal(digest.begin(), digest.end(), c.id.digest().begin(), c.id.digest().end())
                   ? Outcome::kMatch
                   : Outcome::kMismatch;
      },
      refetch);
}

Expected<void, ReadError> Verifier::verify_cached(const FileContent& c, bool recorded,
                                                  Refetch refetch) {
  if (!gate_.must_verify(c.id, recorded)) return {};  // (a believed record, or streaming)
  std::shared_ptr<Verification> v;
  bool mine = false;
  {
    std::lock_guard lock(mu_);
    auto& slot = running_[c.id];
    if (!slot) {
      slot = std::make_shared<Verification>();
      mine = true;
    }
    v = slot;
  }
  if (!mine) {
    std::unique_lock lock(v->mu);
    v->cv.wait(lock, [&] { return v->done; });
    if (v->result) return unexpected(*v->result);
    return {};
  }
  auto r = verify_cached_once(c, refetch);
  {
    std::lock_guard lock(mu_);
    running_.erase(c.id);
  }
  std::lock_guard lock(v->mu);
  v->done = true;
  if (!r) v->result = r.error();
  v->cv.notify_all();
  return r;
}

Expected<void, ReadError> Verifier::verify_cached_once(const FileContent& c, Refetch refetch) {
  return check_twice(
      c,
      [&]() -> Expected<Outcome, ReadError> {
        // Hashed here even when another process recorded it as verified: one process's mistake
        // or malice must not become every process's bytes.
        auto v = store_.verify_content(c.id, c.size);
        if (v) {
          if (v->verified) {
            gate_.trust(c.id);
            gate_.hashed_here(c.id);
            stats_.rechecks.add();
          }
          return Outcome::kMatch;  // (or blocks went missing while hashing: the caller looks
                                   // again)
        }
        if (v.error().kind != cache::CacheError::Kind::kCorrupt) {
          return unexpected(ReadError{FsErrorKind::kIo, c.path + ": " + v.error().message});
        }
        return Outcome::kMismatch;  // the cache dropped every block
      },
      refetch);
}

}  // namespace whfs::reader
