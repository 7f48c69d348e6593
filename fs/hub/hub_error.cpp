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

FsErr to_fs_error(const HubError& e) {
  switch (e.kind) {
    case HubErrorKind::kNotFound:
      return {FsErrorKind::kNotFound, e.describe()};
    case HubErrorKind::kUnauthorized:
    case HubErrorKind::kForbidden:
      return {FsErrorKind::kAccess, e.describe()};
    case HubErrorKind::kTimeout:
      return {FsErrorKind::kTimedOut, e.describe()};
    case HubErrorKind::kCancelled:
      return {FsErrorKind::kInterrupted, e.describe()};
    default:
      return {FsErrorKind::kIo, e.describe()};
  }
}

}  // namespace whfs::hub
