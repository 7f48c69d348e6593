#pragma once
// The Hub as the rest of wheelhouse-fs sees it: resolve a revision to a commit, list folders at
// that commit, stream byte ranges of a file at that commit. CurlHubClient (make_hub_client) asks
// the Hub, OfflineHub (offline_hub.h) answers an offline mount without a request, and tests
// subclass it to inject faults. CurlHubClient speaks HTTP through HubTransport (transport.h),
// the one Hub transport, which `wheelhouse publish` (publish::HubWriter) uses too: the token's
// reach, redirects, retries and timeouts are decided there for both.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fs/common/cancel.h"
#include "fs/common/expected.h"
#include "fs/common/function_ref.h"
#include "fs/common/remote_entry.h"
#include "fs/hub/http.h"
#include "fs/hub/hub_error.h"
#include "fs/hub/retry.h"
#include "fs/hub/transport.h"

namespace whfs::hub {

enum class RepoType { kDataset, kModel };

struct RepoRef {
  RepoType type = RepoType::kDataset;
  std::string id;  // "namespace/name"
};

// Accepts "ns/name", "datasets/ns/name" and "models/ns/name"; checks the Hub's rules for ids
// (1-96 characters of [A-Za-z0-9_.-] per part, no "--" or "..", no leading/trailing - or .).
Expected<RepoRef, std::string> parse_repo_ref(std::string_view text);

struct Revision {
  std::string commit;         // 40 hex
  std::string last_modified;  // ISO-8601, may be empty
  // The Hub said the repository is neither private nor gated: what is fetched from it may be
  // shared with every daemon of a shared cache (cache/audience.h).
  bool is_public = false;
};

// A file at a pinned commit, as listed.
struct FileRef {
  std::string commit;
  std::string path;
  std::uint64_t size = 0;
};

class HubClient {
 public:
  virtual ~HubClient() = default;

  virtual Expected<Revision, HubError> resolve_revision(std::string_view revision,
                                                        Deadline deadline) = 0;

  // The entries of `folder` ("" = root) at `commit`: direct children, or every descendant
  // (folders included) when `recursive`. Unsafe names are skipped with a warning each. A
  // listing longer than `max_pages` pages (0: the configured limit) is an error with code
  // "TooManyPages", never a truncated result.
  virtual Expected<std::vector<RemoteEntry>, HubError> list_folder(std::string_view commit,
                                                                   std::string_view folder,
                                                                   bool recursive,
                                                                   Deadline deadline,
                                                                   std::size_t max_pages = 0) = 0;

  // Receives the bytes of stream_range in order, as they arrive; valid only during the call.
  using ChunkFn = FunctionRef<void(std::span<const std::byte> bytes)>;
  // The file's bytes [offset, offset + length) (which must not pass the end of the file)
  // handed to `consume` in order, each byte once (across retries too: a retry asks for the
  // rest), with no buffer of the whole range: the caller keeps what it needs (a download stores
  // whole blocks from a buffer of its own that stays in the CPU's cache). All of them or an
  // error: a short or wrong body never counts as data, though the bytes handed over before an
  // error are its well-formed front (still to be verified, as every byte is). `abandon` (may be
  // null): raised when nobody wants the bytes any more; the call then ends at once with
  // kCancelled, its connection dropped.
  virtual Expected<void, HubError> stream_range(const FileRef& file, std::uint64_t offset,
                                                std::uint64_t length, Deadline deadline,
                                                const CancelFlag* abandon, ChunkFn consume) = 0;

  virtual const HubStats& stats() const = 0;

  // Makes calls in flight fail with kCancelled promptly (shutdown).
  virtual void cancel() = 0;

  // True for the Hub of an offline mount (offline_hub.h): nothing is ever requested.
  virtual bool offline() const { return false; }
};

struct HubClientConfig {
  TransportConfig transport;  // the endpoint, the token, retries, HTTP (its proxy too)
  RepoRef repo;
  // A listing with more pages or entries is an error, never truncated: together with the
  // entries per page (listing.h) they bound what one listing may make the daemon hold.
  std::size_t max_pages = 5000;
  std::size_t max_entries = 250000;
  // At most this many API requests (listings, revisions, paths-info) on the wire at once: the
  // Hub's rate limits count them per user and 5-minute window, and many walkers listing at
  // once must not spend them in a burst. Downloads (resolve/CDN) are not counted here.
  std::size_t max_api_requests = 4;
  // A CDN URL is used until this long before it expires (or for `default_url_ttl` when its
  // expiry cannot be read from it).
  std::chrono::seconds url_expiry_margin{60};
  std::chrono::seconds default_url_ttl{50 * 60};
};

// option > HF_ENDPOINT > https://huggingface.co, trailing "/" removed.
std::string resolve_endpoint(std::string_view option);

std::unique_ptr<HubClient> make_hub_client(HubClientConfig config);

}  // namespace whfs::hub
