#include "fs/hub/offline_hub.h"

namespace whfs::hub {
namespace {

HubError offline_error(std::string_view what) {
  return HubError{HubErrorKind::kUnavailable,
                  "offline: " + std::string(what) + " is not in the cache",
                  0,
                  "",
                  "",
                  ""};
}

}  // namespace

Expected<Revision, HubError> OfflineHub::resolve_revision(std::string_view revision, Deadline) {
  return unexpected(offline_error("revision " + std::string(revision)));
}

Expected<std::vector<RemoteEntry>, HubError> OfflineHub::list_folder(std::string_view,
                                                                     std::string_view folder, bool,
                                                                     Deadline, std::size_t) {
  return unexpected(offline_error("the listing of \"" + std::string(folder) + "\""));
}

Expected<void, HubError> OfflineHub::stream_range(const FileRef& file, std::uint64_t, std::uint64_t,
                                                  Deadline, const CancelFlag*, ChunkFn) {
  return unexpected(offline_error(file.path));
}

}  // namespace whfs::hub
