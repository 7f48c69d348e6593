#pragma once
// The index pages' source of METADATA (ns::IndexMetadataSource) from the wheels themselves.

#include "fs/index/metadata_service.h"
#include "fs/namespace/target_folder.h"

namespace whfs::index {

class WheelIndexMetadata : public ns::IndexMetadataSource {
 public:
  explicit WheelIndexMetadata(WheelMetadataService& service) : service_(service) {}
  Expected<ns::IndexMetadata, std::string> metadata(const RemoteEntry& entry,
                                                    const std::string& commit) override;

 private:
  WheelMetadataService& service_;
};

}  // namespace whfs::index
