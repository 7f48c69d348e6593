#include "fs/daemon/commit_at_mount.h"

#include <spdlog/spdlog.h>

#include <ctime>
#include <optional>

namespace whfs {
namespace {

using namespace std::chrono_literals;

std::int64_t parse_iso8601(const std::string& s) {
  std::tm tm{};
  if (s.size() < 19 || strptime(s.substr(0, 19).c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) {
    return 0;
  }
  return timegm(&tm);
}

// Whose records an offline mount may use, in words.
std::string whose(const cache::AccessScope& scope) {
  return scope.has_credential() ? "this token" : "a mount without a token";
}

}  // namespace

std::int64_t mtime_of(const hub::Revision& rev) {
  const std::int64_t t = parse_iso8601(rev.last_modified);
  return t != 0 ? t : std::time(nullptr);
}

Expected<hub::Revision, hub::HubError> resolve_and_record(hub::HubClient& hub,
                                                          cache::BlockCache& cache,
                                                          const RevisionKey& key,
                                                          cache::AccessScope& scope,
                                                          Deadline deadline) {
  auto rev = hub.resolve_revision(key.revision, deadline);
  if (!rev) return rev;
  scope.set_repo_public(rev->is_public);
  if (auto r = cache.put_revision(key.endpoint, key.repo, key.revision, scope.write(), rev->commit,
                                  std::chrono::system_clock::now());
      !r) {
    spdlog::warn("cannot record the revision in the cache: {}", r.error().message);
  }
  return rev;
}

Expected<MountCommit, std::string> commit_at_mount(hub::HubClient& hub, cache::BlockCache& cache,
                                                   const RevisionKey& key,
                                                   cache::AccessScope& scope,
                                                   const std::string& cache_dir) {
  auto known = cache.get_revision(key.endpoint, key.repo, key.revision, scope.readable());
  std::optional<cache::RevisionRecord> last;
  if (known && *known) last = **known;
  MountCommit out;
  const std::string what = key.repo + "@" + key.revision;
  if (!hub.offline()) {
    // With a cached commit to fall back on, do not keep the user waiting for a slow Hub.
    const auto deadline = Clock::now() + (last ? 3s : 8s);
    auto rev = resolve_and_record(hub, cache, key, scope, deadline);
    if (rev) {
      out.commit = rev->commit;
      out.mtime = mtime_of(*rev);
      return out;
    }
    // The first line is the cause, short; what to check comes after it.
    if (!hub::unreachable(rev.error())) {
      std::string msg = "cannot mount " + what + ": " + rev.error().short_cause();
      if (rev.error().kind == hub::HubErrorKind::kNotFound) {
        msg +=
            "\n  check the repository's name (owner/name, as on the Hub), revision= "
            "(a branch, tag, commit or refs/pr/N), and for a private repository a token "
            "(HF_TOKEN or token_file=)";
      }
      msg += "\n  " + rev.error().describe();
      return unexpected(msg);
    }
    if (!last) {
      return unexpected("cannot reach the Hub at " + key.endpoint + ": " +
                        rev.error().short_cause() + "\n  and the cache " + cache_dir +
                        " has no copy of " + what + " for " + whose(scope) +
                        " to serve offline (check the network, proxy= or HTTPS_PROXY)");
    }
    spdlog::warn(
        "the Hub is unreachable ({}); serving the last known commit {} of {} "
        "from the cache (offline fallback)",
        rev.error().describe(), last->commit, what);
    out.offline_note = ", offline fallback";
  } else {
    if (!last) {
      return unexpected("offline, and the cache in " + cache_dir + " has no copy of " + what +
                        " for " + whose(scope) +
                        "\n  (what another credential fetched is not served without it)");
    }
    out.offline_note = ", offline";
  }
  scope.set_repo_public(last->audience == cache::kPublicAudience);
  out.commit = last->commit;
  out.mtime = std::chrono::system_clock::to_time_t(last->resolved_at);
  return out;
}

}  // namespace whfs
