#pragma once
// Who may see what a shared cache holds. Daemons with different credentials (the CSI plugin's
// volumes, a host mount beside them) may share one cache directory; each record says whose it
// is, its audience:
//   "public"       fetched without a credential, or from a repository the Hub said is public
//                  (neither private nor gated): any daemon may see it;
//   "id:<32 hex>"  fetched with a credential from a private or gated repository (or one whose
//                  publicity is unknown): only a daemon holding the same credential for the
//                  same endpoint (credential_audience()).
// Revisions, listings and wheel METADATA records are keyed by their audience. A content's bytes
// are keyed by their hash alone (one copy for everybody) and carry grants: the audiences that
// may read them (BlockStore::granted). How a daemon earns a grant is the read path's business
// (fs/reader/fetcher.h).

#include <atomic>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace whfs::cache {

inline constexpr std::string_view kPublicAudience = "public";

// The audience a record is stored under (a type of its own: never mistaken for a key's other
// parts).
struct Audience {
  explicit Audience(std::string_view n) : name(n) {}
  std::string_view name;
};
// The audiences a lookup may read, in the order it prefers them (AccessScope::readable()).
using Audiences = std::span<const std::string>;

// "public" without a token, else "id:" + 32 hex digits of SHA-256 over the endpoint and the
// token (never the token itself: the cache may be readable by a group).
std::string credential_audience(std::string_view endpoint, std::string_view token);

// One daemon's audiences: what it may read, and what it records its fetches under.
class AccessScope {
 public:
  // `own`: credential_audience() of the daemon's credential at mount.
  explicit AccessScope(std::string own);

  // Its own audience first, then "public" (one entry when they are the same).
  const std::vector<std::string>& readable() const { return readable_; }
  // "public" once the Hub said the repository is public, else its own audience.
  Audience write() const { return Audience(repo_public() ? kPublicAudience : own_); }
  const std::string& own() const { return own_; }
  bool has_credential() const { return own_ != kPublicAudience; }

  // What the Hub said of the repository at the last resolution (or what the cached record
  // used offline was filed under).
  void set_repo_public(bool is_public) { repo_public_.store(is_public); }
  bool repo_public() const { return repo_public_.load(); }

 private:
  const std::string own_;
  const std::vector<std::string> readable_;
  std::atomic<bool> repo_public_{false};
};

}  // namespace whfs::cache
