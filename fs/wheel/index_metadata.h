#pragma once
// The index pages' source of METADATA (ns::IndexMetadataSource) from the wheels themselves.

#include "fs/namespace/target_folder.h"
#include "fs/wheel/wheel_metadata.h"

namespace whfs::wheel {

class WheelIndexMetadata : public ns::IndexMetadataSource {
 public:
  explicit WheelIndexMetadata(WheelMetadataService& service) : service_(service) {}
  Expected<ns::IndexMetadata, std::string> metadata(const RemoteEntry& entry,
                                                    const std::string& commit) override;

 private:
  WheelMetadataService& service_;
};

}  // namespace whfs::wheel
