#include "fs/reader/serving_gate.h"

#include <mutex>
#include <utility>

namespace whfs::reader {

ServingGate::ServingGate(const cache::AccessScope& scope, CacheTrust trust,
                         const FetcherConfig& config, ReadPathStats& stats)
    : scope_(scope),
      trust_(std::move(trust)),
      serving_(config.serving),
      corrupt_quarantine_(config.corrupt_quarantine),
      failure_memo_(config.failure_memo),
      stats_(stats) {}

Verdict ServingGate::verdict(const cache::ContentId& id) const {
  std::shared_lock lock(mu_);
  if (admitted_.count(id) == 0) {
    return {Verdict::Kind::kFetchFirst, cache::BlockStore::ReadMode::kVerified};
  }
  if (serving_ == Serving::kStreaming && suspect_.count(id) == 0) {
    return {Verdict::Kind::kFromCache, cache::BlockStore::ReadMode::kPartial};
  }
  if (trust_.believed || trusted_locked(id)) {
    const auto h = hashed_at_.find(id);
    const bool fresh = h != hashed_at_.end() && Clock::now() < h->second + kFreshHash;
    return {Verdict::Kind::kFromCache, fresh ? cache::BlockStore::ReadMode::kHashedHere
                                             : cache::BlockStore::ReadMode::kVerified};
  }
  return {Verdict::Kind::kFetchFirst, cache::BlockStore::ReadMode::kVerified};
}

bool ServingGate::admitted(const cache::ContentId& id) const {
  std::shared_lock lock(mu_);
  return admitted_.count(id) != 0;
}

bool ServingGate::admit(const cache::ContentId& id) {
  std::unique_lock lock(mu_);
  return admitted_.insert(id).second;
}

bool ServingGate::streams(const cache::ContentId& id) const {
  if (serving_ != Serving::kStreaming) return false;
  std::shared_lock lock(mu_);
  return suspect_.count(id) == 0;
}

bool ServingGate::serves_verified(const cache::ContentId& id) const {
  if (trust_.believed) return true;
  std::shared_lock lock(mu_);
  return trusted_locked(id);
}

bool ServingGate::must_verify(const cache::ContentId& id, bool recorded) const {
  return !recorded || (serving_ == Serving::kVerified && !serves_verified(id));
}

std::optional<ReadError> ServingGate::blocked(const cache::ContentId& id, const std::string& path) {
  std::unique_lock lock(mu_);
  const auto now = Clock::now();
  if (const auto q = quarantine_.find(id); q != quarantine_.end()) {
    if (now < q->second) {
      stats_.failed_fast.add();
      return ReadError{FsErrorKind::kCorrupt, path + ": its download did not match its hash"};
    }
    quarantine_.erase(q);
  }
  if (const auto f = failed_.find(id); f != failed_.end()) {
    if (now < f->second.until) {
      stats_.failed_fast.add();
      ReadError e = f->second.error;
      e.message += " (failed moments ago; not tried again yet)";
      return e;
    }
    failed_.erase(f);
  }
  return std::nullopt;
}

void ServingGate::remember_failure(const cache::ContentId& id, const ReadError& e) {
  if (e.kind == FsErrorKind::kInterrupted || failure_memo_.count() <= 0) return;
  std::unique_lock lock(mu_);
  failed_[id] = Failure{Clock::now() + failure_memo_, e};
  if (failed_.size() > 10000) failed_.erase(failed_.begin());  // bound memory
}

void ServingGate::quarantine(const cache::ContentId& id) {
  std::unique_lock lock(mu_);
  quarantine_[id] = Clock::now() + corrupt_quarantine_;
}

void ServingGate::suspect(const cache::ContentId& id) {
  {
    std::unique_lock lock(mu_);
    suspect_.insert(id);
    hashed_at_.erase(id);
  }
  std::function<void(const cache::ContentId&)> listener;
  {
    std::lock_guard lock(listener_mu_);
    listener = listener_;
  }
  if (listener) listener(id);
}

void ServingGate::set_corrupt_listener(std::function<void(const cache::ContentId&)> listener) {
  std::lock_guard lock(listener_mu_);
  listener_ = std::move(listener);
}

void ServingGate::trust(const cache::ContentId& id) {
  std::unique_lock lock(mu_);
  trusted_.insert(id);
  suspect_.erase(id);
}

void ServingGate::hashed_here(const cache::ContentId& id) {
  std::unique_lock lock(mu_);
  const auto now = Clock::now();
  if (hashed_at_.size() >= 1024) {
    std::erase_if(hashed_at_, [&](const auto& kv) { return now >= kv.second + kFreshHash; });
    if (hashed_at_.size() >= 1024) hashed_at_.clear();
  }
  hashed_at_[id] = now;
}

void ServingGate::distrust(const cache::ContentId& id) {
  std::unique_lock lock(mu_);
  trusted_.erase(id);
  hashed_at_.erase(id);
}

}  // namespace whfs::reader
