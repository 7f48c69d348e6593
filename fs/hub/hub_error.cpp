#include "fs/hub/hub_error.h"

namespace whfs::hub {

const char* to_string(HubErrorKind kind) {
  switch (kind) {
    case HubErrorKind::kNotFound:
      return "not found";
    case HubErrorKind::kUnauthorized:
      return "unauthorized";
    case HubErrorKind::kForbidden:
      return "forbidden";
    case HubErrorKind::kRateLimited:
      return "rate limited";
    case HubErrorKind::kTimeout:
      return "timeout";
    case HubErrorKind::kUnavailable:
      return "unavailable";
    case HubErrorKind::kCorrupt:
      return "corrupt response";
    case HubErrorKind::kBadResponse:
      return "bad response";
    case HubErrorKind::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

std::string HubError::describe() const {
  std::string out = std::string(to_string(kind)) + ": " + message;
  if (http_status != 0 || !request_id.empty()) {
    out += " (";
    if (http_status != 0) out += "HTTP " + std::to_string(http_status);
    if (!request_id.empty())
      out += (http_status != 0 ? ", request id " : "request id ") + request_id;
    out += ")";
  }
  return out;
}

FsErr to_fs_error(const HubError& e, Asked asked) {
  switch (e.kind) {
    case HubErrorKind::kNotFound:
      return {asked == Asked::kListing ? FsErrorKind::kNotFound : FsErrorKind::kIo, e.describe()};
    case HubErrorKind::kUnauthorized:
    case HubErrorKind::kForbidden:
      return {FsErrorKind::kAccess, e.describe()};
    case HubErrorKind::kTimeout:
      return {FsErrorKind::kTimedOut, e.describe()};
    case HubErrorKind::kCancelled:
      return {FsErrorKind::kInterrupted, e.describe()};
    case HubErrorKind::kRateLimited:
    case HubErrorKind::kUnavailable:
    case HubErrorKind::kCorrupt:
    case HubErrorKind::kBadResponse:
      return {FsErrorKind::kIo, e.describe()};
  }
  return {FsErrorKind::kIo, e.describe()};  // (not reached: every kind is handled above)
}

HubError response_error(const HttpResponse& resp, const std::string& what, bool sent_token) {
  HubError e;
  e.http_status = resp.status;
  e.code = resp.header("x-error-code");
  e.request_id = resp.header("x-request-id");
  const std::string server_msg = resp.header("x-error-message");
  const std::string said = server_msg.empty() ? "" : " (Hub: " + server_msg + ")";
  switch (resp.status) {
    case 401:
      if (server_msg.find("Invalid credentials") != std::string::npos) {
        e.kind = HubErrorKind::kUnauthorized;
        e.message = what +
                    ": the Hub refused the token (invalid or expired); check HF_TOKEN "
                    "or the token file";
      } else if (e.code == "GatedRepo") {
        e.kind = HubErrorKind::kForbidden;
        e.message = what +
                    ": gated repository; request access on the Hub's website and use "
                    "a token that has it" +
                    said;
      } else {
        e.kind = HubErrorKind::kNotFound;
        e.code = e.code.empty() ? "RepoNotFound" : e.code;
        e.message = what + ": repository not found, or private and no token was sent";
      }
      break;
    case 403:
      e.kind = HubErrorKind::kForbidden;
      e.message =
          what +
          (e.code == "GatedRepo" ? ": gated repository and this token has no access; request "
                                   "access on the Hub's website"
                                 : ": access denied") +
          said;
      break;
    case 404:
      e.kind = HubErrorKind::kNotFound;
      if (e.code == "RevisionNotFound") {
        e.message = what + ": revision not found" + said;
      } else if (e.code == "EntryNotFound") {
        e.message = what + ": no such file or folder at this commit";
      } else {
        e.message =
            what +
            (sent_token ? ": repository not found, or this token has no access" : ": not found") +
            said;
      }
      break;
    case 416:
      e.kind = HubErrorKind::kCorrupt;
      e.message = what + ": range not satisfiable; the file is shorter than listed";
      break;
    case 429:
      e.kind = HubErrorKind::kRateLimited;
      e.message = what + ": rate limited by the Hub" + said;
      break;
    case 408:
      e.kind = HubErrorKind::kTimeout;
      e.message = what + ": the server timed out the request";
      break;
    default:
      e.kind = resp.status >= 500 ? HubErrorKind::kUnavailable : HubErrorKind::kBadResponse;
      e.message = what + ": HTTP " + std::to_string(resp.status) + said;
  }
  // The cause without the URL, for a first line.
  if (e.message.starts_with(what + ": ")) {
    e.cause = e.message.substr(what.size() + 2);
    if (e.cause.find("HTTP ") == std::string::npos) {
      e.cause += " (HTTP " + std::to_string(resp.status) + ")";
    }
  }
  return e;
}

bool unreachable(const HubError& e) {
  return e.kind == HubErrorKind::kUnavailable || e.kind == HubErrorKind::kTimeout ||
         e.kind == HubErrorKind::kRateLimited;
}

}  // namespace whfs::hub
