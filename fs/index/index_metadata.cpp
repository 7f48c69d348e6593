#include "fs/index/index_metadata.h"

#include "fs/common/hash.h"
#include "fs/wheel/wheel_metadata.h"

namespace whfs::index {

Expected<ns::IndexMetadata, std::string> WheelIndexMetadata::metadata(const RemoteEntry& entry,
                                                                      const std::string& commit) {
  auto id = cache::ContentId::of(entry);
  if (!id) return unexpected(entry.path + ": the listing gives no hash for it");
  auto m = service_.get(reader::FileContent{commit, entry.path, entry.size, *id});
  if (!m) return unexpected(m.error());
  auto served = std::make_shared<const std::string>(wheel::served_metadata((*m)->bytes));
  const std::string sha = sha256_hex(*served);
  return ns::IndexMetadata{std::move(served), sha, (*m)->requires_python};
}

}  // namespace whfs::index
