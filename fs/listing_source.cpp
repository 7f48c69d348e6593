#include "fs/listing_source.h"

#include <spdlog/spdlog.h>

#include <map>

namespace whfs {

CachedListingSource::CachedListingSource(hub::HubClient& hub, cache::MetadataStore& store,
                                         std::string endpoint, std::string repo,
                                         std::chrono::seconds timeout, std::size_t prefill_pages)
    : hub_(hub),
      store_(store),
      endpoint_(std::move(endpoint)),
      repo_(std::move(repo)),
      timeout_(timeout),
      prefill_pages_(prefill_pages) {}

void CachedListingSource::keep(const std::string& commit, const std::string& folder,
                               const std::vector<RemoteEntry>& entries) {
  auto r = store_.put_listing(endpoint_, repo_, commit, folder, entries);
  if (!r && r.error().kind != cache::CacheError::Kind::kReadOnly) {
    spdlog::warn("cannot store the listing of \"{}\" in the cache: {}", folder, r.error().message);
  }
}

Expected<std::vector<RemoteEntry>, FsErr> CachedListingSource::list(const std::string& commit,
                                                                    const std::string& folder) {
  if (auto cached = store_.get_listing(endpoint_, repo_, commit, folder); cached && *cached) {
    return std::move(**cached);
  }
  const auto deadline = Clock::now() + timeout_;
  auto all = hub_.list_folder(commit, folder, true, deadline, prefill_pages_);
  if (!all && (all.error().code == "TooManyPages" || all.error().code == "TooManyEntries")) {
    // A huge subtree: list just this folder; its subfolders are listed when used.
    auto direct = hub_.list_folder(commit, folder, false, deadline);
    if (!direct) {
      spdlog::error("listing \"{}\" failed: {}", folder, direct.error().describe());
      return unexpected(hub::to_fs_error(direct.error()));
    }
    keep(commit, folder, *direct);
    return std::move(direct).value();
  }
  if (!all) {
    if (all.error().kind != hub::HubErrorKind::kNotFound) {
      spdlog::error("listing \"{}\" failed: {}", folder, all.error().describe());
    }
    return unexpected(hub::to_fs_error(all.error()));
  }
  // Split the subtree into one listing per folder, and keep them all.
  std::map<std::string, std::vector<RemoteEntry>> by_folder;
  by_folder[folder];
  for (const auto& e : *all) {
    const auto slash = e.path.rfind('/');
    by_folder[slash == std::string::npos ? "" : e.path.substr(0, slash)].push_back(e);
    if (e.is_dir()) by_folder[e.path];
  }
  for (const auto& [f, entries] : by_folder) keep(commit, f, entries);
  return std::move(by_folder[folder]);
}

}  // namespace whfs
