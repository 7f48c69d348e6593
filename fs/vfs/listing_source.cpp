#include "fs/vfs/listing_source.h"

#include <spdlog/spdlog.h>

#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace whfs {

CachedListingSource::CachedListingSource(hub::HubClient& hub, cache::MetadataStore& store,
                                         const reader::ServingGate& gate, std::string endpoint,
                                         std::string repo, std::chrono::seconds timeout)
    : hub_(hub),
      store_(store),
      gate_(gate),
      scope_(gate.scope()),
      endpoint_(std::move(endpoint)),
      repo_(std::move(repo)),
      timeout_(timeout) {}

void CachedListingSource::keep(const std::string& commit, const std::string& folder,
                               const std::vector<RemoteEntry>& entries) {
  auto r = store_.put_listing(endpoint_, repo_, commit, folder, scope_.write(), entries);
  if (!r && r.error().kind != cache::CacheError::Kind::kReadOnly) {
    spdlog::warn("cannot store the listing of \"{}\" in the cache: {}", folder, r.error().message);
  }
}

namespace {

std::string fresh_key(const std::string& commit, const std::string& folder) {
  return commit + '\0' + folder;
}

}  // namespace

// What the cache held for a folder, before the Hub's answer replaces it, against that answer:
// a difference is someone's doing (the listings of a commit never change).
bool CachedListingSource::differs(const std::string& commit, const std::string& folder,
                                  const std::vector<RemoteEntry>& hubs) {
  auto old = store_.get_listing(endpoint_, repo_, commit, folder, scope_.readable());
  return old && *old && **old != hubs;
}

void CachedListingSource::report_changed(const std::string& folder, std::size_t count,
                                         const std::string& commit) {
  spdlog::warn(
      "the cached listing of \"{}\" ({} folder{} in all) differs from the Hub's at commit {}: "
      "someone who can write the cache changed it; serving the Hub's",
      folder, count, count == 1 ? "" : "s", commit);
}

std::vector<RemoteEntry> CachedListingSource::untrusted(const std::string& folder,
                                                        std::vector<RemoteEntry> entries,
                                                        const std::string& why) {
  std::lock_guard lock(mu_);
  if (!std::exchange(warned_, true)) {
    spdlog::warn(
        "{}: listing \"{}\" (and others) from the shared cache as it is, trusting every user "
        "who can write the cache for the files' hashes",
        why, folder);
  }
  return entries;
}

Expected<std::vector<RemoteEntry>, FsErr> CachedListingSource::list(const std::string& commit,
                                                                    const std::string& folder) {
  auto cached = store_.get_listing(endpoint_, repo_, commit, folder, scope_.readable());
  const bool have = cached && *cached;
  if (have && gate_.believes_records()) return std::move(**cached);
  if (have && hub_.offline()) return untrusted(folder, std::move(**cached), "offline");
  std::optional<std::vector<RemoteEntry>> fresh;
  {
    std::lock_guard lock(mu_);
    if (const auto it = fresh_.find(fresh_key(commit, folder)); it != fresh_.end()) {
      fresh = std::move(it->second);
      fresh_.erase(it);
    }
  }
  if (!fresh) {
    auto listed = from_hub(commit, folder);
    if (!listed) {
      if (have && hub::unreachable(listed.error())) {
        return untrusted(folder, std::move(**cached), "the Hub is unreachable");
      }
      return unexpected(hub::to_fs_error(listed.error(), hub::Asked::kListing));
    }
    fresh = std::move(*listed);
  }
  return std::move(*fresh);
}

Expected<std::vector<RemoteEntry>, hub::HubError> CachedListingSource::from_hub(
    const std::string& commit, const std::string& folder) {
  const auto deadline = Clock::now() + timeout_;
  auto all = hub_.list_folder(commit, folder, true, deadline, kSubtreePages);
  if (!all && (all.error().code == "TooManyPages" || all.error().code == "TooManyEntries")) {
    // A huge subtree: list just this folder; its subfolders are listed when used.
    auto direct = hub_.list_folder(commit, folder, false, deadline);
    if (!direct) {
      spdlog::error("listing \"{}\" failed: {}", folder, direct.error().describe());
      return unexpected(direct.error());
    }
    if (!gate_.believes_records() && differs(commit, folder, *direct)) {
      report_changed(folder, 1, commit);
    }
    keep(commit, folder, *direct);
    return std::move(direct).value();
  }
  if (!all) {
    if (all.error().kind != hub::HubErrorKind::kNotFound) {
      spdlog::error("listing \"{}\" failed: {}", folder, all.error().describe());
    }
    return unexpected(all.error());
  }
  // Split the subtree into one listing per folder, and keep them all.
  std::map<std::string, std::vector<RemoteEntry>> by_folder;
  by_folder[folder];
  for (const auto& e : *all) {
    const auto slash = e.path.rfind('/');
    by_folder[slash == std::string::npos ? "" : e.path.substr(0, slash)].push_back(e);
    if (e.is_dir()) by_folder[e.path];
  }
  std::size_t differ = 0;
  std::string first;
  std::vector<cache::MetadataStore::FolderListing> all_folders;
  all_folders.reserve(by_folder.size());
  for (const auto& [f, entries] : by_folder) {
    if (!gate_.believes_records() && differs(commit, f, entries) && differ++ == 0) first = f;
    all_folders.push_back({f, &entries});
  }
  if (auto r = store_.put_listings(endpoint_, repo_, commit, scope_.write(), all_folders);
      !r && r.error().kind != cache::CacheError::Kind::kReadOnly) {
    spdlog::warn("cannot store the listings of \"{}\" in the cache: {}", folder, r.error().message);
  }
  if (differ != 0) report_changed(first, differ, commit);
  auto mine = std::move(by_folder[folder]);
  if (!gate_.believes_records()) {
    // The store may be rewritten by others at any time: the subfolders just listed are kept
    // here for the namespace's next questions.
    std::lock_guard lock(mu_);
    for (auto& [f, entries] : by_folder) {
      if (f != folder) fresh_[fresh_key(commit, f)] = std::move(entries);
    }
  }
  return mine;
}

}  // namespace whfs
