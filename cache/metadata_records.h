#pragma once
// MetadataRecords: the MetadataStore of the LMDB block cache (internal to cache/): revisions
// in the revisions DB, listings and wheel metadata in the listings DB (metadata_codec.h).

#include "cache/metadata_store.h"
#include "cache/txn_engine.h"

namespace whfs::cache {

class MetadataRecords final : public MetadataStore {
 public:
  explicit MetadataRecords(TxnEngine& engine) : engine_(engine) {}
  MetadataRecords(const MetadataRecords&) = delete;
  MetadataRecords& operator=(const MetadataRecords&) = delete;

  Result<void> put_revision(std::string_view endpoint, std::string_view repo, std::string_view rev,
                            std::string_view commit,
                            std::chrono::system_clock::time_point resolved_at) override;
  Result<std::optional<RevisionRecord>> get_revision(std::string_view endpoint,
                                                     std::string_view repo,
                                                     std::string_view rev) override;
  Result<void> put_listing(std::string_view endpoint, std::string_view repo,
                           std::string_view commit, std::string_view folder,
                           const std::vector<RemoteEntry>& entries) override;
  Result<void> put_listings(std::string_view endpoint, std::string_view repo,
                            std::string_view commit,
                            const std::vector<FolderListing>& listings) override;
  Result<std::optional<std::vector<RemoteEntry>>> get_listing(std::string_view endpoint,
                                                              std::string_view repo,
                                                              std::string_view commit,
                                                              std::string_view folder) override;
  Result<void> put_wheel_metadata(std::string_view content_id,
                                  const WheelMetadataRecord& record) override;
  Result<std::optional<WheelMetadataRecord>> get_wheel_metadata(
      std::string_view content_id) override;

 private:
  TxnEngine& engine_;
};

}  // namespace whfs::cache
