#include "fs/reader/verifier.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace whfs::reader {

Hasher hasher_for(const FileContent& c) {
  return c.id.kind() == cache::ContentId::Kind::kSha256 ? Hasher(HashAlgo::kSha256)
                                                        : git_blob_hasher(c.size);
}

Verifier::Verifier(cache::BlockStore& store, ServingGate& gate, const FetcherConfig& config)
    : store_(store),
      gate_(gate),
      trust_cache_(config.trust_cache),
      quarantine_for_(config.corrupt_quarantine) {}

void Verifier::set_corrupt_listener(std::function<void(const cache::ContentId&)> listener) {
  std::lock_guard lock(mu_);
  listener_ = std::move(listener);
}

void Verifier::add_to(FetcherStats& s) const {
  s.corrupt += corrupt_.load();
  s.rechecks += rechecks_.load();
}

Expected<void, ReadError> Verifier::check_twice(const FileContent& c,
                                                FunctionRef<Expected<Outcome, ReadError>()> check,
                                                Refetch refetch) {
  for (int attempt = 0;; ++attempt) {
    auto outcome = check();
    if (!outcome) return unexpected(outcome.error());
    if (*outcome == Outcome::kMatch) return {};
    corrupt_++;
    report_corrupt(c);
    if (attempt >= 1) break;
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

Expected<void, ReadError> Verifier::verify_cached(const FileContent& c, Refetch refetch) {
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
        // Unless the cache is trusted, hash it here even when another process recorded it as
        // verified: one process's mistake or malice must not become every process's bytes.
        // (A trusted cache's record is taken as it is: then nothing was hashed here.)
        bool recorded = false;
        if (trust_cache_) {
          auto before = store_.content_state(c.id);
          recorded = before && *before && (*before)->verified;
        }
        auto v = trust_cache_ ? store_.verify_content(c.id, c.size)
                              : store_.recheck_content(c.id, c.size);
        if (v) {
          if (v->verified) {
            gate_.trust(c.id);
            if (!recorded) gate_.hashed_here(c.id);
            rechecks_++;
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

void Verifier::report_corrupt(const FileContent& c) {
  std::function<void(const cache::ContentId&)> listener;
  {
    std::lock_guard lock(mu_);
    listener = listener_;
  }
  // Streaming stops for this content: its next download is served only once it matched.
  gate_.suspect(c.id);
  if (listener) listener(c.id);
}

}  // namespace whfs::reader
