#pragma once
// The Hub client's typed errors. to_fs_error() turns them into a filesystem call's error (FsErr)
// in one place; fs/fuse's errno table turns that into an errno.

#include <string>

#include "fs/common/fs_error.h"
#include "fs/hub/http.h"

namespace whfs::hub {

enum class HubErrorKind {
  kNotFound,      // repo (or private without a token), revision or entry; `code` says which
  kUnauthorized,  // the token was refused ("Invalid credentials in Authorization header")
  kForbidden,     // gated repo without access, disabled repo
  kRateLimited,   // 429 still after retries (or the wait would pass the deadline)
  kTimeout,       // the call's deadline passed (stall, slow server, long backoff)
  kUnavailable,   // connect errors, resets, 5xx still after retries
  kCorrupt,       // a body that cannot be right: truncated, wrong Content-Range, wrong size
  kBadResponse,   // a protocol violation: malformed JSON, bad Link header, redirect loop
  kCancelled,     // the client is shutting down
};

const char* to_string(HubErrorKind kind);

struct HubError {
  HubErrorKind kind = HubErrorKind::kUnavailable;
  std::string message;     // one clear sentence, never a token or a signed URL
  int http_status = 0;     // 0 when no response was received
  std::string code;        // X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound, ...)
  std::string request_id;  // X-Request-Id, quoted in logs
  // The cause alone, for a first line a person reads ("connection refused (4 tries in 5 s)",
  // "HTTP 404: repository not found"); empty: `message` is all there is.
  std::string cause;

  std::string describe() const;  // "<kind>: <message> (HTTP 404, request id ...)"
  std::string short_cause() const { return cause.empty() ? describe() : cause; }
};

// What was asked of the Hub when it failed: the same failure means different things.
enum class Asked {
  kListing,  // a folder of the tree: a missing repo, revision or path is ENOENT
  kContent,  // the bytes of a file the listing has: the Hub cannot find them, so EIO
};

// What a filesystem call answers for a Hub failure, the one mapping: a refused token or a
// gated repo is EACCES, a missing entry ENOENT or EIO (see Asked), the deadline a timeout,
// shutting down an interrupted call, everything else EIO. fs/fuse turns the kind into an errno
// without looking at the Hub's error again.
FsErr to_fs_error(const HubError& e, Asked asked);

// Whether the Hub could not be reached (or would not answer in time): what an offline fallback
// stands in for, as opposed to an answer (not found, refused).
bool unreachable(const HubError& e);

// The error an HTTP answer of the Hub stands for (401, 403, 404 with its X-Error-Code, 416,
// 429, 5xx ...), in one sentence that starts with `what`; `sent_token` tells a private repo
// from a missing one in the words.
HubError response_error(const HttpResponse& resp, const std::string& what, bool sent_token);

}  // namespace whfs::hub
