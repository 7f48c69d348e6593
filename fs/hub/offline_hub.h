#pragma once
// The Hub of an offline mount (option offline, HF_HUB_OFFLINE): every call fails at once with
// kUnavailable, so anything the cache does not hold is an error instead of a request.

#include "fs/hub/hub_client.h"

namespace whfs::hub {

class OfflineHub final : public HubClient {
 public:
  Expected<Revision, HubError> resolve_revision(std::string_view revision,
                                                Deadline deadline) override;
  Expected<std::vector<RemoteEntry>, HubError> list_folder(std::string_view commit,
                                                           std::string_view folder, bool recursive,
                                                           Deadline deadline,
                                                           std::size_t max_pages) override;
  Expected<void, HubError> stream_range(const FileRef& file, std::uint64_t offset,
                                        std::uint64_t length, Deadline deadline,
                                        const CancelFlag* abandon, ChunkFn consume) override;
  const HubStats& stats() const override { return stats_; }
  void cancel() override {}
  bool offline() const override { return true; }

 private:
  HubStats stats_;
};

}  // namespace whfs::hub
