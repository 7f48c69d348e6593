#pragma once
// MetadataRecords: the MetadataStore of the LMDB block cache (internal to cache/): revisions
// in the revisions DB, listings, wheel metadata and content grants in the listings DB
// (metadata_codec.h).

#include "cache/metadata_store.h"
#include "cache/txn_engine.h"

namespace whfs::cache {

class MetadataRecords final : public MetadataStore {
 public:
  explicit MetadataRecords(TxnEngine& engine) : engine_(engine) {}
  MetadataRecords(const MetadataRecords&) = delete;
  MetadataRecords& operator=(const MetadataRecords&) = delete;

  Result<void> put_revision(std::string_view endpoint, std::string_view repo, std::string_view rev,
                            Audience audience, std::string_view commit,
                            std::chrono::system_clock::time_point resolved_at) override;
  Result<std::optional<RevisionRecord>> get_revision(std::string_view endpoint,
                                                     std::string_view repo, std::string_view rev,
                                                     Audiences readable) override;
  Result<void> put_listing(std::string_view endpoint, std::string_view repo,
                           std::string_view commit, std::string_view folder, Audience audience,
                           const std::vector<RemoteEntry>& entries) override;
  Result<void> put_listings(std::string_view endpoint, std::string_view repo,
                            std::string_view commit, Audience audience,
                            const std::vector<FolderListing>& listings) override;
  Result<std::optional<std::vector<RemoteEntry>>> get_listing(std::string_view endpoint,
                                                              std::string_view repo,
                                                              std::string_view commit,
                                                              std::string_view folder,
                                                              Audiences readable) override;
  Result<void> put_wheel_metadata(std::string_view content_id, Audience audience,
                                  const WheelMetadataRecord& record) override;
  Result<std::optional<WheelMetadataRecord>> get_wheel_metadata(std::string_view content_id,
                                                                Audiences readable) override;

  // BlockStore::grant and granted, for the content `content_id` (ContentId::to_string()).
  Result<void> grant(std::string_view content_id, Audience audience);
  Result<bool> granted(std::string_view content_id, Audiences readable);

 private:
  // The first of `keys` (one per readable audience) the DB holds, decoded by `decode`; the
  // index of the key it was found under, or nullopt. `garbage` is set when a record held under
  // one of the keys does not decode.
  template <typename Decode>
  Result<std::optional<std::size_t>> first_of(lmdb::Dbi db, const std::vector<MetadataKey>& keys,
                                              Decode decode, bool& garbage);

  TxnEngine& engine_;
};

}  // namespace whfs::cache
